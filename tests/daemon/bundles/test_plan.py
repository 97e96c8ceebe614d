"""The sandbox plan (`bundles.plan.SandboxPlanner`): every bundle decided before anything
is written — the root first and without devices, each app on the devices it chose
within its actor's grant, the cuda-checkpoint tool only where there are GPUs, ateom's
CRI annotations, each container's volume mounts; the node agent's config read, and
ateom's copy made to be read from ateom's own bundle dir."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from ateom.cdi.registry import Registry
from ateom.daemon.bundles.catalog import DeviceCatalog
from ateom.daemon.bundles.edits import CONTAINER_TYPE, SANDBOX_ID, TOOL_IN_CONTAINER
from ateom.daemon.bundles.plan import CdiInjector, SandboxPlanner
from ateom.daemon.calls.requests import (
    ActorDirs,
    ContainerRequest,
    DeviceChoice,
    DevicePolicy,
    VolumeMountRequest,
)
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.nvproxy import DeviceView, GpuTools
from ateom.runsc.probe import RunscInfo
from ateom.settings import NodeSettings
from tests.support import build_busybox_bundle, build_fake_driver_libs, write_sim_gpu_spec

pytestmark = pytest.mark.skipif(not Path("/bin/busybox").exists(), reason="needs busybox")
INFO = RunscInfo("/usr/bin/runsc", "release-20260817.0", frozenset({"nvproxy"}))
GPUS = ("nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=2")


@pytest.fixture
def planned(tmp_path: Path) -> tuple[SandboxPlanner, ActorDirs, Registry]:
    libs = build_fake_driver_libs(tmp_path / "lib64")
    write_sim_gpu_spec(tmp_path / "cdi", libs, gpus=3)
    bundles = tmp_path / "actors" / "a" / "bundles"
    for name in ("_pause", "gpu", "cpu"):
        build_busybox_bundle(bundles / name, ["sleep", "1"])
    node = NodeSettings(driver_root=str(tmp_path), toolkit_dir=str(tmp_path / "tk"),
                        spec_dirs=(str(tmp_path / "cdi"),))
    planner = SandboxPlanner(actors_root=str(tmp_path / "actors"), pause_container="_pause",
                             catalog=DeviceCatalog(node, None),  # type: ignore[arg-type]
                             injector=CdiInjector(node),
                             bundles_root=str(tmp_path / "run" / "bundles"))
    dirs = ActorDirs(root_dir=str(tmp_path / "actors" / "a"), oci_bundle_dir=str(bundles))
    return planner, dirs, Registry.load(node.spec_dirs)


CONTAINERS = (ContainerRequest("gpu"), ContainerRequest("cpu", DeviceChoice(DevicePolicy.NONE)))


def test_the_root_comes_first_without_devices_and_apps_take_their_grant(
        planned: tuple[SandboxPlanner, ActorDirs, Registry]) -> None:
    planner, dirs, registry = planned
    before = {p: p.read_bytes() for p in Path(dirs.oci_bundle_dir).rglob("config.json")}
    view = DeviceView(registry, True, GPUS, GPUS).granted(GPUS[1:2])  # granted GPU 1 only
    plan = planner.plan("a", dirs, CONTAINERS, INFO, view,
                        tools=GpuTools("/host/cuda-checkpoint"), cpu_milli=500)
    assert plan.container_names == ("_pause", "gpu", "cpu")
    assert plan.runsc_ids == ("a_pause", "gpu", "cpu")
    assert [c.devices for c in plan.containers] == [(), ("nvidia.com/gpu=1",), ()]
    assert plan.gpu and plan.gpu_tool == "/host/cuda-checkpoint"
    root, gpu, cpu = (json.loads(c.prepared) for c in plan.containers)
    assert root["annotations"][CONTAINER_TYPE] == "sandbox"
    assert gpu["annotations"][SANDBOX_ID] == cpu["annotations"][SANDBOX_ID] == "a_pause"
    assert root["linux"]["resources"]["cpu"]["quota"] == 50_000  # the sandbox's limit
    assert [d["path"] for d in gpu["linux"]["devices"] if d["path"][-1].isdigit()] == [
        "/dev/nvidia1"]
    assert [m["destination"] for m in gpu["mounts"]].count(TOOL_IN_CONTAINER) == 1
    assert TOOL_IN_CONTAINER not in json.dumps(cpu) + json.dumps(root)  # GPUs only
    # Planning writes nothing: every bundle as the node agent left it, kept verbatim.
    assert {p: p.read_bytes() for p in before} == before
    assert [c.original for c in plan.containers] == [
        before[Path(c.config_path)] for c in plan.containers]
    # runsc reads ateom's copy from ateom's own dir: its root names the node agent's rootfs.
    run_bundles = Path(dirs.oci_bundle_dir).parents[2] / "run" / "bundles"
    for c, config in zip(plan.containers, (root, gpu, cpu), strict=True):
        assert c.own_bundle == str(run_bundles / "a" / c.name)
        assert config["root"]["path"] == os.path.join(c.bundle, "rootfs")


def test_volume_mounts_come_from_the_node_agents_per_volume_dirs(
        planned: tuple[SandboxPlanner, ActorDirs, Registry]) -> None:
    planner, dirs, registry = planned
    actor = Path(dirs.root_dir)
    for sub in ("durable/data", "sysinfo/info", "volumes/img"):
        (actor / sub).mkdir(parents=True)
    dirs = dataclasses.replace(
        dirs, durable_dir_volume_mounts_dir=str(actor / "durable"),
        system_info_volume_roots_dir=str(actor / "sysinfo"), volumes_dir=str(actor / "volumes"))
    app = ContainerRequest(
        "cpu", DeviceChoice(DevicePolicy.NONE),
        durable_dir_volume_mounts=(VolumeMountRequest("data", "/data"),),
        system_info_volume_mounts=(VolumeMountRequest("info", "/etc/podinfo"),),
        image_volume_mounts=(VolumeMountRequest("img", "/models"),))
    plan = planner.plan("a", dirs, (app,), INFO, DeviceView(registry, False, (), ()))
    mounts = {m["destination"]: m for m in json.loads(plan.containers[1].prepared)["mounts"]}
    assert (mounts["/data"]["source"], mounts["/data"]["options"][-1]) == (
        str(actor / "durable" / "data"), "rw")
    assert (mounts["/etc/podinfo"]["source"], mounts["/etc/podinfo"]["options"][-1]) == (
        str(actor / "sysinfo" / "info"), "ro")
    assert mounts["/models"]["options"][-1] == "ro"
    assert [(v.volume_name, v.host_dir) for v in plan.durable] == [
        ("data", str(actor / "durable" / "data"))]


def test_a_volume_whose_dir_is_missing_or_a_symlink_is_refused_naming_it(
        planned: tuple[SandboxPlanner, ActorDirs, Registry], tmp_path: Path) -> None:
    planner, dirs, registry = planned
    durable = Path(dirs.root_dir) / "durable"
    durable.mkdir()
    dirs = dataclasses.replace(dirs, durable_dir_volume_mounts_dir=str(durable))
    app = ContainerRequest("cpu", DeviceChoice(DevicePolicy.NONE),
                           durable_dir_volume_mounts=(VolumeMountRequest("data", "/data"),))
    view = DeviceView(registry, False, (), ())
    with pytest.raises(AteomError, match=f"{durable}/data: missing") as err:
        planner.plan("a", dirs, (app,), INFO, view)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    (durable / "data").symlink_to("/etc")
    with pytest.raises(AteomError, match="data") as err:
        planner.plan("a", dirs, (app,), INFO, view)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_a_container_naming_a_gpu_outside_its_grant_is_refused_before_any_write(
        planned: tuple[SandboxPlanner, ActorDirs, Registry]) -> None:
    planner, dirs, registry = planned
    view = DeviceView(registry, True, GPUS, GPUS).granted(GPUS[:1])
    wants = (ContainerRequest("gpu", DeviceChoice(DevicePolicy.EXPLICIT, (GPUS[2],))),)
    with pytest.raises(AteomError, match="nvidia.com/gpu=2") as err:
        planner.plan("a", dirs, wants, INFO, view)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION


def test_a_restore_puts_each_container_back_on_its_own_devices(
        planned: tuple[SandboxPlanner, ActorDirs, Registry]) -> None:
    planner, dirs, registry = planned
    view = DeviceView(registry, True, GPUS, GPUS).granted(
        GPUS[1:], {"gpu": (GPUS[2],)})  # the record's choice wins over the request's
    plan = planner.plan("a", dirs, CONTAINERS, INFO, view)
    assert [c.devices for c in plan.containers] == [(), (GPUS[2],), ()]
    assert plan.gpu_tool == ""  # no cuda-checkpoint found: nothing mounted
