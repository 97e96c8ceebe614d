"""A GPU checkpoint's compatibility record: written with the image, checked first
at restore, and the placement it implies.

At checkpoint, while runsc saves the sandbox, ateom writes
``ateom-compat.json`` into the checkpoint dir, in place once the save has
succeeded (`RecordWrite`; it travels with the image and
is listed in snapshot_files): runsc build, driver version, the actor's GPUs
as this worker knows them, nvproxy capabilities, and each container's CDI
devices with a digest of their resolved edits (`ateom.gpuinfo.record`).

At restore, before any runsc call, the record is compared with this worker
(`ateom.gpuinfo.compat.check_restore`, microseconds): another driver,
another runsc build, another GPU model or too few GPUs of the model on this
worker in all each refuse the Restore with FAILED_PRECONDITION naming the
checkpoint's value and the worker's; GPUs this worker has but other actors
hold are the placer's RESOURCE_EXHAUSTED (waiting helps). When it fits, the
actor is placed on exactly the GPUs the verdict maps the saved ones onto (the
same slots when this runsc cannot remap), and each container gets back its own
devices, renamed onto those GPUs. A checkpoint without a record (CPU-only,
or from before records) restores as it always did.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace

import structlog

from ateom.daemon.bundles.plan import SandboxPlan
from ateom.daemon.calls import refusals
from ateom.daemon.calls.phases import phase
from ateom.daemon.gpus.placement import GpuPool
from ateom.daemon.sandbox.boot import Sandbox
from ateom.gpuinfo.compat import check_restore, runsc_remaps_gpus
from ateom.gpuinfo.inventory import GpuFacts
from ateom.gpuinfo.nvproxy import GPU_KIND, gpu_index, gpu_node_path, node_minor
from ateom.gpuinfo.placement import (
    GpuRequest,
    PlacementRefused,
    PlacementSnapshot,
    RefusalReason,
)
from ateom.gpuinfo.record import (
    RECORD_FILE,
    CompatRecord,
    ContainerDevices,
    RunscBuild,
    build_record,
    commit_record,
    discard_record,
    read_record,
    stage_record,
    write_record,
)
from ateom.runsc.probe import RunscInfo

log = structlog.get_logger("ateom.gpu_record")


def record_for(sandbox: Sandbox, pool: GpuPool, info: RunscInfo, gpus: Sequence[str], *,
               nvproxy_capabilities: str, snapshot_uri: str = "") -> CompatRecord:
    """The record of a GPU actor about to be saved (gathers GPU facts once per
    process). FAILED_PRECONDITION when a fact a restore compares is unknown."""
    plan: SandboxPlan = sandbox.plan
    containers = [ContainerDevices(c.name, c.devices, c.edits_digest)
                  for c in plan.containers if c.devices]
    return build_record(runsc=RunscBuild.of_version(info.version),
                        driver_version=pool.worker().driver_version,
                        gpus=[seen_as(g, plan.saved_paths) for g in pool.facts_of(gpus)],
                        containers=containers, nvproxy_capabilities=nvproxy_capabilities,
                        snapshot_uri=snapshot_uri)


def seen_as(gpu: GpuFacts, saved_paths: Mapping[str, str]) -> GpuFacts:
    """`gpu` with the minor its containers see it at: a sandbox restored onto other
    GPUs keeps the node paths it was first saved with (runsc checks a restore's
    devices by path), so its next restore must keep them too. The UUID, model and
    memory stay the card's own."""
    if gpu.minor is None:
        return gpu
    seen = saved_paths.get(gpu_node_path(gpu.minor))
    minor = node_minor(seen) if seen is not None else None
    return gpu if minor is None else replace(gpu, minor=minor)


