#!/usr/bin/env python3
"""Benchmark: an actor's turn (checkpoint, restore, back to work) through ateom vs runsc alone.

    python benchmarks/bench_turns.py [--runsc PATH] [-n 10] [--sizes 64,256,1024]
                                     [--kinds cpu,gpu] [--concurrent 4]     (as root)

The runsc is `--runsc`, else gVisor's newest release where the project's machines
have it (`tests.support.newest_runsc`), else the ``runsc`` on PATH; the first line
printed says which. GPU actors need a runsc with ``--cuda-checkpoint-path``: they run
on nvproxy with the driver pinned and stand-in ``/dev/nvidia*`` nodes, so the whole
benchmark re-executes itself in a private mount namespace that has them
(`tests.support.stand_in_gpu`).

The actor holds SIZE MiB: its process writes that much from /dev/urandom into the
sandbox's /dev/shm (sentry memory, so the image is as large), then prints a tick
every 50 ms. A CPU actor is a sandbox root only; a GPU actor is a root plus an app
with the Pod's GPU, the app holding the memory.

Per size and kind, n rounds, the two sides' order alternating between rounds:
- runsc alone: the command lines ateom runs (its own argv builders, global flags,
  a per-container log), from this process through the same kind of reaper, on the
  bundles ateom injected for the same actor: checkpoint (then kill and delete, as
  ateom frees the worker), restore of each container;
- through ateom: CheckpointWorkload, RestoreWorkload over the unix socket.
Also, per round: the image's size and MB/s, and the time from the restore call to
the restored process's first new tick (time to useful work). `--concurrent` actors
(256 MiB) restored at once through ateom vs the same restores by runsc alone, vs
one. With GPU actors, the hand-over on an exclusive worker: B refused while A holds
every GPU, then CheckpointWorkload(A) and B's RunWorkload at once: from A's
checkpoint call to B running, against A's checkpoint plus B's Run measured alone.
Prints min/median/p99 tables and one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ateom._proto import ateom_pb2 as pb  # noqa: E402
from ateom.daemon.reaper import Reaper  # noqa: E402
from ateom.daemon.runsc import (  # noqa: E402
    NvproxyOptions,
    RunscTarget,
    checkpoint_argv,
    create_argv,
    delete_argv,
    kill_argv,
    restore_argv,
    start_argv,
)
from ateom.daemon.runsc_probe import probe_runsc  # noqa: E402
from ateom.daemon.sandbox import kill_sandbox_processes  # noqa: E402
from ateom.daemon.state_dir import remove_state_dir, unmount_under  # noqa: E402
from tests.daemon.harness import GPUS, Daemon, World  # noqa: E402
from tests.support import DEFAULT_DRIVER_VERSION, build_busybox_bundle  # noqa: E402
from tests.support.newest_runsc import newest_runsc  # noqa: E402
from tests.support.stand_in_gpu import (  # noqa: E402
    install_cdi_hook_stand_in,
    stand_in_gpu_prefix,
)

FLAGS = ("--network=none", "--ignore-cgroups")
IN_NAMESPACE = "ATEOM_BENCH_TURNS_IN_NAMESPACE"


def program(size_mib: int) -> list[str]:
    return ["sh", "-c", f"head -c {size_mib}m /dev/urandom > /dev/shm/held; echo held; i=0; "
            "while true; do i=$((i+1)); echo tick=$i; sleep 0.05; done"]


def stats_ms(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return {"n": len(ms), "min": round(ms[0], 1), "median": round(statistics.median(ms), 1),
            "p99": round(p99, 1)}


def wait_text(path: Path, text: str, after: int = 0, timeout: float = 120) -> float:
    """Seconds until `text` appears in `path` past byte `after`."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        try:
            with open(path, "rb") as f:
                f.seek(after)
                if text.encode() in f.read():
                    return time.perf_counter() - started
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    raise SystemExit(f"{text!r} never appeared in {path}")


def image_bytes(image: Path) -> int:
    return sum(p.stat().st_size for p in image.rglob("*") if p.is_file())


@dataclass
class Alone:
    """An actor run by this process with ateom's command lines (runsc alone)."""

    target: RunscTarget
    template: Path
    containers: list[tuple[str, str]]  # (runsc id, bundle), the root first
    root: Path
    logs: Path
    image: Path
    checkpoint: float = 0.0

    @property
    def out(self) -> Path:
        """The stdio log of the container that holds the memory and ticks."""
        return self.logs / f"{self.containers[-1][1]}.log"


