#!/usr/bin/env python3
"""Benchmark: what ateom adds to runsc's own time, idle RSS, serve-to-SERVING.

    python benchmarks/bench_daemon.py [--fixture OUT] [-n 5] [--only run]   (as root; needs runsc)

The demo actor: a sandbox root `_pause` plus one app container (busybox),
given every GPU of the fixture's CDI spec (--fixture: the output of
``python benchmarks/gpu_fixture.py OUT --gpus 8 --libs 40``, or of the shared builder
of the same shape; without it, a 2-GPU simulated spec is built). Debian's runsc has no
--nvproxy, so both sides go through the same shim, which drops the flag.

Side by side, n times each, fresh actor every time, the two sides' order
alternating from one iteration to the next (the machine's load drifts):
- run:        runsc create+start of _pause and app on bundles already prepared
              (injected) vs. RunWorkload over the unix socket (validate, plan,
              inject, create+start);
- checkpoint: runsc checkpoint + delete of a single-container actor vs.
              CheckpointWorkload (checkpoint, list files, tear down);
- restore:    runsc restore of that image vs. RestoreWorkload.
Also: idle daemon RSS (VmRSS after the runs) and `ateom serve` start to
health SERVING. Prints a table and one JSON line with every figure.

"runsc alone" runs exactly the command lines ateom runs (its own argv
builders, same global flags, a `-log` file per container, stdio appended to
a `<container>.log` per container in a per-actor log dir, an empty-pipe
stdin) through the same kind of reaper, from this process. What it does not
do is ateom's: validate, plan, inject, the phase log lines.

Where a Run's time goes, per side, from runsc's own log (each call's
``Args:`` and ``Exiting with status`` lines, microsecond wall clock):
with the caller's own start and return of each runsc call (this process's
clock; the daemon's ``runsc.*`` phase log lines), the four calls' time is
split into ``rpc`` (to the daemon's ``run`` phase: gRPC, wire parsing,
admission), ``pre`` (then to the first call: validate, plan, the root's
bundle), ``spawn`` (the caller's start of a call to runsc's main: spawn, the
shim, exec, Go start-up), ``runsc`` (main to exit), ``reap`` (exit to the
caller seeing it), ``between`` (one call's return to the next's start) and
``post`` (the last return to the RPC's).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from turns_actors import REPO  # noqa: F401 (this dir: puts REPO, and tests/, on sys.path)

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from ateom.daemon.logs import configure_logging
from ateom.daemon.sandbox.teardown import kill_sandbox_processes
from ateom.process.reaper import Reaper
from ateom.runsc.commands import RunscTarget, create_argv, start_argv
from ateom.runsc.probe import probe_runsc
from tests.support import build_busybox_bundle, build_fake_driver_libs, write_sim_gpu_spec

RUNSC = shutil.which("runsc") or "/usr/bin/runsc"
SERVING_WAIT = 60.0  # serve to SERVING takes about a second here; a bound, not a figure
FLAGS = ["--network=none", "--ignore-cgroups"]
SHIM = """#!/bin/sh
if [ "$1" = flags ]; then {real} flags 2>&1; printf '  -nvproxy\\n    \\tshim\\n'; exit 0; fi
for a; do shift; case "$a" in --nvproxy*) ;; *) set -- "$@" "$a" ;; esac; done
exec {real} "$@"
"""
FIGURES = ("run", "checkpoint", "restore")
# runsc's glog lines: "I1130 15:57:11.965555   17518 main.go:217] Args: [...]".
_GLOG = re.compile(r"^[IWEF](\d{4}) (\d\d:\d\d:\d\d\.\d{6})\s+(\d+) main\.go:\d+\] "
                   r"(Args: \[\S+ .*?(create|start|restore|checkpoint|kill|delete|list|state)"
                   r" |Exiting with status)")


def stats_ms(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    p99 = s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]
    return {"min": round(s[0] * 1000, 1), "median": round(statistics.median(s) * 1000, 1),
            "p99": round(p99 * 1000, 1)}


def runsc_calls(log_dir: Path) -> list[tuple[float, float, str]]:
    """(main, exit, subcommand) of every runsc call logged to `log_dir`'s stdio logs,
    in start order; wall-clock seconds (runsc logs local time without a year)."""
    year = time.localtime().tm_year
    started: dict[str, tuple[float, str]] = {}
    calls = []
    for path in sorted(log_dir.glob("*.log")):
        if path.name.endswith(".runsc.log"):
            continue
        for line in path.read_text(errors="replace").splitlines():
            m = _GLOG.match(line)
            if not m:
                continue
            stamp = datetime.datetime.strptime(f"{year}{m[1]} {m[2]}", "%Y%m%d %H:%M:%S.%f")
            t = stamp.timestamp()
            if m[5]:
                started[m[3]] = (t, m[5])
            elif m[3] in started:
                main, command = started.pop(m[3])
                calls.append((main, t, command))
    return sorted(calls)


def timeline(t0: float, t1: float, calls: list[tuple[float, float, str]],
             marks: list[tuple[float, float]], entered: float | None = None
             ) -> dict[str, float]:
    """Where [t0, t1] went (s): `calls` are runsc's own (main, exit) of each call,
    `marks` when the caller started and got back each call (same order).

    rpc: t0 to `entered` (the daemon's ``run`` phase began: gRPC, the handler's
    wire parsing, admission); pre: from there to the first call; spawn: the
    caller's start to runsc's main; runsc: main to exit; reap: exit to the
    caller's return; between: one return to the next start; post: the last
    return to t1. They add up to t1 - t0.
    """
    calls = [c for c in calls if t0 <= c[0] <= t1]
    if not calls or len(calls) != len(marks):
        return {}
    entered = t0 if entered is None else entered
    per_call = {}
    for k, (c, m) in enumerate(zip(calls, marks, strict=True)):
        name = f"{c[2]}{k // 2}"  # create0 start0 (the root) create1 start1 (the app)
        per_call[f"spawn:{name}"] = c[0] - m[0]
        per_call[f"runsc:{name}"] = c[1] - c[0]
    return {"rpc": entered - t0,
            "pre": marks[0][0] - entered,
            "spawn": sum(c[0] - m[0] for c, m in zip(calls, marks, strict=True)),
            "runsc": sum(c[1] - c[0] for c in calls),
            "reap": sum(m[1] - c[1] for c, m in zip(calls, marks, strict=True)),
            "between": sum(marks[k + 1][0] - marks[k][1] for k in range(len(marks) - 1)),
            "post": t1 - marks[-1][1], **per_call}


def phase_marks(daemon_log: Path, uid: str) -> tuple[float, list[tuple[float, float]]]:
    """When the daemon's ``run`` phase of actor `uid` began, and (start, end) of each
    ``runsc.*`` phase it logged for that actor, in order."""
    entered = 0.0
    marks = []
    for line in daemon_log.read_text().splitlines():
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("event") != "phase" or event.get("actor_uid") != uid:
            continue
        end = datetime.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
        span = (end.timestamp() - event["duration_ms"] / 1000, end.timestamp())
        if event["phase"] == "run":
            entered = span[0]
        elif str(event["phase"]).startswith("runsc."):
            marks.append(span)
    return entered, sorted(marks)


class Bench:
    def __init__(self, base: Path, fixture: Path | None) -> None:
        self.base = base
        self.actors = base / "actors"
        self.actors.mkdir(parents=True)  # the node agent's volume: SERVING needs it
        self.run_dir = base / "run"
        self.sock = self.run_dir / "ateom.sock"
        (base / "dev").mkdir(parents=True)
        # The Pod's GPU and the control nodes nvproxy opens (a GPU actor is refused
        # without them): stand-ins, as the fixture's spec points its nodes elsewhere.
        for node in ("nvidia0", "nvidiactl", "nvidia-uvm"):
            (base / "dev" / node).touch()
        if fixture is not None:
            self.spec_dir = fixture / "cdi"
        else:
            libs = build_fake_driver_libs(base / "lib64")
            self.spec_dir = base / "cdi"
            write_sim_gpu_spec(self.spec_dir, libs, gpus=2)
        self.shim = base / "bin" / "runsc"
        self.shim.parent.mkdir()
        self.shim.write_text(SHIM.format(real=RUNSC))
        self.shim.chmod(0o755)
        self.reaper = Reaper().start(reap_all=True)
        self.info = probe_runsc(str(self.shim), self._probe_runner)
        self.raw_phases: dict[str, list[float]] = {}
        # CPU the caller (the daemon; this process for runsc alone) used per Run.
        self.cpu: dict[str, list[float]] = {"runsc": [], "ateom": []}
        # Per side, one timeline per Run ({} when runsc's logs could not be matched).
        self.timelines: dict[str, list[dict[str, float]]] = {"runsc": [], "ateom": []}
        self.daemon: int | None = None

    def _probe_runner(self, argv: Sequence[str]) -> tuple[int, str]:
        done = self.reaper.run_capture(argv, timeout=60)
        return done.returncode, done.output

    # -- the daemon -----------------------------------------------------------

    def start_daemon(self) -> float:
        argv = [sys.executable, "-m", "ateom", "serve", "--socket", str(self.sock),
                "--actors-root", str(self.actors), "--run-dir", str(self.run_dir),
                "--runsc", str(self.shim), "--spec-dir", str(self.spec_dir),
                "--gpu-glob", str(self.base / "dev" / "nvidia[0-9]*"), "--kill-grace", "0",
                *[f"--runsc-global-flag={f}" for f in FLAGS]]
        started = time.perf_counter()
        log = os.open(self.base / "daemon.log",
                      os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        r, w = os.pipe()
        self.daemon = self.reaper.spawn(argv, stdin=r, stdout=log, stderr=log)
        for fd in (log, r, w):
            os.close(fd)
        # A gRPC channel that failed to connect backs off for ~1 s before it
        # retries, so wait for the socket first and use a fresh channel per try.
        deadline = started + SERVING_WAIT
        while True:
            if time.perf_counter() > deadline:
                raise SystemExit(f"daemon not SERVING after {SERVING_WAIT:.0f} s (not_ready"
                                 f" says why): see {self.base / 'daemon.log'}")
            if self.reaper.wait(self.daemon, timeout=0) is not None:
                raise SystemExit(f"daemon died: see {self.base / 'daemon.log'}")
            if self.sock.exists():
                channel = grpc.insecure_channel(f"unix:{self.sock}")
                try:
                    status = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=1).status
                    if status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.RpcError:
                    pass
                channel.close()
            time.sleep(0.002)
        elapsed = time.perf_counter() - started
        self.channel = channel
        self.stub = pb_grpc.AteomStub(channel)
        return elapsed

    def stop_daemon(self) -> None:
        assert self.daemon is not None
        self.channel.close()
        os.kill(self.daemon, signal.SIGTERM)
        self.reaper.wait(self.daemon, timeout=60)

    def cpu_s(self, pid: int | None = None) -> float:
        """CPU time (s) every thread of `pid` (the daemon) ran so far (schedstat, ns)."""
        total = 0
        for task in Path(f"/proc/{pid or self.daemon}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # a thread that ended meanwhile
        return total / 1e9

    def rss_mib(self) -> float:
        assert self.daemon is not None
        for line in Path(f"/proc/{self.daemon}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    # -- actors -----------------------------------------------------------------

    def dirs(self, uid: str) -> pb.ActorDirs:
        root = self.actors / uid
        return pb.ActorDirs(root_dir=str(root), oci_bundle_dir=str(root / "bundles"),
                            checkpoint_dir=str(root / "ckpt"), restore_dir=str(root / "restore"))

    def make_actor(self, uid: str, app: bool) -> Path:
        bundles = self.actors / uid / "bundles"
        build_busybox_bundle(bundles / "_pause", ["sh", "-c", "i=0; while true; do i=$((i+1));"
                                                  " sleep 0.5; done"])
        if app:
            build_busybox_bundle(bundles / "app", ["sleep", "100000"])
        return bundles

    def target(self, root: Path, *, gpu: bool = False) -> RunscTarget:
        """ateom's view of runsc for an actor whose state is under `root`."""
        return RunscTarget(info=self.info, root=str(root), global_flags=tuple(FLAGS), gpu=gpu)

    def runsc_argv(self, argv: list[str], *, log: Path, check: bool = True,
                   marks: list[tuple[float, float]] | None = None) -> float:
        """One runsc call, stdio appended to `log` (a pipe would be held open by the
        sandbox); returns its wall time (s).

        Through the same reaper as the daemon (this process is a subreaper too):
        runsc waits for an exited sandbox to be reaped, and a slow PID 1 would
        otherwise be measured as runsc's time.
        """
        wall = time.time()
        started = time.perf_counter()
        done = self.reaper.run(argv, log_path=str(log), timeout=120)
        took = time.perf_counter() - started
        if marks is not None:
            marks.append((wall, wall + took))
        if check and done.returncode != 0:
            raise SystemExit(f"{argv} failed ({done.returncode}); see {log}")
        return took

    def runsc(self, root: Path, *args: str, log: Path, check: bool = True) -> None:
        # The same global flags ateom passes, so the difference is ateom's own work.
        argv = [str(self.shim), "-log-format", "json", "--alsologtostderr", "-root", str(root),
                "-log", f"{log}.runsc", *FLAGS, *args]
        self.runsc_argv(argv, log=log, check=check)

    def raw_teardown(self, root: Path, names: list[str], log: Path) -> None:
        for name in reversed(names):
            self.runsc(root, "kill", name, "KILL", log=log, check=False)
        for name in reversed(names):
            self.runsc(root, "delete", "-force", name, log=log, check=False)
        # As ateom does: nothing of this sandbox still exiting while the next boots.
        kill_sandbox_processes(str(root))
        shutil.rmtree(root, ignore_errors=True)

    # -- the measurements ---------------------------------------------------------

    def raw_bundles(self, uid: str, template: Path) -> Path:
        """A copy of bundles ateom injected (`template`, of actor <t>), for actor `uid`:
        the same bytes but for the sandbox id (<uid>_pause) in the configs."""
        bundles = self.base / "injected" / uid
        shutil.copytree(template, bundles, symlinks=True)
        old, new = f'"{template.name}_pause"'.encode(), f'"{uid}_pause"'.encode()
        for config in bundles.glob("*/config.json"):
            config.write_bytes(config.read_bytes().replace(old, new))
        return bundles

    def raw_run(self, uid: str, template: Path) -> float:
        """ateom's create+start command lines, files and order, without ateom."""
        bundles = self.raw_bundles(uid, template)
        root = self.base / "raw" / "state" / uid
        log_dir = self.base / "raw" / "logs" / uid
        root.mkdir(parents=True, mode=0o700)
        log_dir.mkdir(parents=True, mode=0o750)
        target = self.target(root, gpu=True)  # the actor's app has GPUs
        ids = {"_pause": f"{uid}_pause", "app": "app"}
        marks: list[tuple[float, float]] = []
        cpu = self.cpu_s(os.getpid())
        t0 = time.time()
        started = time.perf_counter()
        for name in ("_pause", "app"):
            stdio, own = log_dir / f"{name}.log", str(log_dir / f"{name}.runsc.log")
            create = create_argv(target, ids[name], str(bundles / name),
                                 str(root / f"{ids[name]}.pid"), log_file=own)
            took = self.runsc_argv(create, log=stdio, marks=marks)
            self.raw_phases.setdefault(f"create:{name}", []).append(took * 1000)
            took = self.runsc_argv(start_argv(target, ids[name], log_file=own), log=stdio,
                                   marks=marks)
            self.raw_phases.setdefault(f"start:{name}", []).append(took * 1000)
        elapsed = time.perf_counter() - started
        self.cpu["runsc"].append(self.cpu_s(os.getpid()) - cpu)
        self.timelines["runsc"].append(timeline(t0, t0 + elapsed, runsc_calls(log_dir), marks))
        self.raw_teardown(root, [ids["_pause"], "app"], log_dir / "teardown.log")
        return elapsed

    def ateom_run(self, uid: str, keep: bool = False) -> tuple[float, Path]:
        bundles = self.make_actor(uid, app=True)
        cpu = self.cpu_s()
        t0 = time.time()
        started = time.perf_counter()
        self.stub.RunWorkload(pb.RunWorkloadRequest(
            actor_uid=uid, spec=pb.WorkloadSpec(containers=[pb.Container(name="app")]),
            actor_dirs=self.dirs(uid)), timeout=120)
        elapsed = time.perf_counter() - started
        self.cpu["ateom"].append(self.cpu_s() - cpu)
        entered, marks = phase_marks(self.base / "daemon.log", uid)
        self.timelines["ateom"].append(timeline(
            t0, t0 + elapsed, runsc_calls(self.run_dir / "logs" / uid), marks, entered))
        # A copy of the injected bundles for the raw side (the configs runsc saw).
        injected = self.base / "template" / uid
        if keep:
            shutil.copytree(bundles, injected, symlinks=True)
        self.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=120)
        return elapsed, injected

    def raw_checkpoint_restore(self, uid: str) -> tuple[float, float]:
        bundles = self.make_actor(uid, app=False)
        root, log = self.base / "raw-state" / uid, self.base / f"raw-{uid}.log"
        root.mkdir(parents=True)
        image = self.actors / uid / "ckpt"
        image.mkdir()
        sid = f"{uid}_pause"
        self.runsc(root, "create", "-bundle", str(bundles / "_pause"), "-pid-file",
                   str(root / "p.pid"), sid, log=log)
        self.runsc(root, "start", sid, log=log)
        time.sleep(0.3)
        started = time.perf_counter()
        # Checkpoint, then free the worker the way ateom does (kill, delete).
        self.runsc(root, "checkpoint", "-image-path", str(image), sid, log=log)
        self.runsc(root, "kill", sid, "KILL", log=log, check=False)
        self.runsc(root, "delete", "-force", sid, log=log, check=False)
        ckpt = time.perf_counter() - started
        started = time.perf_counter()
        self.runsc(root, "restore", "-bundle", str(bundles / "_pause"), "-image-path",
                   str(image), "-pid-file", str(root / "p.pid"), "-detach", sid, log=log)
        restore = time.perf_counter() - started
        self.raw_teardown(root, [sid], log)
        return ckpt, restore

    def ateom_checkpoint_restore(self, uid: str) -> tuple[float, float]:
        self.make_actor(uid, app=False)
        dirs = self.dirs(uid)
        self.stub.RunWorkload(pb.RunWorkloadRequest(actor_uid=uid, actor_dirs=dirs), timeout=120)
        time.sleep(0.3)
        started = time.perf_counter()
        self.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(actor_uid=uid, actor_dirs=dirs),
                                     timeout=120)
        ckpt = time.perf_counter() - started
        os.rename(dirs.checkpoint_dir, dirs.restore_dir)
        started = time.perf_counter()
        self.stub.RestoreWorkload(pb.RestoreWorkloadRequest(actor_uid=uid, actor_dirs=dirs,
                                                            preserve_restore_dir=True),
                                  timeout=120)
        restore = time.perf_counter() - started
        self.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=120)
        return ckpt, restore


