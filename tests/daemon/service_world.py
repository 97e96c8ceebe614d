"""A daemon service over the fake runsc, for the lifecycle's argv and failure-path tests:
`World` (an actor's dirs and bundles, the service) and its fixtures, `make_world` and
`gpu_spec_dir` (tests/daemon/conftest.py offers them to every daemon test)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ateom.daemon.calls.requests import (
    ActorDirs,
    ActorRef,
    ContainerRequest,
    DeviceChoice,
    DevicePolicy,
    RunRequest,
)
from ateom.daemon.lifecycle.service import AteomService
from ateom.process.reaper import Reaper
from tests.daemon.fake_runsc import FakeRunsc
from tests.support import build_busybox_bundle, build_fake_driver_libs, write_sim_gpu_spec
from tests.support.configs import daemon_config

NO_DEVICES = DeviceChoice(DevicePolicy.NONE)


@pytest.fixture(scope="module")
def gpu_spec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("gpu")
    libs = build_fake_driver_libs(base / "lib64")
    write_sim_gpu_spec(base / "cdi", libs, gpus=2)
    return base / "cdi"


class World:
    def __init__(self, tmp: Path, spec_dir: Path, fake: FakeRunsc, **config: object) -> None:
        self.tmp = tmp
        self.fake = fake
        self.actors_root = tmp / "actors"
        self.actors_root.mkdir()  # the node agent's volume
        (tmp / "dev").mkdir()
        for node in ("nvidia0", "nvidiactl", "nvidia-uvm"):
            (tmp / "dev" / node).touch()
        kw: dict[str, object] = dict(
            actors_root=str(self.actors_root), runsc=str(fake.path), run_dir=str(tmp / "run"),
            spec_dirs=(str(spec_dir),), gpu_glob=str(tmp / "dev" / "nvidia[0-9]*"),
            kill_grace=0.2, runsc_global_flags=("--network=none",),
            toolkit_dir=str(tmp / "toolkit"), env={"PATH": os.defpath},
        )
        kw.update(config)
        self.config = daemon_config(**kw)  # type: ignore[arg-type]
        self.service = AteomService(self.config, reaper=Reaper())

    def dirs(self, uid: str) -> ActorDirs:
        root = self.actors_root / uid
        return ActorDirs(root_dir=str(root), oci_bundle_dir=str(root / "bundles"),
                         checkpoint_dir=str(root / "ckpt"), restore_dir=str(root / "restore"))

    def bundles(self, uid: str, *apps: str) -> Path:
        b = self.actors_root / uid / "bundles"
        for name in ("_pause", *apps):
            build_busybox_bundle(b / name, ["sleep", "1000"])
        return b

    def run(self, uid: str, *apps: str, devices: DeviceChoice = NO_DEVICES) -> RunRequest:
        self.bundles(uid, *apps)
        return RunRequest(actor=ActorRef(uid), dirs=self.dirs(uid), containers=tuple(
            ContainerRequest(name=a, devices=devices) for a in apps))

    def state_dir(self, uid: str) -> Path:
        return Path(self.config.state_root) / uid


@pytest.fixture
def make_world(tmp_path: Path, gpu_spec_dir: Path):  # type: ignore[no-untyped-def]
    def make(*, fake_kw: dict[str, object] | None = None, **config: object) -> World:
        fake = FakeRunsc(tmp_path / "bin", **(fake_kw or {}))  # type: ignore[arg-type]
        return World(tmp_path, gpu_spec_dir, fake, **config)

    return make