class Turns:
    def __init__(self, base: Path, runsc: str, gpu: bool) -> None:
        self.world = World(base)
        install_cdi_hook_stand_in(base / "toolkit")  # the toolkit dir the Daemon names
        self.runsc_path = runsc
        self.gpu = gpu
        self.reaper = Reaper().start(reap_all=True)
        self.info = probe_runsc(runsc, lambda argv: (lambda d: (d.returncode, d.output))(
            self.reaper.run_capture(argv, timeout=60)))
        self.daemon = Daemon(self.world, runsc, run_dir=base / "run", max_actors="16",
                             **({"nvproxy_driver_version": DEFAULT_DRIVER_VERSION} if gpu
                                else {}))

    # -- an actor -----------------------------------------------------------------

    def actor(self, uid: str, size: int, kind: str) -> tuple[pb.ActorDirs, list[pb.Container]]:
        bundles = self.world.actors_root / uid / "bundles"
        shutil.rmtree(self.world.actors_root / uid, ignore_errors=True)
        if kind == "gpu":
            build_busybox_bundle(bundles / "_pause", ["sleep", "1000000"])
            build_busybox_bundle(bundles / "app", program(size))
            return self.world.actor_dirs(uid), [pb.Container(name="app")]
        build_busybox_bundle(bundles / "_pause", program(size))
        return self.world.actor_dirs(uid), []

    def log(self, uid: str, kind: str) -> Path:
        return self.daemon.run_dir / "logs" / uid / ("app.log" if kind == "gpu" else "_pause.log")

    def run(self, uid: str, size: int, kind: str) -> pb.ActorDirs:
        dirs, containers = self.actor(uid, size, kind)
        self.daemon.stub.RunWorkload(pb.RunWorkloadRequest(
            actor_uid=uid, actor_dirs=dirs, spec=pb.WorkloadSpec(containers=containers)),
            timeout=300)
        wait_text(self.log(uid, kind), "tick=2\n")
        return dirs

    # -- through ateom --------------------------------------------------------------

    def ateom_turn(self, uid: str, size: int, kind: str) -> dict[str, float]:
        dirs = self.run(uid, size, kind)
        containers = [pb.Container(name="app")] if kind == "gpu" else []
        started = time.perf_counter()
        self.daemon.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
            actor_uid=uid, actor_dirs=dirs), timeout=600)
        ckpt = time.perf_counter() - started
        size_bytes = image_bytes(Path(dirs.checkpoint_dir))
        os.rename(dirs.checkpoint_dir, dirs.restore_dir)
        log = self.log(uid, kind)
        mark = log.stat().st_size
        started = time.perf_counter()
        self.daemon.stub.RestoreWorkload(pb.RestoreWorkloadRequest(
            actor_uid=uid, actor_dirs=dirs, spec=pb.WorkloadSpec(containers=containers)),
            timeout=600)
        restore = time.perf_counter() - started
        useful = restore + wait_text(log, "tick=", after=mark)
        self.daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid),
                                           timeout=120)
        return {"checkpoint": ckpt, "restore": restore, "useful": useful, "bytes": size_bytes}

    # -- runsc alone, on the bundles ateom injected --------------------------------

    def template(self, uid: str, size: int, kind: str) -> Path:
        """The actor's bundles as ateom injected them (copied while it runs)."""
        self.run(uid, size, kind)
        kept = self.world.base / "injected" / uid
        shutil.rmtree(kept, ignore_errors=True)
        # Not runsc's own files of the running sandbox (its rootfs overlay's filestore).
        shutil.copytree(self.world.actors_root / uid / "bundles", kept, symlinks=True,
                        ignore=shutil.ignore_patterns(".gvisor.filestore.*"))
        self.daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid),
                                           timeout=120)
        return kept

    def alone_boot_and_save(self, uid: str, template: Path, kind: str) -> Alone:
        """Boot the actor from ateom's bundles, let it fill its memory, checkpoint it
        and free the worker (kill, delete), with ateom's command lines."""
        # A GPU actor's app names its sandbox (<template uid>_pause, in its CRI
        # annotations); a lone root is free to take this run's uid, as the
        # concurrent runs must (the root's id names its control socket).
        names = [f"{template.name}_pause", "app"] if kind == "gpu" else [f"{uid}_pause"]
        containers = ["_pause"] + (["app"] if kind == "gpu" else [])
        base = self.world.base / "alone" / uid
        shutil.rmtree(base, ignore_errors=True)
        root, logs, image = base / "state", base / "logs", base / "image"
        for d in (root, logs, image):
            d.mkdir(parents=True, mode=0o700)
        # The flags ateom's daemon passes (the GPU sandbox's nvproxy, driver pinned).
        nvproxy = NvproxyOptions(DEFAULT_DRIVER_VERSION if self.gpu else "")
        a = Alone(RunscTarget(self.info, str(root), FLAGS, nvproxy, gpu=kind == "gpu"),
                  template, list(zip(names, containers, strict=True)), root, logs, image)
        for name, bundle in a.containers:
            log = logs / f"{bundle}.log"
            self.call(create_argv(a.target, name, str(template / bundle),
                                  str(root / f"{name}.pid"),
                                  log_file=str(logs / f"{bundle}.runsc.log")), log)
            self.call(start_argv(a.target, name), log)
        wait_text(a.out, "tick=2\n")
        started = time.perf_counter()
        self.call(checkpoint_argv(a.target, names[0], str(image)), logs / "ckpt.log")
        self.free(a)
        a.checkpoint = time.perf_counter() - started
        return a

    def alone_restore(self, a: Alone, *, until_useful: bool = True) -> tuple[float, float]:
        """(restore, time to the first new tick) of a saved actor (the second 0.0 when
        not `until_useful`: the restore calls alone, as an RPC's return measures)."""
        mark = a.out.stat().st_size
        started = time.perf_counter()
        for name, bundle in a.containers:
            self.call(restore_argv(a.target, name, str(a.template / bundle), str(a.image),
                                   str(a.root / f"{name}.pid"), log_file=None),
                      a.logs / f"{bundle}.log")
        restore = time.perf_counter() - started
        if not until_useful:
            return restore, 0.0
        return restore, restore + wait_text(a.out, "tick=", after=mark)

    def free(self, a: Alone) -> None:
        """Kill and delete every container (the root first, as ateom does)."""
        for name, _ in a.containers:
            self.reaper.run(kill_argv(a.target, name, "KILL"), log_path=str(a.logs / "k.log"),
                            timeout=60)
        for name, _ in a.containers:
            self.reaper.run(delete_argv(a.target, name), log_path=str(a.logs / "k.log"),
                            timeout=60)

    def alone_teardown(self, a: Alone) -> None:
        self.free(a)
        kill_sandbox_processes(str(a.root))
        remove_state_dir(str(a.root))

    def call(self, argv: list[str], log: Path) -> float:
        started = time.perf_counter()
        done = self.reaper.run(argv, log_path=str(log), timeout=600)
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
            raise SystemExit(f"{argv[-2:]} failed ({done.returncode}):\n{tail}")
        return time.perf_counter() - started

    def alone_turn(self, uid: str, template: Path, kind: str) -> dict[str, float]:
        a = self.alone_boot_and_save(uid, template, kind)
        size_bytes = image_bytes(a.image)
        restore, useful = self.alone_restore(a)
        self.alone_teardown(a)
        return {"checkpoint": a.checkpoint, "restore": restore, "useful": useful,
                "bytes": size_bytes}

    def concurrent_alone(self, count: int, template: Path) -> float:
        saved = [self.alone_boot_and_save(f"{template.name}-{i}", template, "cpu")
                 for i in range(count)]
        # Each needs its own sandbox id: the root's id names its control socket.
        took = parallel([lambda a=a: self.alone_restore(a, until_useful=False)  # type: ignore[misc]
                         for a in saved])
        for a in saved:
            self.alone_teardown(a)
        return took

    # -- concurrent restores ------------------------------------------------------------

    def concurrent_ateom(self, count: int, size: int) -> float:
        """Wall time of `count` RestoreWorkload calls at once (prepared first)."""
        uids = [f"c{i}" for i in range(count)]
        for uid in uids:
            dirs = self.run(uid, size, "cpu")
            self.daemon.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
                actor_uid=uid, actor_dirs=dirs), timeout=600)
            os.rename(dirs.checkpoint_dir, dirs.restore_dir)

        def restore(uid: str) -> None:
            self.daemon.stub.RestoreWorkload(pb.RestoreWorkloadRequest(
                actor_uid=uid, actor_dirs=self.world.actor_dirs(uid)), timeout=600)

        took = parallel([lambda u=uid: restore(u) for uid in uids])  # type: ignore[misc]
        for uid in uids:
            self.daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid),
                                               timeout=120)
        return took

    def close(self) -> None:
        self.daemon.stop()


