"""Which devices a container gets, and what gVisor refuses."""

from __future__ import annotations

import pytest

from ateom.cdi.model import ContainerEdits, DeviceNode, EditStep, Resolution
from ateom.daemon.bundles import devices
from ateom.daemon.calls.requests import (
    ContainerRequest,
    DeviceChoice,
    DevicePolicy,
)
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo import nvproxy
from ateom.runsc.probe import RunscInfo

# -- devices --------------------------------------------------------------------

def test_pod_default_devices_are_whole_gpus_in_natural_order() -> None:
    names = ["nvidia.com/gpu=10", "nvidia.com/gpu=2", "nvidia.com/gpu=all",
             "nvidia.com/gpu=0:1", "nvidia.com/gpu=MIG-abc", "vendor.com/x=1"]
    assert devices.pod_default_devices(names) == ("nvidia.com/gpu=2", "nvidia.com/gpu=10")


def test_choose_devices() -> None:
    default = ("nvidia.com/gpu=0",)
    pick = devices.choose_devices
    assert pick(ContainerRequest("a"), gpu_present=True, pod_default=default) == default
    assert pick(ContainerRequest("a"), gpu_present=False, pod_default=default) == ()
    none = ContainerRequest("a", devices=DeviceChoice(DevicePolicy.NONE))
    assert pick(none, gpu_present=True, pod_default=default) == ()
    explicit = ContainerRequest("a", devices=DeviceChoice(
        DevicePolicy.EXPLICIT, ("nvidia.com/gpu=1", "nvidia.com/gpu=1")))
    assert pick(explicit, gpu_present=False, pod_default=default) == ("nvidia.com/gpu=1",)


@pytest.mark.parametrize("name, why", [
    ("amd.com/gpu=0", "vendor"), ("nvidia.com/gpu=0:0", "MIG"), ("nvidia.com/gpu=mig-1", "MIG")])
def test_gvisor_refuses_devices_it_cannot_proxy(name: str, why: str) -> None:
    with pytest.raises(AteomError, match=why) as err:
        nvproxy.check_gvisor_devices("app", [name])
    assert err.value.code is ErrorCode.FAILED_PRECONDITION


def test_mig_reached_through_caps_nodes_is_refused() -> None:
    step = EditStep("nvidia.com/gpu=0", "/etc/cdi/n.json", ContainerEdits(
        device_nodes=(DeviceNode("/dev/nvidia-caps/nvidia-cap21"),)))
    with pytest.raises(AteomError, match="MIG"):
        nvproxy.check_resolution_for_gvisor("app", Resolution(("nvidia.com/gpu=0",), (step,)))


def test_nvproxy_needed() -> None:
    old = RunscInfo("/usr/bin/runsc", "0.0~20221219.0", frozenset({"root"}))
    with pytest.raises(AteomError, match="0.0~20221219.0") as err:
        nvproxy.check_nvproxy(old)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    nvproxy.check_nvproxy(RunscInfo("/x", "new", frozenset({"nvproxy"})))


DEBIAN_2024 = RunscInfo("/usr/bin/runsc", "0.0~20240729.0", frozenset({"nvproxy"}),
                        supported_drivers=("535.104.05", "550.54.15", "550.90.07"))


def test_a_driver_the_runsc_does_not_list_is_refused_naming_both() -> None:
    # Outside its list runsc 0.0~20240729's sentry dies at boot, and the CLI says
    # only "waiting for sandbox to start: EOF".
    with pytest.raises(AteomError) as err:
        nvproxy.check_nvproxy_driver(DEBIAN_2024, "580.65.06")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    message = str(err.value)
    assert "580.65.06" in message and "535.104.05 to 550.90.07" in message
    assert "--nvproxy-driver-version" in message


@pytest.mark.parametrize(("info", "driver"), [
    (DEBIAN_2024, "550.90.07"),  # listed
    (DEBIAN_2024, ""),  # the node's driver is unknown: runsc decides
    (RunscInfo("/x", "new", frozenset({"nvproxy"})), "580.65.06"),  # the runsc lists none
])
def test_a_listed_or_unknowable_driver_passes(info: RunscInfo, driver: str) -> None:
    nvproxy.check_nvproxy_driver(info, driver)