class RecordWrite:
    """A GPU checkpoint's record, written with its image: `stage` while runsc saves,
    then `commit` once the save succeeded or `discard` when it failed. A record
    never stands beside an image runsc did not finish.

    Written after the save, the record's fsync queued behind the image's
    metadata in the filesystem's journal, on every GPU checkpoint's path
    (docs/performance.md, "Figures behind the code"). Staged, fsync'd, to a
    hidden file as soon as runsc has started, it is on disk before the image
    is, and only renamed into place once the save succeeded.
    """

    def __init__(self, image_dir: str, record: CompatRecord, *, beneath: str) -> None:
        self.image_dir = image_dir
        self.record = record
        self.beneath = beneath
        self._staged = ""  # the hidden file's name, once staged

    def stage(self) -> None:
        """Write it, hidden, durably (runs beside the save). Never raises: one that
        cannot be staged (a read-only or full dir, which fails the save too) is
        written whole by `commit`."""
        try:
            self._staged = stage_record(self.image_dir, self.record, beneath=self.beneath)
        except OSError as exc:
            log.warning("compat_record_not_staged", error=exc.strerror or str(exc))

    def commit(self, files: Sequence[str]) -> tuple[str, ...]:
        """Put it in place beside the saved image; the files the save wrote with the
        record among them, under its own name (a commit that fails removes what it
        staged)."""
        with phase("record.write"):
            path = (commit_record(self.image_dir, self._staged, beneath=self.beneath)
                    if self._staged
                    else write_record(self.image_dir, self.record, beneath=self.beneath))
        kept = (f for f in files if f != self._staged)  # listed under its staged name
        return tuple(sorted({*kept, os.path.relpath(path, self.image_dir)}))

    def discard(self) -> None:
        """Remove what was staged (the save failed)."""
        if self._staged:
            discard_record(self.image_dir, self._staged, beneath=self.beneath)


def read(image_dir: str, *, beneath: str) -> CompatRecord | None:
    """The restore dir's record; None when it has none (a CPU-only or older
    checkpoint). A corrupt, truncated or newer-format one is FAILED_PRECONDITION."""
    if not os.path.lexists(os.path.join(image_dir, RECORD_FILE)):
        return None
    parsed = read_record(image_dir, beneath=beneath)
    if parsed.ignored:
        log.warning("compat_record_fields_ignored", fields=list(parsed.ignored))
    return parsed.record


def _holders(snapshot: PlacementSnapshot | None, most: int = 8) -> str:
    held = [f"{h.gpu.name} held by {'+'.join(h.holders)}"
            for h in (snapshot.gpus if snapshot else ()) if h.holders]
    more = f"; and {len(held) - most} more" if len(held) > most else ""
    return "; ".join(held[:most]) + more


def _renamed(name: str, index_map: dict[int, int]) -> str:
    index = gpu_index(name)
    if index is None or index not in index_map:
        return name
    return f"{GPU_KIND}={index_map[index]}"


def book_saved_gpus(record: CompatRecord, pool: GpuPool, uid: str, info: RunscInfo,
          pod_gpus: Sequence[str], *, nvproxy_capabilities: str
          ) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], dict[str, str]]:
    """Check the record against this worker and book its GPUs: the names granted,
    each container's devices on them, and the node paths a GPU that moved keeps
    (`ateom.gpuinfo.nvproxy.keep_saved_paths`: target's -> saved). Refusals are
    FAILED_PRECONDITION (counted); a GPU taken meanwhile is the placer's
    RESOURCE_EXHAUSTED."""
    build = RunscBuild.of_version(info.version)
    snapshot = pool.snapshot()
    room = {h.index for h in snapshot.with_room()} if snapshot is not None else None
    worker = pool.worker()
    free = None if room is None else [g for g in worker.gpus if g.index in room]
    remap = bool(runsc_remaps_gpus(build))
    verdict = check_restore(record, worker, runsc_version=build, runsc_supports_remap=remap,
                            free=free, nvproxy_capabilities=nvproxy_capabilities)
    if not verdict.ok:
        if free is not None and check_restore(
                record, worker, runsc_version=build, runsc_supports_remap=remap,
                nvproxy_capabilities=nvproxy_capabilities).ok:
            # This worker fits the checkpoint; other actors hold the GPUs it
            # needs: waiting helps, so the placer's code and wording, not a refusal.
            refusals.refused("placement", RefusalReason.TOO_FEW_FREE.value)
            raise PlacementRefused(uid, RefusalReason.TOO_FEW_FREE, (
                f"its checkpoint needs {len(record.gpus)} GPU(s) like those it was saved on"
                f" and they are held: {_holders(snapshot)}"))
        refusals.refused("restore", verdict.refusals[0].field)
        raise verdict.error()
    for warning in verdict.warnings:
        log.warning("restore_placement", warning=warning)
    targets = [m.target.index for m in verdict.mapping]
    grant = pool.grant(uid, GpuRequest.at_indices(targets), pod_gpus)
    index_map = {m.saved.index: m.target.index for m in verdict.mapping}
    per_container = {c.name: tuple(_renamed(n, index_map) for n in c.cdi_devices)
                     for c in record.containers}
    saved_paths = {gpu_node_path(m.target.minor): gpu_node_path(m.saved.minor)
                   for m in verdict.mapping if m.saved.minor is not None
                   and m.target.minor is not None and m.saved.minor != m.target.minor}
    return grant.names, per_container, saved_paths