def parallel(calls: list[Callable[[], None]]) -> float:
    """Wall time of running `calls` at once, each on its own thread."""
    threads = [threading.Thread(target=c) for c in calls]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runsc")
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--sizes", default="64,256,1024")
    parser.add_argument("--kinds", default="cpu,gpu")
    parser.add_argument("--concurrent", type=int, default=4)
    args = parser.parse_args()
    newest, why = newest_runsc()
    runsc = args.runsc or (newest.path if newest else shutil.which("runsc"))
    if not runsc:
        raise SystemExit("no runsc: pass --runsc")
    kinds = args.kinds.split(",")
    if "gpu" in kinds and not os.environ.get(IN_NAMESPACE):
        base = Path(tempfile.mkdtemp(prefix="ateom-bench-turns-ns-"))
        os.environ[IN_NAMESPACE] = "1"
        os.execvp("unshare", [*stand_in_gpu_prefix(base, GPUS), sys.executable, *sys.argv])
    info = probe_runsc(runsc)
    print(f"runsc: {runsc} ({info.version}){'' if newest or args.runsc else '; ' + why}")
    results: dict[str, object] = {"runsc": info.version}
    with tempfile.TemporaryDirectory(prefix="ateom-bench-turns-") as tmp:
        turns = Turns(Path(tmp), runsc, gpu="gpu" in kinds)
        try:
            for kind in kinds:
                for size in map(int, args.sizes.split(",")):
                    template = turns.template(f"t{kind}{size}", size, kind)
                    sides: dict[str, list[dict[str, float]]] = {"alone": [], "ateom": []}
                    for i in range(args.n):
                        order = ("alone", "ateom") if i % 2 == 0 else ("ateom", "alone")
                        for side in order:
                            if side == "ateom":
                                sides[side].append(turns.ateom_turn(f"a{kind}{size}", size, kind))
                            else:
                                sides[side].append(turns.alone_turn(template.name, template,
                                                                    kind))
                    report(results, kind, size, sides)
            if args.concurrent:
                concurrent(turns, results, args.concurrent, 256, args.n)
            if "gpu" in kinds:
                handover(turns, results, 64, args.n)
        finally:
            turns.close()
            unmount_under(tmp)  # what a failed round's runsc left mounted
    print(json.dumps(results))
    return 0


