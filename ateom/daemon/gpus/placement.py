"""The Pod's GPUs as the daemon hands them out: which actor holds which, by the
--gpu-placement policy, and what this worker knows about each GPU.

The placer (`ateom.gpuinfo.placement`) is built the first time an actor asks
for GPUs, from the whole GPUs the CDI registry offers (``nvidia.com/gpu=N``:
the names containers get) joined by index with the worker's GPU inventory
(`ateom.gpuinfo`: model, UUID, PCI ids), which is gathered then, once: the
Pod's GPUs do not change while it lives. Every placement decision happens
inside the placer's lock, so two concurrent Runs in exclusive mode never get
one GPU; refusals are counted (`ateom.daemon.calls.refusals`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import structlog

from ateom.daemon.calls import refusals
from ateom.daemon.calls.requests import ContainerRequest, DevicePolicy, GpuWish
from ateom.gpuinfo.inventory import GpuFacts, WorkerGpus
from ateom.gpuinfo.nvproxy import GPU_KIND, gpu_index
from ateom.gpuinfo.placement import (
    ALL_GPUS,
    GpuPlacer,
    GpuRequest,
    Grant,
    PlacementRefused,
    PlacementSnapshot,
    PodGpu,
)
from ateom.settings import PlacementSettings

log = structlog.get_logger("ateom.gpus")


def pod_gpus(names: Sequence[str], worker: WorkerGpus) -> list[PodGpu]:
    """The placer's view of the Pod's whole GPUs: CDI names joined with the
    inventory by index (pure). A GPU the inventory lacks keeps name and index."""
    facts = {g.index: g for g in worker.gpus}
    out = []
    for name in names:
        index = gpu_index(name)
        if index is None:
            continue
        fact = facts.get(index)
        model = (fact.pci_id or fact.name) if fact is not None else ""
        out.append(PodGpu(name, index, uuid=fact.uuid if fact else "", model=model))
    return out


def request_for(wish: GpuWish | None, containers: Sequence[ContainerRequest]) -> GpuRequest:
    """What an actor asks of the Pod's GPUs (pure): its `gpus` field, else the
    nvidia.com/gpu devices its containers name explicitly, else all of them."""
    if wish is not None:
        return GpuRequest.named(wish.names) if wish.names else GpuRequest(wish.count)
    if any(c.devices.policy is DevicePolicy.POD_DEFAULT for c in containers):
        return GpuRequest(ALL_GPUS)
    explicit = [n for c in containers if c.devices.policy is DevicePolicy.EXPLICIT
                for n in c.devices.names if n.startswith(GPU_KIND + "=")]
    if any(gpu_index(n) is None for n in explicit):
        return GpuRequest(ALL_GPUS)  # =all or a UUID name: only every GPU covers it
    named = tuple(dict.fromkeys(explicit))
    return GpuRequest.named(named) if named else GpuRequest(0)


class GpuPool:
    def __init__(self, settings: PlacementSettings,
                 gather: Callable[[], WorkerGpus]) -> None:
        self.settings = settings
        self._gather = gather
        self._lock = threading.Lock()
        self._placer: GpuPlacer | None = None
        self._worker: WorkerGpus | None = None

    def worker(self) -> WorkerGpus:
        """This worker's GPU facts, gathered once (reads /proc, runs nvidia-smi)."""
        with self._lock:
            if self._worker is None:
                self._worker = self._gather()
                for problem in self._worker.problems:
                    log.warning("gpu_inventory_problem", problem=problem)
            return self._worker

    def placer(self, pod_default: Sequence[str]) -> GpuPlacer:
        """The placer over the Pod's GPUs (built on first use from `pod_default`)."""
        worker = self.worker()
        with self._lock:
            if self._placer is None:
                self._placer = GpuPlacer(pod_gpus(pod_default, worker), self.settings)
                log.info("gpu_placement", policy=str(self.settings),
                         gpus=[h.gpu.name for h in self._placer.snapshot().gpus])
            return self._placer

    def grant(self, uid: str, request: GpuRequest, pod_default: Sequence[str]) -> Grant:
        """Book GPUs for `uid` (PlacementRefused, counted, when they are not there)."""
        try:
            return self.placer(pod_default).choose(uid, request)
        except PlacementRefused as exc:
            refusals.refused("placement", exc.reason.value)
            raise

    def free(self, uid: str) -> tuple[str, ...]:
        """Free every GPU `uid` holds (idempotent); their names."""
        with self._lock:
            placer = self._placer
        return tuple(g.name for g in placer.vacate(uid)) if placer is not None else ()

    def held_by(self, uid: str) -> tuple[str, ...]:
        with self._lock:
            placer = self._placer
        return tuple(g.name for g in placer.held_by(uid)) if placer is not None else ()

    def facts_of(self, names: Sequence[str]) -> tuple[GpuFacts, ...]:
        """The inventory's facts of these GPUs, by index (those it knows)."""
        facts = {g.index: g for g in self.worker().gpus}
        out = []
        for name in names:
            index = gpu_index(name)
            if index is not None and index in facts:
                out.append(facts[index])
        return tuple(out)

    def snapshot(self) -> PlacementSnapshot | None:
        """Who holds which GPU now; None before any GPU actor was placed."""
        with self._lock:
            placer = self._placer
        return placer.snapshot() if placer is not None else None
