#!/usr/bin/env python3
"""Benchmark: what ateom adds to runsc's own time, idle RSS, serve-to-SERVING.

    python benchmarks/bench_daemon.py [--fixture OUT] [-n 5]   (as root; needs runsc)

The demo actor: a sandbox root `_pause` plus one app container (busybox),
given every GPU of the fixture's CDI spec (--fixture: the output of
``python3 ../shared/bench/make_gpu_fixture.py OUT --gpus 8 --libs 40``;
without it, a 2-GPU simulated spec is built). Debian's runsc has no
--nvproxy, so both sides go through the same shim, which drops the flag.

Side by side, n times each, fresh actor every time:
- run:        runsc create+start of _pause and app on bundles already prepared
              (injected) vs. RunWorkload over the unix socket (validate, plan,
              inject, create+start);
- checkpoint: runsc checkpoint + delete of a single-container actor vs.
              CheckpointWorkload (checkpoint, list files, tear down);
- restore:    runsc restore of that image vs. RestoreWorkload.
Also: idle daemon RSS (VmRSS after the runs) and `ateom serve` start to
health SERVING. Prints a table and one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from ateom.daemon.logs import configure_logging
from ateom.daemon.reaper import Reaper
from ateom.testing import build_busybox_bundle, build_fake_driver_libs, write_sim_gpu_spec

RUNSC = shutil.which("runsc") or "/usr/bin/runsc"
FLAGS = ["--network=none", "--ignore-cgroups"]
SHIM = """#!/bin/sh
if [ "$1" = flags ]; then {real} flags 2>&1; printf '  -nvproxy\\n    \\tshim\\n'; exit 0; fi
for a; do shift; case "$a" in --nvproxy*) ;; *) set -- "$@" "$a" ;; esac; done
exec {real} "$@"
"""


def stats_ms(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    p99 = s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]
    return {"min": round(s[0] * 1000, 1), "median": round(statistics.median(s) * 1000, 1),
            "p99": round(p99 * 1000, 1)}


class Bench:
    def __init__(self, base: Path, fixture: Path | None) -> None:
        self.base = base
        self.actors = base / "actors"
        self.run_dir = base / "run"
        self.sock = self.run_dir / "ateom.sock"
        (base / "dev").mkdir(parents=True)
        (base / "dev" / "nvidia0").touch()
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
        self.raw_phases: dict[str, list[float]] = {}
        self.daemon: int | None = None

    # -- the daemon -----------------------------------------------------------

    def start_daemon(self) -> float:
        argv = [sys.executable, "-m", "ateom", "serve", "--socket", str(self.sock),
                "--actors-root", str(self.actors), "--run-dir", str(self.run_dir),
                "--runsc", str(self.shim), "--spec-dir", str(self.spec_dir),
                "--gpu-glob", str(self.base / "dev" / "nvidia[0-9]*"), "--kill-grace", "0",
                *[f"--runsc-global-flag={f}" for f in FLAGS]]
        started = time.perf_counter()
        log = os.open(self.base / "daemon.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        r, w = os.pipe()
        self.daemon = self.reaper.spawn(argv, stdin=r, stdout=log, stderr=log)
        for fd in (log, r, w):
            os.close(fd)
        # A gRPC channel that failed to connect backs off for ~1 s before it
        # retries, so wait for the socket first and use a fresh channel per try.
        while True:
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

    def runsc(self, root: Path, *args: str, log: Path, check: bool = True) -> None:
        """One runsc call, stdio to a log file: a pipe would be held open by the sandbox.

        Through the same reaper as the daemon (this process is a subreaper too):
        runsc waits for an exited sandbox to be reaped, and a slow PID 1 would
        otherwise be measured as runsc's time.
        """
        # The same global flags ateom passes, so the difference is ateom's own work.
        argv = [str(self.shim), "-log-format", "json", "--alsologtostderr", "-root", str(root),
                "-log", f"{log}.runsc", *FLAGS, *args]
        done = self.reaper.run(argv, log_path=str(log), timeout=120)
        if check and done.returncode != 0:
            raise SystemExit(f"{argv} failed ({done.returncode}); see {log}")

    def raw_teardown(self, root: Path, names: list[str], log: Path) -> None:
        for name in reversed(names):
            self.runsc(root, "kill", name, "KILL", log=log, check=False)
        for name in reversed(names):
            self.runsc(root, "delete", "-force", name, log=log, check=False)
        shutil.rmtree(root, ignore_errors=True)

    # -- the measurements ---------------------------------------------------------

    def raw_run(self, uid: str, bundles: Path) -> float:
        root, log = self.base / "raw-state" / uid, self.base / f"raw-{uid}.log"
        root.mkdir(parents=True)
        started = time.perf_counter()
        # The injected bundles carry the sandbox id ateom gave them (<uid>_pause).
        ids = {"_pause": f"{bundles.name}_pause", "app": "app"}
        for name, gpu in (("_pause", True), ("app", False)):
            nv = ["--nvproxy"] if gpu else []
            t0 = time.perf_counter()
            self.runsc(root, *nv, "create", "-bundle", str(bundles / name), "-pid-file",
                       str(root / f"{name}.pid"), ids[name], log=log)
            t1 = time.perf_counter()
            self.runsc(root, "start", ids[name], log=log)
            self.raw_phases.setdefault(f"create:{name}", []).append((t1 - t0) * 1000)
            self.raw_phases.setdefault(f"start:{name}", []).append(
                (time.perf_counter() - t1) * 1000)
        elapsed = time.perf_counter() - started
        self.raw_teardown(root, [ids["_pause"], "app"], log)
        return elapsed

    def ateom_run(self, uid: str) -> tuple[float, Path]:
        bundles = self.make_actor(uid, app=True)
        started = time.perf_counter()
        self.stub.RunWorkload(pb.RunWorkloadRequest(
            actor_uid=uid, spec=pb.WorkloadSpec(containers=[pb.Container(name="app")]),
            actor_dirs=self.dirs(uid)), timeout=120)
        elapsed = time.perf_counter() - started
        # Keep a copy of the injected bundles for the raw side (same configs runsc saw).
        injected = self.base / "injected" / uid
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixture", type=Path, help="make_gpu_fixture.py output directory")
    parser.add_argument("-n", type=int, default=5, help="iterations per figure")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = parser.parse_args()
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
    results: dict[str, dict[str, list[float]]] = {
        k: {"runsc": [], "ateom": []} for k in ("run", "checkpoint", "restore")}
    try:
        bench.ateom_run("warmup")  # probe cache, registry, imports
        for i in range(args.n):
            took, injected = bench.ateom_run(f"run{i}")
            results["run"]["ateom"].append(took)
            results["run"]["runsc"].append(bench.raw_run(f"raw{i}", injected))
            a_ckpt, a_restore = bench.ateom_checkpoint_restore(f"cr{i}")
            r_ckpt, r_restore = bench.raw_checkpoint_restore(f"rawcr{i}")
            results["checkpoint"]["ateom"].append(a_ckpt)
            results["checkpoint"]["runsc"].append(r_ckpt)
            results["restore"]["ateom"].append(a_restore)
            results["restore"]["runsc"].append(r_restore)
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
        raw, ours = stats_ms(sides["runsc"]), stats_ms(sides["ateom"])
        extra = ours["median"] - raw["median"]
        pct = 100 * extra / raw["median"] if raw["median"] else 0.0
        figures[name] = {"runsc_ms": raw, "ateom_ms": ours, "overhead_ms": round(extra, 1),
                         "overhead_pct": round(pct, 1)}
        print(f"{name:12} {raw['min']:>12}/{raw['median']}/{raw['p99']:<12} "
              f"{ours['min']:>10}/{ours['median']}/{ours['p99']:<10} "
              f"{extra:>+8.1f} ms {pct:+6.1f}%")
    s = figures["serve_to_serving_ms"]
    print(f"serve -> SERVING: {s}  idle RSS: {figures['idle_rss_mib']} MiB")  # type: ignore[index]
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
    print(json.dumps(figures))
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
