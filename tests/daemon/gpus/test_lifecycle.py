"""`GpuActors`, the GPU side of an actor's life, without a sandbox: the driver nvproxy
will speak checked against the runsc's list, what GPU containers get for checkpoints,
and which GPUs a Run or a Restore books. The GPU settings come as one value."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom.daemon.calls.requests import ActorDirs, ActorRef, GpuWish, RestoreRequest, RunRequest
from ateom.daemon.gpus.checkpoint_policy import TOOL_IN_CONTAINER
from ateom.daemon.gpus.lifecycle import GpuActors
from ateom.daemon.gpus.placement import GpuPool
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.inventory import GpuFacts, WorkerGpus
from ateom.gpuinfo.nvproxy import DeviceView, GpuTools
from ateom.gpuinfo.record import ContainerDevices, RunscBuild, build_record, write_record
from ateom.runsc.probe import RunscInfo
from ateom.settings import GpuSettings, NodeSettings, NvproxyOptions, parse_placement

GPUS = ("nvidia.com/gpu=0", "nvidia.com/gpu=1")
INFO = RunscInfo("/usr/bin/runsc", "0.0~20240729.0", frozenset({"nvproxy"}),
                 supported_drivers=("535.104.05", "550.90.07"))
DIRS = ActorDirs(root_dir="/actors/a", oci_bundle_dir="/actors/a/bundles")


def _gpu(i: int) -> GpuFacts:
    return GpuFacts(i, i, f"GPU-{i:08d}-1111-2222-3333-444444444444", "NVIDIA H200",
                    f"0000:{i:02x}:00.0", 0x10DE, 0x2335, 143771)


def _actors(tmp_path: Path, *, driver: str = "580.95.05", tool: bool = True,
            gpu: GpuSettings | None = None) -> GpuActors:
    (tmp_path / "drv" / "bin").mkdir(parents=True)
    if tool:
        (tmp_path / "drv" / "bin" / "cuda-checkpoint").write_text("#!/bin/sh\n")
        (tmp_path / "drv" / "bin" / "cuda-checkpoint").chmod(0o755)
    worker = WorkerGpus(driver, (_gpu(0), _gpu(1)))
    pool = GpuPool(parse_placement("exclusive"), lambda: worker)
    node = NodeSettings(driver_root=str(tmp_path / "drv"), toolkit_dir=str(tmp_path / "tk"))
    return GpuActors(pool, node, gpu or GpuSettings(), actors_root=str(tmp_path),
                     environ={"PATH": "/nowhere"})


GPU_VIEW = DeviceView(object(), True, GPUS, GPUS)  # type: ignore[arg-type]
CPU_VIEW = DeviceView(None, True, ())


def test_a_driver_the_runsc_does_not_list_is_refused_unless_pinned(
        tmp_path: Path, refusals: list[tuple[str, str]]) -> None:
    node_driver = _actors(tmp_path)
    with pytest.raises(AteomError, match="580.95.05") as err:
        node_driver.check_driver(INFO, GPU_VIEW, "run")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "535.104.05" in str(err.value) and "550.90.07" in str(err.value)
    assert refusals == [("run", "unsupported_driver")]
    node_driver.check_driver(INFO, CPU_VIEW, "run")  # no GPUs: nothing to check
    pinned = _actors(tmp_path / "p", gpu=GpuSettings(nvproxy=NvproxyOptions("550.90.07")))
    pinned.check_driver(INFO, GPU_VIEW, "restore")
    assert refusals == [("run", "unsupported_driver")]


@pytest.mark.parametrize(("driver", "prefix"), [
    ("580.95.05", ()), ("610.10.01", (TOOL_IN_CONTAINER, "--launch-job"))])
def test_gpu_containers_get_the_workers_cuda_checkpoint(tmp_path: Path, driver: str,
                                                        prefix: tuple[str, ...]) -> None:
    actors = _actors(tmp_path, driver=driver)
    tool = str(tmp_path / "drv" / "bin" / "cuda-checkpoint")
    assert actors.tools(GPU_VIEW) == GpuTools(tool, prefix)  # two GPUs: one job on R610+
    assert actors.tools(CPU_VIEW) == GpuTools()
    assert _actors(tmp_path / "none", tool=False).tools(GPU_VIEW) == GpuTools()


def test_a_run_books_what_it_asks_and_releases_it(tmp_path: Path) -> None:
    actors = _actors(tmp_path)
    one = RunRequest(ActorRef("a"), DIRS, gpus=GpuWish(count=1))
    assert actors.book("a", one, INFO, GPU_VIEW, None).pod_default == GPUS[:1]
    assert actors.book("b", RunRequest(ActorRef("b"), DIRS), INFO, CPU_VIEW,
                        None) == CPU_VIEW  # no GPUs on offer: nothing booked
    actors.give_back("a")
    assert actors.pool.held_by("a") == ()


def test_a_gpu_image_without_a_tool_here_is_refused_before_booking(
        tmp_path: Path, refusals: list[tuple[str, str]]) -> None:
    actors = _actors(tmp_path, tool=False)
    image = tmp_path / "a" / "restore"
    image.mkdir(parents=True)
    record = build_record(runsc=RunscBuild.of_version(INFO.version), driver_version="580.95.05",
                          gpus=[_gpu(0)], containers=[ContainerDevices(
                              "app", GPUS[:1], "sha256:" + "0" * 64)])
    write_record(str(image), record, beneath=str(tmp_path))
    restore = RestoreRequest(ActorRef("a"), DIRS)
    with pytest.raises(AteomError, match="needs cuda-checkpoint") as err:
        actors.book("a", restore, INFO, GPU_VIEW, str(image))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert refusals == [("restore", "no_cuda_checkpoint")] and actors.pool.snapshot() is None
