"""Faults a GPU worker meets, on the real newest runsc: every answer true, every wait bounded.

gVisor's newest release (`tests.support.newest_runsc`), stand-in GPUs in a private
mount namespace as in test_e2e_real_runsc; the faults are real: a small tmpfs
mounted in the daemon's namespace for a full disk, a read-only one for a save
that fails before the pause, SIGSTOP for a wedged sandbox, kill -9 for a
sandbox, a runsc checkpoint and ateom itself. What each test holds:

- a checkpoint that cannot fit is refused (RESOURCE_EXHAUSTED) before anything is
  paused, and the actor runs on; one that fails before the pause keeps the actor
  (FAILED_PRECONDITION, the app ticking, a later checkpoint working); one that
  fails after it (the disk filling up mid-save, runsc killed mid-save) loses it,
  and says so (DATA_LOSS), with its GPUs back and the failed save's files gone;
- a sandbox killed by anyone is seen at once: listed as exited, its GPUs back, a
  Checkpoint refused naming the exit;
- Terminate of a stopped (wedged) sandbox ends within --kill-grace plus a few
  seconds and leaves nothing; another actor's calls are not held up meanwhile,
  and the wedged one's stats are refused naming the call, the actor and the bound;
- a GPU actor on a worker without the control nodes is refused before runsc;
- ateom killed mid-checkpoint and restarted on the same dirs: nothing listed, no
  holder, no sandbox left, and no record beside an image it never answered for;
- a truncated image is refused, nothing left, its files kept; Terminate racing a
  Checkpoint and two Restores of one actor at once end in one true state.
The no-runsc and unknown-flag readiness faults run on Debian's runsc in
test_e2e_readiness.py (no GPU needed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1.health_pb2 import HealthCheckRequest

from ateom._proto import ateom_pb2 as pb
from ateom.gpuinfo.record import RECORD_FILE
from tests.daemon.conftest import _stopped, needs_runsc
from tests.daemon.test_e2e_real_runsc import (
    NEWEST,
    mounts_in,
    needs_newest,
    newest_daemon,
    nothing_left,
    ticks,
    wait_ticks,
)
from tests.support import DEFAULT_DRIVER_VERSION
from tests.support.daemon import GPUS, Daemon, DaemonWorld, run_request, runsc_processes
from tests.support.stand_in_gpu import install_cdi_hook_stand_in, stand_in_gpu_prefix

pytestmark = [needs_runsc, needs_newest, pytest.mark.root, pytest.mark.runtime]

KILL_GRACE = 1.0


def holding(mib: int) -> str:
    """An app that holds `mib` MiB in its sandbox's memory, then ticks."""
    return (f"head -c {mib}m /dev/urandom > /dev/shm/held; i=0; "
            "while true; do i=$((i+1)); echo tick=$i; sleep 0.1; done")


@pytest.fixture(scope="module")
def daemon(world: DaemonWorld) -> Iterator[Daemon]:
    d = newest_daemon(world, "faults", max_actors="4", kill_grace=str(KILL_GRACE))
    try:
        yield d
    finally:
        _stopped(d)


def gpu_actor(daemon: Daemon, world: DaemonWorld, uid: str, mib: int = 8) -> Path:
    """Run a GPU actor holding `mib` MiB; its app's log, once it ticks."""
    for leftover in ("checkpoint", "restore"):
        shutil.rmtree(world.actors_root / uid / leftover, ignore_errors=True)
    world.bundles(uid, {"app": ["sh", "-c", holding(mib)]})
    daemon.stub.RunWorkload(run_request(world, uid, [pb.Container(name="app")]), timeout=120)
    log = daemon.run_dir / "logs" / uid / "app.log"
    wait_ticks(log, 3, timeout=60)
    return log


def checkpoint(daemon: Daemon, world: DaemonWorld, uid: str, image: Path | None = None,
               timeout: float = 180) -> pb.CheckpointWorkloadResponse:
    dirs = world.actor_dirs(uid)
    if image is not None:
        dirs.checkpoint_dir = str(image)
    return daemon.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
        actor_uid=uid, actor_dirs=dirs), timeout=timeout)