def concurrent(turns: Turns, results: dict[str, object], count: int, size: int,
               rounds: int) -> None:
    """`count` restores at once through ateom vs by runsc alone, vs one (interleaved)."""
    template = turns.template("tconc", size, "cpu")
    sides: dict[str, list[float]] = {"one_ateom": [], "one_alone": [], "ateom": [], "alone": []}
    for i in range(max(rounds // 2, 3)):
        for side in (("alone", "ateom") if i % 2 == 0 else ("ateom", "alone")):
            if side == "ateom":
                sides["ateom"].append(turns.concurrent_ateom(count, size))
                sides["one_ateom"].append(turns.ateom_turn("single", size, "cpu")["restore"])
            else:
                sides["alone"].append(turns.concurrent_alone(count, template))
                sides["one_alone"].append(turns.alone_turn("single", template, "cpu")["restore"])
    row = {k: stats_ms(v) for k, v in sides.items()}
    ratio = row["ateom"]["median"] / max(row["alone"]["median"], 1e-9)
    results[f"concurrent-{count}x{size}"] = {**row, "ateom_over_alone": round(ratio, 3)}
    for k, v in row.items():
        print(f"restore {size} MiB {k:10} min {v['min']:8.1f} median {v['median']:8.1f} "
              f"p99 {v['p99']:8.1f} ms")
    print(f"{count} restores at once: through ateom {ratio:.3f} x runsc alone (medians)")


def handover(turns: Turns, results: dict[str, object], size: int, rounds: int) -> None:
    """The GPU hand-over on an exclusive worker where A and B each need every GPU: B
    refused, then CheckpointWorkload(A) and B's RunWorkload retried at once; the time
    from A's checkpoint call to B running, against A's checkpoint plus B's Run."""
    world = turns.world
    excl = Daemon(world, turns.runsc_path, run_dir=world.base / "run-exclusive",
                  gpu_placement="exclusive", nvproxy_driver_version=DEFAULT_DRIVER_VERSION)
    every = pb.GpuRequest(count=GPUS)
    figures: dict[str, list[float]] = {"handover": [], "checkpoint_a": [], "run_b": [],
                                       "gap": []}
    try:
        for i in range(rounds):
            a, b = f"ha{i}", f"hb{i}"
            for uid in (a, b):
                turns.actor(uid, size, "gpu")
            runs = {uid: pb.RunWorkloadRequest(
                actor_uid=uid, actor_dirs=world.actor_dirs(uid), gpus=every,
                spec=pb.WorkloadSpec(containers=[pb.Container(name="app")])) for uid in (a, b)}
            excl.stub.RunWorkload(runs[a], timeout=300)
            wait_text(excl.run_dir / "logs" / a / "app.log", "tick=2\n")
            try:
                excl.stub.RunWorkload(runs[b], timeout=60)
                raise SystemExit("B ran while A held every GPU: not an exclusive worker")
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
            started = time.perf_counter()
            excl.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
                actor_uid=a, actor_dirs=world.actor_dirs(a)), timeout=600)
            saved = time.perf_counter()
            excl.stub.RunWorkload(runs[b], timeout=300)
            done = time.perf_counter()
            figures["handover"].append(done - started)
            figures["checkpoint_a"].append(saved - started)
            figures["run_b"].append(done - saved)
            excl.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=b), timeout=120)
        # B's Run on a free worker, and A's checkpoint with no one waiting: the parts alone.
        alone: dict[str, list[float]] = {"checkpoint_a": [], "run_b": []}
        for i in range(rounds):
            a, b = f"sa{i}", f"sb{i}"
            for uid in (a, b):
                turns.actor(uid, size, "gpu")
            started = time.perf_counter()
            excl.stub.RunWorkload(pb.RunWorkloadRequest(
                actor_uid=b, actor_dirs=world.actor_dirs(b), gpus=every,
                spec=pb.WorkloadSpec(containers=[pb.Container(name="app")])), timeout=300)
            alone["run_b"].append(time.perf_counter() - started)
            excl.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=b), timeout=120)
            excl.stub.RunWorkload(pb.RunWorkloadRequest(
                actor_uid=a, actor_dirs=world.actor_dirs(a), gpus=every,
                spec=pb.WorkloadSpec(containers=[pb.Container(name="app")])), timeout=300)
            wait_text(excl.run_dir / "logs" / a / "app.log", "tick=2\n")
            started = time.perf_counter()
            excl.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
                actor_uid=a, actor_dirs=world.actor_dirs(a)), timeout=600)
            alone["checkpoint_a"].append(time.perf_counter() - started)
    finally:
        excl.stop()
    row = {k: stats_ms(v) for k, v in figures.items() if v}
    row.update({f"{k}_alone": stats_ms(v) for k, v in alone.items()})
    budget = row["checkpoint_a_alone"]["median"] + row["run_b_alone"]["median"]
    row["over_parts_ms"] = round(row["handover"]["median"] - budget, 1)
    results[f"handover-{size}"] = row
    for k, v in row.items():
        if isinstance(v, dict):
            print(f"hand-over {k:18} min {v['min']:8.1f} median {v['median']:8.1f} "
                  f"p99 {v['p99']:8.1f} ms")
    print(f"hand-over median {row['handover']['median']} ms vs A's checkpoint + B's Run alone "
          f"{budget:.1f} ms: {row['over_parts_ms']:+.1f} ms")


