"""The Pod's GPUs as the daemon books them (`ateom.daemon.gpus.placement`), pure but for the
gatherer it is handed: what an actor asks for, how the inventory joins the CDI
names, that the inventory is gathered once, and that a refusal is counted."""

from __future__ import annotations

import threading

import pytest

from ateom.daemon.calls.requests import ContainerRequest, DeviceChoice, DevicePolicy, GpuWish
from ateom.daemon.gpus.placement import GpuPool, pod_gpus, request_for
from ateom.gpuinfo.inventory import GpuFacts, WorkerGpus
from ateom.gpuinfo.nvproxy import gpu_index
from ateom.gpuinfo.placement import ALL_GPUS, GpuRequest, PlacementRefused, RefusalReason
from ateom.settings import parse_placement

NAMES = ("nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=2")


def _facts(index: int) -> GpuFacts:
    return GpuFacts(index=index, minor=index, uuid=f"GPU-{index}", name="NVIDIA H200",
                    pci_bus_id=f"0000:{index:02x}:00.0", pci_vendor_id=0x10DE,
                    pci_device_id=0x2335)


WORKER = WorkerGpus("580.95.05", (_facts(0), _facts(1)))  # GPU 2 unknown to the inventory


def _container(policy: DevicePolicy, *names: str) -> ContainerRequest:
    return ContainerRequest("app", devices=DeviceChoice(policy, names))


@pytest.mark.parametrize(("wish", "containers", "expected"), [
    (GpuWish(count=2), (), GpuRequest(2)),
    (GpuWish(names=("nvidia.com/gpu=1",)), (), GpuRequest.named(("nvidia.com/gpu=1",))),
    (None, (_container(DevicePolicy.POD_DEFAULT),), GpuRequest(ALL_GPUS)),
    (None, (_container(DevicePolicy.EXPLICIT, "nvidia.com/gpu=2", "nvidia.com/gpu=2"),),
     GpuRequest.named(("nvidia.com/gpu=2",))),
    (None, (_container(DevicePolicy.EXPLICIT, "nvidia.com/gpu=all"),), GpuRequest(ALL_GPUS)),
    (None, (_container(DevicePolicy.EXPLICIT, "example.com/fpga=0"),), GpuRequest(0)),
    (None, (_container(DevicePolicy.NONE),), GpuRequest(0)),
])
def test_what_an_actor_asks_of_the_pods_gpus(wish: GpuWish | None,
                                             containers: tuple[ContainerRequest, ...],
                                             expected: GpuRequest) -> None:
    assert request_for(wish, containers) == expected


def test_pod_gpus_join_the_inventory_by_index_and_keep_what_it_lacks() -> None:
    assert [gpu_index(n) for n in (*NAMES, "nvidia.com/gpu=all", "amd.com/gpu=0")] == [
        0, 1, 2, None, None]
    gpus = pod_gpus((*NAMES, "nvidia.com/gpu=all"), WORKER)
    assert [(g.name, g.index, g.uuid) for g in gpus] == [
        ("nvidia.com/gpu=0", 0, "GPU-0"), ("nvidia.com/gpu=1", 1, "GPU-1"),
        ("nvidia.com/gpu=2", 2, "")]
    assert gpus[0].model and gpus[2].model == ""


def test_the_inventory_is_gathered_once_whoever_asks_first() -> None:
    calls: list[int] = []

    def gather() -> WorkerGpus:
        calls.append(1)
        return WORKER

    pool = GpuPool(parse_placement("exclusive"), gather)
    threads = [threading.Thread(target=pool.worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.grant("a", GpuRequest(1), NAMES)
    assert calls == [1]
    assert pool.facts_of(("nvidia.com/gpu=1", "nvidia.com/gpu=2", "x")) == (_facts(1),)


def test_booking_release_and_a_counted_refusal(refusals: list[tuple[str, str]]) -> None:
    pool = GpuPool(parse_placement("exclusive"), lambda: WORKER)
    assert pool.snapshot() is None and pool.free("nobody") == ()  # nothing placed yet
    assert pool.grant("a", GpuRequest(2), NAMES).names == NAMES[:2]  # packed low
    with pytest.raises(PlacementRefused) as err:
        pool.grant("b", GpuRequest(2), NAMES)
    assert err.value.reason is RefusalReason.TOO_FEW_FREE and "a" in str(err.value)
    assert refusals == [("placement", "too_few_free")]
    assert pool.held_by("a") == NAMES[:2]
    assert pool.free("a") == NAMES[:2] and pool.free("a") == ()  # idempotent
    assert pool.grant("b", GpuRequest(2), NAMES).names == NAMES[:2]