def refused(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


def actors(daemon: Daemon) -> dict[str, pb.HostedActor]:
    return {a.actor_uid: a for a in daemon.inspect.ListActors(pb.ListActorsRequest()).actors}


def holders(daemon: Daemon) -> dict[str, list[str]]:
    listed = daemon.inspect.ListActors(pb.ListActorsRequest()).gpus
    return {g.gpu: list(g.actor_uids) for g in listed}


def in_namespace(daemon: Daemon, *argv: str) -> None:
    """Run `argv` in the daemon's mount namespace (its stand-in /dev, its mounts)."""
    subprocess.run(["nsenter", "-t", str(daemon.proc.pid), "-m", *argv], check=True)


def seen_by_daemon(daemon: Daemon, path: Path) -> Path:
    """`path` as the daemon's mount namespace has it (a tmpfs mounted there)."""
    return Path(f"/proc/{daemon.proc.pid}/root{path}")


def mount_tmpfs(daemon: Daemon, path: Path, size_bytes: int, *, readonly: bool = False) -> None:
    path.mkdir(parents=True, exist_ok=True)
    in_namespace(daemon, "mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path))
    if readonly:
        in_namespace(daemon, "mount", "-o", "remount,ro", str(path))


def unmount(daemon: Daemon, path: Path) -> None:
    in_namespace(daemon, "umount", str(path))


def memory_of(daemon: Daemon, uid: str) -> int:
    sample = daemon.stub.GetWorkloadStats(pb.GetWorkloadStatsRequest(actor_uid=uid), timeout=30)
    return int(sample.sample.memory_current_bytes)


def runsc_checkpoint_of(root: Path) -> int | None:
    """The pid of the `runsc checkpoint` running with `root`, if one is."""
    marker = str(root).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"checkpoint" in argv and any(marker in a for a in argv):
            return int(entry)
    return None


def once_writing(image: Path, then: Callable[[], None], timeout: float = 60) -> threading.Thread:
    """On a thread: once runsc has begun writing the image's pages (the sandbox is
    paused by then), call `then`."""
    def watch() -> None:
        deadline = time.monotonic() + timeout
        pages = image / "pages.img"
        while time.monotonic() < deadline:
            try:
                if pages.stat().st_size > (1 << 20):
                    then()
                    return
            except FileNotFoundError:
                pass
            time.sleep(0.002)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def runs_on_and_saves(daemon: Daemon, world: DaemonWorld, uid: str, log: Path) -> None:
    """The actor kept running, never paused, hosted with its GPUs, and a checkpoint
    into its own dir (with room, writable) works."""
    last = ticks(log)[-1]
    wait_ticks(log, last + 3)
    hosted = actors(daemon)[uid]
    assert hosted.phase == "running" and not hosted.sandbox_exited
    assert len(hosted.gpus) == GPUS
    saved = checkpoint(daemon, world, uid)
    assert RECORD_FILE in saved.snapshot_files
    nothing_left(daemon, uid)


def assert_gone_and_freed(daemon: Daemon, uid: str) -> None:
    """Not listed, no GPU held, no state dir, mount or process of it left."""
    daemon.settle()
    assert uid not in actors(daemon)
    assert all(uid not in h for h in holders(daemon).values())
    state = daemon.run_dir / "actors" / uid
    assert not state.exists()
    assert mounts_in(daemon.proc.pid, state) == []
    assert not runsc_processes(str(state))


# -- a full disk ---------------------------------------------------------------------


def test_a_checkpoint_that_cannot_fit_is_refused_before_anything_is_paused(
        world: DaemonWorld, daemon: Daemon) -> None:
    uid = "tight"
    log = gpu_actor(daemon, world, uid, mib=48)
    small = world.actors_root / uid / "small-disk"
    mount_tmpfs(daemon, small, 8 << 20)
    try:
        err = refused(lambda: checkpoint(daemon, world, uid, small))
        assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
        said = err.details()
        assert str(small) in said and "8.0 MiB free" in said and "keeps running" in said
        assert list(seen_by_daemon(daemon, small).iterdir()) == []  # nothing written
    finally:
        unmount(daemon, small)
    runs_on_and_saves(daemon, world, uid, log)


def test_a_disk_that_fills_up_during_the_save_loses_the_actor_and_says_so(
        world: DaemonWorld, daemon: Daemon) -> None:
    uid = "filled"
    gpu_actor(daemon, world, uid, mib=96)
    disk = world.actors_root / uid / "filling-disk"
    image = disk / "checkpoint"
    # Room enough for the check (the actor's memory and the margin); then, once
    # runsc is writing, someone else on the same disk takes the rest.
    mount_tmpfs(daemon, disk, memory_of(daemon, uid) + (48 << 20))
    seen = seen_by_daemon(daemon, disk)

    def fill() -> None:  # until the disk is full, keeping what fitted
        block = b"\0" * (1 << 20)
        with contextlib.suppress(OSError), open(seen / "someone-else", "wb") as f:
            while True:
                f.write(block)
                f.flush()

    try:
        watcher = once_writing(seen / "checkpoint", fill)
        err = refused(lambda: checkpoint(daemon, world, uid, image))
        watcher.join()
        assert err.code() is grpc.StatusCode.DATA_LOSS, err.details()
        said = err.details()
        assert "was lost" in said and "no space left on device" in said, said
        assert "exited" in said and "keeps running" not in said
        # The failed save's files are gone; what someone else wrote is not.
        assert list((seen / "checkpoint").iterdir()) == []
        assert (seen / "someone-else").stat().st_size > 0
    finally:
        unmount(daemon, disk)
    assert_gone_and_freed(daemon, uid)
    settle = [e for e in daemon.log_events()
              if e.get("event") == "phase" and e.get("phase") == "save.settle"
              and e.get("actor_uid") == uid]
    assert settle and settle[-1]["duration_ms"] < 10_000


def test_a_save_refused_before_the_pause_keeps_the_actor(
        world: DaemonWorld, daemon: Daemon) -> None:
    uid = "readonly"
    log = gpu_actor(daemon, world, uid)
    disk = world.actors_root / uid / "readonly-disk"
    mount_tmpfs(daemon, disk, 64 << 20, readonly=True)
    try:
        err = refused(lambda: checkpoint(daemon, world, uid, disk))
    finally:
        unmount(daemon, disk)
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION, err.details()
    assert "keeps running" in err.details() and "read-only file system" in err.details()
    runs_on_and_saves(daemon, world, uid, log)


def test_runsc_killed_in_the_middle_of_a_checkpoint_loses_the_actor_and_says_so(
        world: DaemonWorld, daemon: Daemon) -> None:
    uid = "midsave"
    gpu_actor(daemon, world, uid, mib=192)
    root = daemon.run_dir / "actors" / uid
    image = Path(world.actor_dirs(uid).checkpoint_dir)

    def kill_runsc() -> None:
        pid = runsc_checkpoint_of(root)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    watcher = once_writing(image, kill_runsc)
    err = refused(lambda: checkpoint(daemon, world, uid))
    watcher.join()
    assert err.code() is grpc.StatusCode.DATA_LOSS, err.details()
    assert "was lost" in err.details() and "exited" in err.details(), err.details()
    assert not (image / RECORD_FILE).exists()
    assert sorted(p.name for p in image.iterdir()) == []  # what it wrote is gone
    assert_gone_and_freed(daemon, uid)


# -- a sandbox that exits, a sandbox that hangs ------------------------------------------


def test_a_sandbox_killed_by_anyone_is_seen_at_once_and_its_gpus_go_back(
        world: DaemonWorld, daemon: Daemon) -> None:
    uid = "killed"
    gpu_actor(daemon, world, uid)
    root = daemon.run_dir / "actors" / uid
    sandbox = [p for p in runsc_processes(str(root))
               if b"boot" in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")]
    assert len(sandbox) == 1
    os.kill(sandbox[0], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while actors(daemon)[uid].phase != "exited" and time.monotonic() < deadline:
        time.sleep(0.02)
    hosted = actors(daemon)[uid]
    assert hosted.phase == "exited" and hosted.sandbox_exited and hosted.exit_code == -9
    assert hosted.exited_at_unix_nano > 0 and list(hosted.gpus) == []
    assert all(uid not in h for h in holders(daemon).values())  # back at once
    err = refused(lambda: checkpoint(daemon, world, uid))
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "killed by signal 9" in err.details() and "in state stopped" not in err.details()
    restore = Path(world.actor_dirs(uid).restore_dir)
    restore.mkdir(parents=True, exist_ok=True)
    (restore / "checkpoint.img").write_bytes(b"an image of some earlier turn")
    err = refused(lambda: daemon.stub.RestoreWorkload(pb.RestoreWorkloadRequest(
        actor_uid=uid, spec=pb.WorkloadSpec(containers=[pb.Container(name="app")]),
        actor_dirs=world.actor_dirs(uid)), timeout=60))
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "killed by signal 9" in err.details()
    assert any(e.get("event") == "actor_exited" and e.get("actor_uid") == uid
               for e in daemon.log_events())
    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
    assert_gone_and_freed(daemon, uid)


def test_terminate_of_a_wedged_sandbox_ends_within_the_grace_and_holds_no_one_up(
        world: DaemonWorld, daemon: Daemon) -> None:
    wedged, other = "wedged", "bystander"
    gpu_actor(daemon, world, wedged)
    gpu_actor(daemon, world, other)
    pids = runsc_processes(str(daemon.run_dir / "actors" / wedged))
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)  # a wedged sentry, a frozen cgroup
    stopped_ns = time.time_ns()
    try:
        started = time.monotonic()
        err = refused(lambda: daemon.stub.GetWorkloadStats(
            pb.GetWorkloadStatsRequest(actor_uid=wedged), timeout=30))
        assert err.code() is grpc.StatusCode.UNAVAILABLE
        said = err.details()
        assert "events --stats" in said and wedged in said and "3 s" in said, said
        # Another actor's calls are not held up by it.
        memory_of(daemon, other)
        # The discovery read answers at once, from the background samples: both actors,
        # the wedged one not measured, or measured before it was stopped (its age said).
        asked = time.monotonic()
        active = daemon.stub.GetActiveWorkloadStats(pb.GetActiveWorkloadStatsRequest(),
                                                    timeout=30)
        assert time.monotonic() - asked < 1.0
        by_uid = {s.actor_uid: s for s in active.samples}
        assert set(by_uid) == {wedged, other}
        assert (by_uid[wedged].source == pb.STATS_SOURCE_UNSPECIFIED
                or by_uid[wedged].observed_at_unix_nano < stopped_ns), by_uid[wedged]
        # Inspection never waits behind work: while a read of the wedged sandbox is
        # stuck in runsc (its 3 s bound), every inspection call answers.
        stuck = threading.Thread(target=lambda: refused(lambda: daemon.stub.GetWorkloadStats(
            pb.GetWorkloadStatsRequest(actor_uid=wedged), timeout=30)))
        stuck.start()
        time.sleep(0.3)
        for name, call in (
                ("ListActors", lambda: daemon.inspect.ListActors(pb.ListActorsRequest(),
                                                                 timeout=30)),
                ("GetStatus", lambda: daemon.inspect.GetStatus(pb.GetStatusRequest(),
                                                               timeout=30)),
                ("Health", lambda: daemon.health.Check(HealthCheckRequest(), timeout=30)),
                ("GetActiveWorkloadStats", lambda: daemon.stub.GetActiveWorkloadStats(
                    pb.GetActiveWorkloadStatsRequest(), timeout=30))):
            asked = time.monotonic()
            call()
            assert time.monotonic() - asked < 1.0, name
        assert stuck.is_alive()  # they did not wait for it
        stuck.join(30)
        assert time.monotonic() - started < 15
        started = time.monotonic()
        daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=wedged), timeout=60)
        took = time.monotonic() - started
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert took < KILL_GRACE + 6, took
    assert_gone_and_freed(daemon, wedged)
    assert any(e.get("event") == "runsc_timed_out" and e.get("actor") == wedged
               for e in daemon.log_events())
    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=other), timeout=60)
    assert_gone_and_freed(daemon, other)