def report(results: dict[str, object], kind: str, size: int,
           sides: dict[str, list[dict[str, float]]]) -> None:
    row: dict[str, object] = {}
    for figure in ("checkpoint", "restore", "useful"):
        alone = stats_ms([r[figure] for r in sides["alone"]])
        through = stats_ms([r[figure] for r in sides["ateom"]])
        paired = [b[figure] - a[figure] for a, b in zip(sides["alone"], sides["ateom"],
                                                        strict=True)]
        added = statistics.median(paired) * 1000
        row[figure] = {"alone": alone, "ateom": through, "added_ms": round(added, 1),
                       "added_pct": round(100 * added / max(alone["median"], 1e-9), 1)}
        print(f"{kind} {size:5d} MiB {figure:10} alone {alone['min']:8.1f} "
              f"{alone['median']:8.1f} {alone['p99']:8.1f}  ateom {through['min']:8.1f} "
              f"{through['median']:8.1f} {through['p99']:8.1f}  +{added:.1f} ms "
              f"({row[figure]['added_pct']}%)")  # type: ignore[index]
    mib = statistics.median(r["bytes"] for r in sides["ateom"]) / 2**20
    secs = statistics.median(r["checkpoint"] for r in sides["ateom"])
    row["image_mib"] = round(mib, 1)
    row["checkpoint_mb_s"] = round(mib * 1.048576 / secs, 1)
    print(f"{kind} {size:5d} MiB image {mib:.1f} MiB, checkpoint {row['checkpoint_mb_s']} MB/s")
    results[f"{kind}-{size}"] = row


if __name__ == "__main__":
    sys.exit(main())