def _median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixture", type=Path, help="gpu_fixture.py output directory")
    parser.add_argument("-n", type=int, default=5, help="iterations per figure")
    parser.add_argument("--only", action="append", choices=FIGURES,
                        help="measure only this figure (repeatable; default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    parser.add_argument("--samples", type=Path,
                        help="write every sample (s) to this JSON file, for other statistics")
    args = parser.parse_args()
    wanted = tuple(args.only or FIGURES)
    # The in-process reaper logs every reaped child at debug level: keep the
    # figures readable (the daemon under test logs to its own file).
    configure_logging("console", "warning")
    if os.geteuid() != 0 or not shutil.which("runsc"):
        print("bench_daemon: needs root and runsc", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="ateom-bench-"))
    bench = Bench(base, args.fixture.resolve() if args.fixture else None)
    serving: list[float] = []
    for _ in range(args.n):
        serving.append(bench.start_daemon())
        bench.stop_daemon()
    bench.start_daemon()
    results: dict[str, dict[str, list[float]]] = {k: {"runsc": [], "ateom": []} for k in wanted}
    try:
        _, template = bench.ateom_run("warmup", keep=True)  # probe cache, registry, imports
        bench.raw_run("rawwarmup", template)
        bench.timelines = {"runsc": [], "ateom": []}
        bench.cpu = {"runsc": [], "ateom": []}
        bench.raw_phases.clear()
        for i in range(args.n):
            # Alternate which side goes first: load from other work drifts.
            if "run" in wanted:
                if i % 2 == 0:
                    took, _ = bench.ateom_run(f"run{i}")
                    raw = bench.raw_run(f"raw{i}", template)
                else:
                    raw = bench.raw_run(f"raw{i}", template)
                    took, _ = bench.ateom_run(f"run{i}")
                results["run"]["ateom"].append(took)
                results["run"]["runsc"].append(raw)
            if "checkpoint" in wanted or "restore" in wanted:
                if i % 2 == 0:
                    a_ckpt, a_restore = bench.ateom_checkpoint_restore(f"cr{i}")
                    r_ckpt, r_restore = bench.raw_checkpoint_restore(f"rawcr{i}")
                else:
                    r_ckpt, r_restore = bench.raw_checkpoint_restore(f"rawcr{i}")
                    a_ckpt, a_restore = bench.ateom_checkpoint_restore(f"cr{i}")
                for name, ours, raw in (("checkpoint", a_ckpt, r_ckpt),
                                        ("restore", a_restore, r_restore)):
                    if name in results:
                        results[name]["ateom"].append(ours)
                        results[name]["runsc"].append(raw)
        time.sleep(1)
        rss = bench.rss_mib()
    finally:
        bench.stop_daemon()
    figures: dict[str, object] = {"n": args.n, "fixture": str(args.fixture or "sim-2gpu"),
                                  "serve_to_serving_ms": stats_ms(serving),
                                  "idle_rss_mib": round(rss, 1)}
    print(f"{'figure':12} {'runsc alone (min/median/p99 ms)':>34} "
          f"{'through ateom':>26} {'overhead (median)':>20}")
    for name, sides in results.items():
        raw_ms, ours_ms = stats_ms(sides["runsc"]), stats_ms(sides["ateom"])
        extra = ours_ms["median"] - raw_ms["median"]
        pct = 100 * extra / raw_ms["median"] if raw_ms["median"] else 0.0
        # The same iteration's two sides, paired: drift cancels out of these.
        paired = [a - r for a, r in zip(sides["ateom"], sides["runsc"], strict=True)]
        figures[name] = {"runsc_ms": raw_ms, "ateom_ms": ours_ms, "overhead_ms": round(extra, 1),
                         "overhead_pct": round(pct, 1),
                         "paired_overhead_ms": {"median": round(statistics.median(paired) * 1000,
                                                                1),
                                                "min": round(min(paired) * 1000, 1),
                                                "max": round(max(paired) * 1000, 1)}}
        print(f"{name:12} {raw_ms['min']:>12}/{raw_ms['median']}/{raw_ms['p99']:<12} "
              f"{ours_ms['min']:>10}/{ours_ms['median']}/{ours_ms['p99']:<10} "
              f"{extra:>+8.1f} ms {pct:+6.1f}%  (paired median "
              f"{statistics.median(paired) * 1000:+.1f} ms)")
    s = figures["serve_to_serving_ms"]
    print(f"serve -> SERVING: {s}  idle RSS: {figures['idle_rss_mib']} MiB")  # type: ignore[index]
    if "run" in results:
        phases: dict[str, list[float]] = {}
        for line in (base / "daemon.log").read_text().splitlines():
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("event") == "phase" and event.get("actor_uid", "").startswith("run"):
                key = f"{event['phase']}:{event.get('container', '')}".rstrip(":")
                phases.setdefault(key, []).append(event["duration_ms"])
        print("runsc alone, per call (median ms): " + ", ".join(
            f"{k} {statistics.median(v):.1f}" for k, v in bench.raw_phases.items()))
        print("RunWorkload phases (median ms): " + ", ".join(
            f"{k} {statistics.median(v):.1f}" for k, v in phases.items()))
        parts: dict[str, dict[str, float]] = {}
        for side, runs in bench.timelines.items():
            spans: dict[str, list[float]] = {}
            for one in runs:
                for key, seconds in one.items():
                    spans.setdefault(key, []).append(seconds)
            print(f"Run timeline, {side:5} (median ms): " + ", ".join(
                f"{k} {_median_ms(v)}" for k, v in spans.items() if ":" not in k))
            print(f"  per call, {side:5} (median ms): " + ", ".join(
                f"{k} {_median_ms(v)}" for k, v in spans.items() if ":" in k))
            parts[side] = {k: round(statistics.median(v) * 1000, 1) for k, v in spans.items()}
        figures["run_timeline_ms"] = parts
        # Outside runsc: the Run's time less runsc's own (spawn to exit of each call).
        # The noise of runsc's time (other load on the machine) stays out of it.
        outside: dict[str, list[float]] = {"runsc": [], "ateom": []}
        for k, (raw_t, ours_t) in enumerate(zip(bench.timelines["runsc"],
                                                 bench.timelines["ateom"], strict=True)):
            if raw_t and ours_t:
                for side, one in (("runsc", raw_t), ("ateom", ours_t)):
                    total = results["run"][side][k]
                    outside[side].append(total - one["spawn"] - one["runsc"])
        if outside["ateom"]:
            added = [a - r for a, r in zip(outside["ateom"], outside["runsc"], strict=True)]
            figures["run_outside_runsc_ms"] = {**{side: stats_ms(v) for side, v in outside.items()},
                                               "added_by_ateom": stats_ms(added)}
            print("Run time outside runsc (min/median/p99 ms): " + ", ".join(
                f"{side} {stats_ms(v)}" for side, v in outside.items())
                + f"; added by ateom (paired) {stats_ms(added)}")
        cpu = {side: stats_ms(v) for side, v in bench.cpu.items()}
        figures["run_caller_cpu_ms"] = cpu
        print("CPU the caller used per Run (min/median/p99 ms): " + ", ".join(
            f"{side} {v}" for side, v in cpu.items()))
    print(json.dumps(figures))
    if args.samples:
        args.samples.write_text(json.dumps({"results": results, "timelines": bench.timelines,
                                            "caller_cpu": bench.cpu}))
    if args.keep:
        print(f"work dir kept: {base}", file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
