"""The daemon tests' worlds, built in one place.

A world is a temp dir holding what a worker Pod gives ateom: the node agent's
actors volume, a simulated GPU worker (`SimWorker`: real ELF driver libraries
and their CDI spec, the NVIDIA module's /proc files, the Pod's /dev/nvidiaN
stand-ins, a stand-in nvidia-smi) and a runsc of the test's choice:

- `ServiceWorld`: an `AteomService` in this process over `FakeRunsc` (each argv
  recorded, failures scripted), for the lifecycle's argv and failure paths;
  `gpu_world` is one on a 4-GPU `SimWorker` with the GPU checkpoint tools.
- `tests.support.daemon.DaemonWorld`: ``ateom serve`` as a subprocess over an
  emulated gVisor release in front of the real runsc (the e2e suites), on a
  `SimWorker` built here too.

Both hand out an actor's dirs as `actor_dirs` lays them out.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ateom.daemon.calls.requests import (
    ActorDirs,
    ActorRef,
    CheckpointRequest,
    ContainerRequest,
    DeviceChoice,
    DevicePolicy,
    GpuWish,
    RestoreRequest,
    RunRequest,
)
from ateom.daemon.lifecycle.service import AteomService
from ateom.process.reaper import Reaper
from tests.support.bundle import build_busybox_bundle
from tests.support.configs import daemon_config
from tests.support.driver import build_fake_driver_libs
from tests.support.fake_runsc import FakeRunsc
from tests.support.gpu_node import GpuNode, SimGpu, write_gpu_node, write_sim_fixture
from tests.support.spec import write_sim_gpu_spec

NO_DEVICES = DeviceChoice(DevicePolicy.NONE)
POD_GPUS = DeviceChoice()  # the container takes its actor's GPUs
GPU_CHECKPOINT = ("cuda-checkpoint-path", "cuda-checkpoint-sequential")
needs_busybox = pytest.mark.skipif(not os.path.exists("/bin/busybox"), reason="needs busybox")


def sim_uuid(index: int) -> str:
    return f"GPU-{index:08d}-aaaa-bbbb-cccc-dddddddddddd"


@dataclass(frozen=True)
class SimWorker:
    """A simulated GPU worker on disk: `spec_dir` holds the ``nvidia.com/gpu``
    spec of its GPUs (their libraries real ELF files), `node` the /proc files,
    device stand-ins and nvidia-smi of the same GPUs and driver."""

    spec_dir: Path
    node: GpuNode


def sim_worker(base: Path, *, gpus: int, driver: str, container_lib_dir: str | None = None
               ) -> SimWorker:
    libs = build_fake_driver_libs(base / "driver" / "lib64")
    spec_kw = {} if container_lib_dir is None else {"container_lib_dir": container_lib_dir}
    write_sim_gpu_spec(base / "cdi", libs, gpus=gpus, **spec_kw)  # type: ignore[arg-type]
    fixture = write_sim_fixture(base / "gpu-fixture", [
        SimGpu(index=i, minor=i, uuid=sim_uuid(i)) for i in range(gpus)], driver_version=driver)
    return SimWorker(base / "cdi", write_gpu_node(base / "gpu-node", fixture))


def actor_dirs(actors_root: Path, uid: str) -> ActorDirs:
    root = actors_root / uid
    return ActorDirs(root_dir=str(root), oci_bundle_dir=str(root / "bundles"),
                     checkpoint_dir=str(root / "checkpoint"), restore_dir=str(root / "restore"))


class ServiceWorld:
    """An `AteomService` over `fake`, its actors under ``tmp/actors``.

    `run` builds busybox bundles (``_pause`` and `apps`, else the world's
    `default_apps`) and the request; a container takes `devices`, else the
    world's `default_devices`.
    """

    def __init__(self, tmp: Path, fake: FakeRunsc, *, spec_dir: Path, gpu_glob: str,
                 default_apps: tuple[str, ...] = (), default_devices: DeviceChoice = NO_DEVICES,
                 **config: object) -> None:
        self.tmp = tmp
        self.fake = fake
        self.default_apps = default_apps
        self.default_devices = default_devices
        self.actors_root = tmp / "actors"
        self.actors_root.mkdir(exist_ok=True)  # the node agent's volume
        kw: dict[str, object] = dict(
            actors_root=str(self.actors_root), runsc=str(fake.path), run_dir=str(tmp / "run"),
            spec_dirs=(str(spec_dir),), gpu_glob=gpu_glob, toolkit_dir=str(tmp / "toolkit"),
            env={"PATH": os.defpath})
        kw.update(config)
        self.config = daemon_config(**kw)  # type: ignore[arg-type]
        self.service = AteomService(self.config, reaper=Reaper())

    def dirs(self, uid: str) -> ActorDirs:
        return actor_dirs(self.actors_root, uid)

    def bundles(self, uid: str, *apps: str) -> Path:
        b = self.actors_root / uid / "bundles"
        for name in ("_pause", *apps):
            build_busybox_bundle(b / name, ["sleep", "1000"])
        return b

    def run(self, uid: str, *apps: str, gpus: GpuWish | None = None,
            devices: DeviceChoice | None = None) -> RunRequest:
        apps = apps or self.default_apps
        self.bundles(uid, *apps)
        chosen = self.default_devices if devices is None else devices
        return RunRequest(actor=ActorRef(uid), dirs=self.dirs(uid), gpus=gpus, containers=tuple(
            ContainerRequest(name=a, devices=chosen) for a in apps))

    def state_dir(self, uid: str) -> Path:
        return Path(self.config.state_root) / uid

    def app_config(self, uid: str, app: str = "app") -> dict[str, object]:
        """The config runsc reads for a hosted actor's container: ateom's own copy in
        its run dir (the node agent's bundle is never written)."""
        return dict(json.loads(self.own_config_path(uid, app).read_text()))

    def own_config_path(self, uid: str, container: str = "app") -> Path:
        return Path(self.config.run_dir) / "bundles" / uid / container / "config.json"

    def holders(self) -> dict[str, tuple[str, ...]]:
        snapshot = self.service.placement_snapshot()
        assert snapshot is not None
        return {h.gpu.name: h.holders for h in snapshot.gpus}


def plain_world(tmp: Path, spec_dir: Path, *, fake_kw: dict[str, object] | None = None,
                **config: object) -> ServiceWorld:
    """A world whose node has one GPU node stand-in and the control nodes, no
    /proc of a driver: for argv and failure paths that a GPU only passes through."""
    (tmp / "dev").mkdir()
    for node in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (tmp / "dev" / node).touch()
    fake = FakeRunsc(tmp / "bin", **(fake_kw or {}))  # type: ignore[arg-type]
    kw: dict[str, Any] = dict(kill_grace=0.2, runsc_global_flags=("--network=none",))
    kw.update(config)
    return ServiceWorld(tmp, fake, spec_dir=spec_dir, gpu_glob=str(tmp / "dev" / "nvidia[0-9]*"),
                        **kw)


def gpu_world(tmp: Path, *, gpus: int = 4, max_actors: int = 8, placement: str = "exclusive",
              driver: str = "580.95.05", checkpoint_flags: tuple[str, ...] = GPU_CHECKPOINT,
              version: str = "release-20260706.0", tool: bool = True) -> ServiceWorld:
    """A worker of `gpus` GPUs (`placement`, `max_actors` slots) whose runsc has nvproxy and
    `checkpoint_flags`; cuda-checkpoint in the driver's bin dir unless not `tool`.
    Each actor runs one container, ``app``, that takes its actor's GPUs."""
    worker = sim_worker(tmp, gpus=gpus, driver=driver)
    node = worker.node.root
    if tool:
        stub = node / "bin" / "cuda-checkpoint"
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    fake = FakeRunsc(tmp / "bin", version=version, global_flags=["nvproxy"],
                     checkpoint_flags=list(checkpoint_flags),
                     restore_flags=["background", "direct"])
    return ServiceWorld(
        tmp, fake, spec_dir=worker.spec_dir, gpu_glob=worker.node.gpu_glob,
        default_apps=("app",), default_devices=POD_GPUS, driver_root=str(node),
        proc_root=worker.node.proc_root, kill_grace=0.1, max_actors=max_actors,
        gpu_placement=placement)


def gpu_nodes(config: dict[str, object]) -> list[str]:
    """/dev/nvidiaN in a container's config (not nvidiactl, nvidia-uvm)."""
    devices = config["linux"]["devices"]  # type: ignore[index]
    return sorted(str(d["path"]) for d in devices if str(d["path"])[-1].isdigit())


def checkpointed(w: ServiceWorld, uid: str, count: int) -> Path:
    """Run a GPU actor, checkpoint it, and move its image where a restore finds it."""
    w.service.run_workload(w.run(uid, gpus=GpuWish(count=count)))
    w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef(uid), dirs=w.dirs(uid)))
    assert w.service.actors.settle(10)  # its sandbox reaped, its GPUs free
    restore = w.actors_root / uid / "restore"
    os.rename(w.actors_root / uid / "checkpoint", restore)
    return restore


def restore_actor(w: ServiceWorld, uid: str) -> None:
    w.service.restore_workload(RestoreRequest(
        actor=ActorRef(uid), dirs=w.dirs(uid), preserve_restore_dir=True,
        containers=(ContainerRequest("app"),)))