# -- a worker without the NVIDIA control nodes ---------------------------------------------


def test_a_gpu_actor_without_the_control_nodes_is_refused_before_runsc(world: DaemonWorld) -> None:
    assert NEWEST is not None
    install_cdi_hook_stand_in(world.base / "toolkit")
    d = Daemon(world, NEWEST.path, run_dir=world.base / "run-no-uvm",
               wrap=stand_in_gpu_prefix(world.base / "dev-no-uvm", GPUS, control_nodes=False),
               nvproxy_driver_version=DEFAULT_DRIVER_VERSION, gpu_glob="/dev/nvidia[0-9]*")
    uid = "no-uvm"
    try:
        world.bundles(uid, {"app": ["sh", "-c", holding(1)]})
        err = refused(lambda: d.stub.RunWorkload(
            run_request(world, uid, [pb.Container(name="app")]), timeout=60))
        assert err.code() is grpc.StatusCode.FAILED_PRECONDITION, err.details()
        assert "/dev/nvidiactl" in err.details() and "/dev/nvidia-uvm" in err.details()
        assert not any(e.get("event") == "phase" and str(e.get("phase", "")).startswith("runsc.")
                       for e in d.log_events())
        assert not (d.run_dir / "actors" / uid).exists()
    finally:
        _stopped(d)


