"""Fixtures for the daemon suite. E2E parts share one world per module; a daemon on
the default emulated runsc release, and one per release for release-independent tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ateom.daemon.calls.refusals import REFUSAL_OBSERVERS
from tests.support import build_fake_driver_libs, write_sim_gpu_spec
from tests.support.daemon import (
    DEFAULT_RELEASE,
    RELEASES,
    RUNSC,
    Daemon,
    DaemonWorld,
    dev_null_ok,
    release_options,
    runsc_processes,
)
from tests.support.world import ServiceWorld, plain_world

needs_runsc = pytest.mark.skipif(
    os.geteuid() != 0 or RUNSC is None or shutil.which("gcc") is None
    or not os.path.exists("/bin/busybox"),
    reason="e2e needs root, runsc, gcc and /bin/busybox",
)


@pytest.fixture(scope="module")
def gpu_spec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("gpu")
    libs = build_fake_driver_libs(base / "lib64")
    write_sim_gpu_spec(base / "cdi", libs, gpus=2)
    return base / "cdi"


@pytest.fixture
def make_world(tmp_path: Path, gpu_spec_dir: Path) -> Callable[..., ServiceWorld]:
    """`plain_world` in this test's tmp dir, on the module's 2-GPU spec."""
    def make(**kw: Any) -> ServiceWorld:
        return plain_world(tmp_path, gpu_spec_dir, **kw)

    return make


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> DaemonWorld:
    return DaemonWorld(tmp_path_factory.mktemp("world"))


def _stopped(d: Daemon) -> None:
    code = d.stop()
    assert code == 0, d.logs()[-3000:]
    assert not runsc_processes(str(d.run_dir / "actors")), "sandbox processes left"


@pytest.fixture(scope="module")
def daemon(world: DaemonWorld) -> Iterator[Daemon]:
    """The daemon on the default release; `runsc_dir` also offers a runsc without
    nvproxy (Debian 12's own 2022 build, emulated), as a request's runsc_path."""
    old_dir = world.base / "runsc-dir"
    old_dir.mkdir(exist_ok=True)
    if not (old_dir / "runsc").exists():
        (old_dir / "runsc").symlink_to(world.runsc("20221219").path)
    d = Daemon(world, str(world.runsc(DEFAULT_RELEASE).path), release=DEFAULT_RELEASE,
               runsc_dir=str(old_dir), metrics_listen="127.0.0.1:0",
               **release_options(DEFAULT_RELEASE))
    try:
        yield d
    finally:
        _stopped(d)


@pytest.fixture(scope="module", params=RELEASES)
def release_daemon(request: pytest.FixtureRequest, world: DaemonWorld) -> Iterator[Daemon]:
    """A daemon per emulated release (its own run dir and socket), for tests whose
    behaviour is the same on every release."""
    release: str = request.param
    d = Daemon(world, str(world.runsc(release).path), release=release,
               run_dir=world.base / f"run-{release}", **release_options(release))
    try:
        yield d
    finally:
        _stopped(d)


@pytest.fixture
def clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each e2e test: nothing hosted, no runsc state or process, /dev/null intact."""
    yield
    from ateom._proto import ateom_pb2 as pb

    name = "release_daemon" if "release_daemon" in request.fixturenames else "daemon"
    daemon: Daemon = request.getfixturevalue(name)
    daemon.settle()  # checkpointed actors are reaped after their answer
    status = daemon.inspect.GetStatus(pb.GetStatusRequest())
    for actor in status.actors:
        daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=actor.actor_uid),
                                      timeout=60)
    state_root = daemon.run_dir / "actors"
    leftovers = [p.name for p in state_root.iterdir()] if state_root.exists() else []
    assert not status.actors, f"test left actors hosted: {status.actors}"
    assert leftovers == [], f"runsc state left: {leftovers}"
    for uid_dir in Path(state_root).glob("*"):
        assert not runsc_processes(str(uid_dir))
    assert dev_null_ok(), "/dev/null lost root:root 0666"


@pytest.fixture
def refusals() -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []

    def observe(kind: str, reason: str) -> None:
        seen.append((kind, reason))

    REFUSAL_OBSERVERS.append(observe)
    yield seen
    REFUSAL_OBSERVERS.remove(observe)
