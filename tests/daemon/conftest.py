"""Fixtures for the daemon suite. E2E parts share one world and one daemon per module."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.harness import RUNSC, Daemon, World, dev_null_ok, runsc_processes

needs_runsc = pytest.mark.skipif(
    os.geteuid() != 0 or RUNSC is None or shutil.which("gcc") is None
    or not os.path.exists("/bin/busybox"),
    reason="e2e needs root, runsc, gcc and /bin/busybox",
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def daemon(world: World) -> Iterator[Daemon]:
    real_dir = world.base / "real-runsc"
    real_dir.mkdir(exist_ok=True)
    if not (real_dir / "runsc").exists():
        (real_dir / "runsc").symlink_to(RUNSC or "/usr/bin/runsc")
    d = Daemon(world, str(world.shim), runsc_dir=str(real_dir), metrics_listen="127.0.0.1:0")
    try:
        yield d
    finally:
        code = d.stop()
        assert code == 0, d.logs()[-3000:]
        assert not runsc_processes(str(world.run_dir / "actors")), "sandbox processes left"


@pytest.fixture
def clean(world: World, daemon: Daemon) -> Iterator[None]:
    """After each e2e test: nothing hosted, no runsc state or process, /dev/null intact."""
    yield
    from ateom._proto import ateom_pb2 as pb

    status = daemon.inspect.GetStatus(pb.GetStatusRequest())
    for actor in status.actors:
        daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=actor.actor_uid),
                                      timeout=60)
    state_root = world.run_dir / "actors"
    leftovers = [p.name for p in state_root.iterdir()] if state_root.exists() else []
    assert not status.actors, f"test left actors hosted: {status.actors}"
    assert leftovers == [], f"runsc state left: {leftovers}"
    for uid_dir in Path(state_root).glob("*"):
        assert not runsc_processes(str(uid_dir))
    assert dev_null_ok(), "/dev/null lost root:root 0666"