# -- ateom itself killed mid-checkpoint ---------------------------------------------------


def test_ateom_killed_mid_checkpoint_and_restarted_leaves_one_true_state(
        world: DaemonWorld) -> None:
    uid = "crashed"
    first = newest_daemon(world, "crash", max_actors="2")
    image = Path(world.actor_dirs(uid).checkpoint_dir)
    try:
        gpu_actor(first, world, uid, mib=192)
        watcher = once_writing(image, lambda: first.proc.kill())
        refused(lambda: checkpoint(first, world, uid))  # the connection breaks
        watcher.join()
        first.proc.wait(30)
    finally:
        first.channel.close()
    # A new daemon on the same dirs (its own stand-in /dev, as after a Pod restart).
    second = newest_daemon(world, "crash", max_actors="2")
    try:
        state_root = second.run_dir / "actors"
        deadline = time.monotonic() + 30
        while runsc_processes(str(state_root / uid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert actors(second) == {}
        assert all(not h for h in holders(second).values())
        assert not (state_root / uid).exists() and not runsc_processes(str(state_root / uid))
        assert not (image / RECORD_FILE).exists()  # never beside an unanswered image
        gpu_actor(second, world, uid)  # the worker is whole: the actor runs again
        second.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
        nothing_left(second, uid)
    finally:
        _stopped(second)


# -- restores -----------------------------------------------------------------------------


def test_a_truncated_image_is_refused_leaving_nothing_and_keeping_its_files(
        world: DaemonWorld, daemon: Daemon) -> None:
    uid = "truncated"
    gpu_actor(daemon, world, uid, mib=32)
    checkpoint(daemon, world, uid)
    nothing_left(daemon, uid)
    dirs = world.actor_dirs(uid)
    restore = Path(dirs.restore_dir)
    shutil.copytree(dirs.checkpoint_dir, restore)
    pages = restore / "pages.img"
    os.truncate(pages, pages.stat().st_size // 2)
    kept = {p.name: p.stat().st_size for p in restore.iterdir()}
    err = refused(lambda: daemon.stub.RestoreWorkload(pb.RestoreWorkloadRequest(
        actor_uid=uid, spec=pb.WorkloadSpec(containers=[pb.Container(name="app")]),
        actor_dirs=dirs), timeout=120))
    assert err.code() is not grpc.StatusCode.OK and "cleaned up" in err.details()
    assert uid not in actors(daemon)
    nothing_left(daemon, uid)
    assert {p.name: p.stat().st_size for p in restore.iterdir()} == kept


def test_terminate_racing_a_checkpoint_ends_in_one_true_state(
        world: DaemonWorld, daemon: Daemon) -> None:
    uid = "raced"
    gpu_actor(daemon, world, uid, mib=96)
    image = Path(world.actor_dirs(uid).checkpoint_dir)
    answers: dict[str, Any] = {}

    def do(name: str, call: Callable[[], Any]) -> None:
        try:
            answers[name] = call()
        except grpc.RpcError as exc:
            answers[name] = exc

    ck = threading.Thread(target=do, args=("checkpoint", lambda: checkpoint(daemon, world, uid)))
    tm = threading.Thread(target=do, args=("terminate", lambda: daemon.stub.TerminateWorkload(
        pb.TerminateWorkloadRequest(actor_uid=uid), timeout=120)))
    ck.start()
    time.sleep(0.05)
    tm.start()
    ck.join(180)
    tm.join(180)
    assert not isinstance(answers["terminate"], grpc.RpcError), answers["terminate"]
    saved = answers["checkpoint"]
    if isinstance(saved, grpc.RpcError):  # terminated first: nothing claims to be saved
        assert saved.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.DATA_LOSS)
        assert not (image / RECORD_FILE).exists()
    else:  # saved first: the image is whole, its record beside it
        assert RECORD_FILE in saved.snapshot_files and (image / RECORD_FILE).exists()
    assert_gone_and_freed(daemon, uid)


def test_two_restores_of_one_actor_at_once_host_it_once(world: DaemonWorld, daemon: Daemon) -> None:
    uid = "twice"
    log = gpu_actor(daemon, world, uid, mib=16)
    checkpoint(daemon, world, uid)
    nothing_left(daemon, uid)
    last = ticks(log)[-1]
    dirs = world.actor_dirs(uid)
    shutil.copytree(dirs.checkpoint_dir, dirs.restore_dir)
    request = pb.RestoreWorkloadRequest(
        actor_uid=uid, spec=pb.WorkloadSpec(containers=[pb.Container(name="app")]),
        actor_dirs=dirs, preserve_restore_dir=True)
    answers: list[Any] = []

    def restore() -> None:
        try:
            answers.append(daemon.stub.RestoreWorkload(request, timeout=120))
        except grpc.RpcError as exc:
            answers.append(exc)

    threads = [threading.Thread(target=restore) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    failed = [a for a in answers if isinstance(a, grpc.RpcError)]
    assert len(answers) == 2 and len(failed) == 1, answers
    assert failed[0].code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "already hosted" in failed[0].details()
    after = wait_ticks(log, last + 3)
    assert after[after.index(last) + 1] == last + 1  # one sandbox, from the image
    boots = [p for p in runsc_processes(str(daemon.run_dir / "actors" / uid))
             if b"boot" in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")]
    assert len(boots) == 1
    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
    assert_gone_and_freed(daemon, uid)
