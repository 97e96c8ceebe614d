"""bench_turns' actors: one actor's turn through ateom, and the same runsc calls alone.

`Turns` holds a daemon under test (`tests.support.daemon`) and this process's own
reaper; each side boots an actor that holds SIZE MiB, checkpoints it, restores it
and waits for it to work again, timing each step. The runsc-alone side runs the
command lines ateom's argv builders make, on the bundles ateom injected, spawned
as ateom spawns runsc (`FD_TABLE`).

Before every timed call, on both sides, `quiesce` writes back every dirty page:
the images earlier rounds wrote (64 MiB to 1 GiB each, into the page cache) are
otherwise flushed by the kernel 30 s later (vm.dirty_expire_centisecs), into
whichever call runs then, on either side; a checkpoint then writes at the disk's
speed instead of memory's. Each side's images are removed once it is done with
them (ateom's by the daemon, after the restore).
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ateom._proto import ateom_pb2 as pb  # noqa: E402
from ateom.daemon.gpus.checkpoint_policy import checkpoint_flags  # noqa: E402
from ateom.daemon.sandbox.state_dir import remove_state_dir  # noqa: E402
from ateom.daemon.sandbox.teardown import kill_sandbox_processes  # noqa: E402
from ateom.process.reaper import Reaper  # noqa: E402
from ateom.runsc.commands import (  # noqa: E402
    FD_TABLE,
    NvproxyOptions,
    RunscTarget,
    checkpoint_argv,
    create_argv,
    delete_argv,
    kill_argv,
    restore_argv,
    start_argv,
)
from ateom.runsc.probe import probe_runsc  # noqa: E402
from tests.support import DEFAULT_DRIVER_VERSION, build_busybox_bundle  # noqa: E402
from tests.support.daemon import GPUS, Daemon, DaemonWorld  # noqa: E402
from tests.support.newest_runsc import newest_runsc  # noqa: E402
from tests.support.stand_in_gpu import install_cdi_hook_stand_in  # noqa: E402

FLAGS = ("--network=none", "--ignore-cgroups")


def program(size_mib: int) -> list[str]:
    return ["sh", "-c", f"head -c {size_mib}m /dev/urandom > /dev/shm/held; echo held; i=0; "
            "while true; do i=$((i+1)); echo tick=$i; sleep 0.05; done"]


def runsc_to_bench(given: str | None) -> tuple[str, str]:
    """The runsc a turn benchmark runs: `given` (its ``--runsc``), else gVisor's newest
    release where the project's machines have it, else the ``runsc`` on PATH; and,
    for that last case, why the newest was not used ("" otherwise)."""
    newest, why = newest_runsc()
    runsc = given or (newest.path if newest else shutil.which("runsc"))
    if not runsc:
        raise SystemExit("no runsc: pass --runsc")
    return runsc, "" if newest or given else why


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


def quiesce() -> None:
    """No dirty page left for the next timed call to wait behind (sync(2) writes
    them back and waits); not timed."""
    os.sync()


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
        self.world = DaemonWorld(base)
        install_cdi_hook_stand_in(base / "toolkit")  # the toolkit dir the Daemon names
        self.runsc_path = runsc
        self.gpu = gpu
        # This process's reaper logs every reap at debug: not the benchmark's output.
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
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
        """RunWorkload, then wait until this run's process holds its memory (its log
        outlives earlier runs of the uid: only what it writes from now on counts)."""
        dirs, containers = self.actor(uid, size, kind)
        log = self.log(uid, kind)
        mark = log.stat().st_size if log.exists() else 0
        self.daemon.stub.RunWorkload(pb.RunWorkloadRequest(
            actor_uid=uid, actor_dirs=dirs, spec=pb.WorkloadSpec(containers=containers)),
            timeout=300)
        wait_text(log, "tick=2\n", after=mark)
        return dirs

    # -- through ateom --------------------------------------------------------------

    def ateom_turn(self, uid: str, size: int, kind: str) -> dict[str, float]:
        dirs = self.run(uid, size, kind)
        containers = [pb.Container(name="app")] if kind == "gpu" else []
        quiesce()
        started = time.perf_counter()
        self.daemon.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
            actor_uid=uid, actor_dirs=dirs), timeout=600)
        ckpt = time.perf_counter() - started
        # The worker is freed after the answer; the restore is timed on a freed
        # one, as the runsc-alone side's is (a restore here right away would
        # first wait for the old sandbox: the release's own figure says how long).
        self.daemon.settle()
        size_bytes = image_bytes(Path(dirs.checkpoint_dir))
        os.rename(dirs.checkpoint_dir, dirs.restore_dir)
        log = self.log(uid, kind)
        mark = log.stat().st_size
        quiesce()
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
        for d in (root, logs):
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
        # The call ateom makes before it answers, with the same flags (a GPU
        # actor's: runsc runs the cuda-checkpoint ateom mounted, as ateom asks).
        flags = checkpoint_flags(DEFAULT_DRIVER_VERSION, GPUS) if kind == "gpu" else ()
        quiesce()
        # Made now, as ateom makes the checkpoint_dir inside the call: a directory
        # made before the sync would be on disk already, and runsc's fsync of its
        # image would not have to write the new directory's metadata too (ext4).
        image.mkdir(mode=0o750)
        a.checkpoint = self.call(checkpoint_argv(
            a.target, names[0], str(image), flags=flags,
            log_file=str(logs / f"{containers[0]}.runsc.log")), logs / "ckpt.log")
        self.free(a)  # after the answer, as ateom frees the worker (not timed)
        return a

    def alone_restore(self, a: Alone, *, until_useful: bool = True,
                      settled: bool = False) -> tuple[float, float]:
        """(restore, time to the first new tick) of a saved actor (the second 0.0 when
        not `until_useful`: the restore calls alone, as an RPC's return measures).
        `settled`: the caller has just quiesced (restores run at once)."""
        mark = a.out.stat().st_size
        if not settled:
            quiesce()
        started = time.perf_counter()
        for name, bundle in a.containers:
            self.call(restore_argv(a.target, name, str(a.template / bundle), str(a.image),
                                   str(a.root / f"{name}.pid"),
                                   log_file=str(a.logs / f"{bundle}.runsc.log")),
                      a.logs / f"{bundle}.log")
        restore = time.perf_counter() - started
        if not until_useful:
            return restore, 0.0
        return restore, restore + wait_text(a.out, "tick=", after=mark)

    def free(self, a: Alone) -> None:
        """Kill and delete every container (the root first, as ateom does)."""
        for name, _ in a.containers:
            self.reaper.run(kill_argv(a.target, name, "KILL"), log_path=str(a.logs / "k.log"),
                            timeout=60, fd_table=FD_TABLE)
        for name, _ in a.containers:
            self.reaper.run(delete_argv(a.target, name), log_path=str(a.logs / "k.log"),
                            timeout=60, fd_table=FD_TABLE)

    def alone_teardown(self, a: Alone) -> None:
        self.free(a)
        kill_sandbox_processes(str(a.root))
        remove_state_dir(str(a.root))
        shutil.rmtree(a.image, ignore_errors=True)  # as the daemon discards its restored one

    def call(self, argv: list[str], log: Path) -> float:
        started = time.perf_counter()
        # As ateom's Runsc spawns it: the same fd table (see FD_TABLE).
        done = self.reaper.run(argv, log_path=str(log), timeout=600, fd_table=FD_TABLE)
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
        quiesce()
        took = parallel([lambda a=a: self.alone_restore(  # type: ignore[misc]
            a, until_useful=False, settled=True) for a in saved])
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

        self.daemon.settle()
        quiesce()
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
