"""A simulated 4-GPU worker for the GPU lifecycle tests (fake runsc argv).

A simulated node (`tests.support.gpu_node`: /proc/driver/nvidia, the Pod's
device nodes, a stand-in nvidia-smi) and a CDI spec for its GPUs; what real
runsc does with the flags is the e2e suites' job.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ateom.daemon.calls.requests import (
    ActorDirs,
    ActorRef,
    CheckpointRequest,
    ContainerRequest,
    DeviceChoice,
    GpuWish,
    RestoreRequest,
    RunRequest,
)
from ateom.daemon.lifecycle.service import AteomService
from ateom.process.reaper import Reaper
from tests.daemon.fake_runsc import FakeRunsc
from tests.support import build_busybox_bundle, build_fake_driver_libs, write_sim_gpu_spec
from tests.support.configs import daemon_config
from tests.support.gpu_node import SimGpu, write_gpu_node, write_sim_fixture

pytestmark = pytest.mark.skipif(not os.path.exists("/bin/busybox"), reason="needs busybox")

GPU_CHECKPOINT = ["cuda-checkpoint-path", "cuda-checkpoint-sequential"]
POD_GPUS = DeviceChoice()  # the container takes its actor's GPUs


def _node(base: Path, driver: str = "580.95.05", gpus: int = 4) -> Path:
    sims = [SimGpu(index=i, minor=i, uuid=f"GPU-0000000{i}-1111-2222-3333-444444444444")
            for i in range(gpus)]
    fixture = write_sim_fixture(base / "fixture", sims, driver_version=driver)
    node = write_gpu_node(base / "node", fixture)
    tool = Path(node.root) / "bin" / "cuda-checkpoint"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    return Path(node.root)


class GpuWorld:
    def __init__(self, tmp: Path, *, placement: str = "exclusive", driver: str = "580.95.05",
                 checkpoint_flags: tuple[str, ...] = tuple(GPU_CHECKPOINT),
                 version: str = "release-20260706.0", tool: bool = True) -> None:
        self.tmp = tmp
        self.node = _node(tmp / "gpu", driver)
        if not tool:
            (self.node / "bin" / "cuda-checkpoint").unlink()
        libs = build_fake_driver_libs(tmp / "lib64")
        write_sim_gpu_spec(tmp / "cdi", libs, gpus=4)
        self.fake = FakeRunsc(tmp / "bin", version=version, global_flags=["nvproxy"],
                              checkpoint_flags=checkpoint_flags,
                              restore_flags=["background", "direct"])
        self.actors_root = tmp / "actors"
        self.config = daemon_config(
            actors_root=str(self.actors_root), runsc=str(self.fake.path),
            run_dir=str(tmp / "run"), spec_dirs=(str(tmp / "cdi"),),
            gpu_glob=str(self.node / "dev" / "nvidia[0-9]*"), driver_root=str(self.node),
            proc_root=str(self.node / "proc"), toolkit_dir=str(tmp / "toolkit"),
            kill_grace=0.1, max_actors=8, gpu_placement=placement,
            env={"PATH": os.defpath})
        self.service = AteomService(self.config, reaper=Reaper())

    def dirs(self, uid: str) -> ActorDirs:
        root = self.actors_root / uid
        return ActorDirs(root_dir=str(root), oci_bundle_dir=str(root / "bundles"),
                         checkpoint_dir=str(root / "ckpt"), restore_dir=str(root / "restore"))

    def run(self, uid: str, gpus: GpuWish | None = None, *,
            devices: DeviceChoice = POD_GPUS) -> RunRequest:
        bundles = self.actors_root / uid / "bundles"
        for name in ("_pause", "app"):
            build_busybox_bundle(bundles / name, ["sleep", "1000"])
        return RunRequest(actor=ActorRef(uid), dirs=self.dirs(uid), gpus=gpus,
                          containers=(ContainerRequest("app", devices=devices),))

    def app_config(self, uid: str) -> dict[str, object]:
        raw = (self.actors_root / uid / "bundles" / "app" / "config.json").read_text()
        return dict(json.loads(raw))

    def holders(self) -> dict[str, tuple[str, ...]]:
        snapshot = self.service.placement_snapshot()
        assert snapshot is not None
        return {h.gpu.name: h.holders for h in snapshot.gpus}


def gpu_nodes(config: dict[str, object]) -> list[str]:
    """/dev/nvidiaN in a container's config (not nvidiactl, nvidia-uvm)."""
    devices = config["linux"]["devices"]  # type: ignore[index]
    return sorted(str(d["path"]) for d in devices if str(d["path"])[-1].isdigit())


def checkpointed(w: GpuWorld, uid: str, count: int) -> Path:
    """Run a GPU actor, checkpoint it, and move its image where a restore finds it."""
    w.service.run_workload(w.run(uid, GpuWish(count=count)))
    w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef(uid), dirs=w.dirs(uid)))
    assert w.service.actors.settle(10)  # its sandbox reaped, its GPUs free
    restore = w.actors_root / uid / "restore"
    os.rename(w.actors_root / uid / "ckpt", restore)
    return restore


def restore_actor(w: GpuWorld, uid: str) -> None:
    w.service.restore_workload(RestoreRequest(
        actor=ActorRef(uid), dirs=w.dirs(uid), preserve_restore_dir=True,
        containers=(ContainerRequest("app"),)))
