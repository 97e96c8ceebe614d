"""May this checkpoint be restored here, and onto which GPUs? (pure)

What a GPU restore needs, and who enforces it:

- the same driver version: runsc refuses otherwise ("nvidia driver version
  changed during restore") and cuda-checkpoint restores device memory only
  through the driver that saved it;
- the same runsc build: the sandbox image is runsc's own serialization, and a
  different build's restore validation rejects it;
- GPUs of the same model (PCI vendor/device id, with at least the saved
  memory), at least as many as were saved;
- either the very GPU slots again (device minors: nvproxy reopens
  ``/dev/nvidia<minor>``), or a runsc that remaps saved GPUs onto others
  (release-20260706.0 and later). runsc remaps only between identical GPUs
  ("can't remap with heterogeneous GPUs"), and when a saved GPU lands on a
  card with another UUID it restores CUDA state with ``cuda-checkpoint
  --device-map``, which needs driver R580 or later.

`place_restore` answers the GPU part for a set of free worker GPUs (for a
placement layer choosing among workers); `check_restore` adds the driver,
runsc and nvproxy checks for this worker. Each refusal names the
checkpoint's value and the worker's. Both run in microseconds
(benchmarks/bench_compat.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.inventory import GpuFacts, WorkerGpus, driver_major
from ateom.gpuinfo.record import CompatRecord, RunscBuild
from ateom.runsc.probe import release_date

REMAP_RUNSC = "release-20260706.0"  # first runsc release that remaps GPUs on restore
DEVICE_MAP_DRIVER = 580  # cuda-checkpoint --device-map (restore onto other GPUs)


@dataclass(frozen=True, slots=True)
class Refusal:
    field: str  # "driver_version", "runsc", "nvproxy_capabilities", "gpus"
    checkpoint: str  # the checkpoint's value
    worker: str  # the worker's value
    reason: str  # why, and what would make it restorable

    def describe(self) -> str:
        return f"{self.field}: checkpoint {self.checkpoint}, worker {self.worker}: {self.reason}"


@dataclass(frozen=True, slots=True)
class GpuMapping:
    """Saved GPU -> the worker GPU its state lands on."""

    saved: GpuFacts
    target: GpuFacts

    @property
    def moved(self) -> bool:
        return self.saved.minor != self.target.minor or self.saved.uuid != self.target.uuid


@dataclass(frozen=True, slots=True)
class Placement:
    """Which free worker GPUs a restored actor may get, and the pairing ateom picks.

    `mapping` lists the saved GPUs in minor order; its targets are the GPUs to
    give the actor (and only those: runsc remaps onto the GPUs it is shown).
    """

    needed: int
    eligible: tuple[GpuFacts, ...] = ()  # free GPUs that fit, best first
    mapping: tuple[GpuMapping, ...] = ()  # () when refused
    remap: bool = False  # runsc must move some saved GPU to another slot or card
    refusals: tuple[Refusal, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refusals


@dataclass(frozen=True, slots=True)
class RestoreVerdict:
    refusals: tuple[Refusal, ...] = ()
    mapping: tuple[GpuMapping, ...] = ()
    remap: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refusals

    def error(self) -> AteomError:
        """The refusal as the error a Restore call returns (FAILED_PRECONDITION)."""
        return AteomError("GPU checkpoint cannot be restored on this worker: "
                          + "; ".join(r.describe() for r in self.refusals),
                          code=ErrorCode.FAILED_PRECONDITION)


def _label(g: GpuFacts) -> str:
    return f"GPU {g.index} (minor {g.minor}, {g.uuid}, {g.pci_id} {g.name})"


def _model_text(gpus: Sequence[GpuFacts]) -> str:
    counts = Counter((g.pci_id, g.name) for g in gpus)
    return " + ".join(f"{n} x {pci} {name}" for (pci, name), n in sorted(counts.items())) \
        or "no GPUs"


def _fits(saved: GpuFacts, w: GpuFacts) -> bool:
    """Same model, and at least the saved memory (ECC mode changes usable memory)."""
    return (w.model is not None and w.model == saved.model and w.memory_mib is not None
            and saved.memory_mib is not None and w.memory_mib >= saved.memory_mib)


def _shortfall(saved: Sequence[GpuFacts], free: Sequence[GpuFacts]) -> list[Refusal]:
    """A refusal per saved model the free GPUs cannot cover in number."""
    refusals = []
    for model, need in Counter(g.model for g in saved).items():
        like = next(g for g in saved if g.model == model)
        have = [w for w in free if _fits(like, w)]
        if len(have) >= need:
            continue
        unknown = sum(1 for w in free if w.model is None or w.memory_mib is None)
        hint = (f"; {unknown} free GPU(s) have unknown PCI ids or memory (did nvidia-smi "
                f"fail?)" if unknown else "")
        same_chip = [w for w in free if w.model == model]
        if have or same_chip:
            why = (f"fewer GPUs: the checkpoint needs {need} x {like.pci_id} {like.name} with "
                   f">= {like.memory_mib} MiB, {len(have)} such are free here")
        else:
            why = (f"different GPU model: no free {like.pci_id} {like.name} here; place the "
                   f"actor on a worker with {need} of them")
        refusals.append(Refusal("gpus", f"{need} x {like.pci_id} {like.name}",
                                _model_text(free), why + hint))
    return refusals


_NO_REMAP = (f"this runsc cannot remap GPUs on restore (needs {REMAP_RUNSC} or later), so "
             f"each saved GPU must come back on its own /dev/nvidia<minor> holding the same "
             f"model: free that GPU, or upgrade runsc")
_MIXED = ("runsc remaps only between identical GPUs and the checkpoint holds several models: "
          "restore onto the very cards it was taken on (same UUIDs and minors)")


def _same_slots(saved: Sequence[GpuFacts], free: Sequence[GpuFacts], why: str) -> Placement:
    """No remap: every saved GPU's own minor must be free and hold a fitting GPU."""
    by_minor = {w.minor: w for w in free if w.minor is not None}
    mapping: list[GpuMapping] = []
    refusals: list[Refusal] = []
    warnings: list[str] = []
    for s in saved:
        w = by_minor.get(s.minor) if s.minor is not None else None
        if w is None or not _fits(s, w):
            here = "not free or absent" if w is None else _label(w)
            refusals.append(Refusal("gpus", _label(s), f"minor {s.minor}: {here}", why))
            continue
        if w.uuid != s.uuid:
            warnings.append(f"minor {s.minor}: the checkpoint's {s.uuid} is restored onto "
                            f"{w.uuid}, another card of the same model; without runsc's remap "
                            f"cuda-checkpoint is given no --device-map, and NVIDIA documents "
                            f"restoring onto another GPU only with it (driver R580+)")
        mapping.append(GpuMapping(s, w))
    eligible = tuple(m.target for m in mapping)
    if refusals:
        return Placement(len(saved), eligible, refusals=tuple(refusals))
    return Placement(len(saved), eligible, tuple(mapping), False, (), tuple(warnings))


def _pair(saved: Sequence[GpuFacts], chosen: Sequence[GpuFacts]) -> list[GpuMapping]:
    """The same card where it is among `chosen`, the rest in minor order."""
    by_uuid = {w.uuid: w for w in chosen}
    kept = {s.uuid for s in saved if s.uuid in by_uuid}
    rest = iter(sorted((w for w in chosen if w.uuid not in kept), key=lambda w: w.minor or 0))
    return [GpuMapping(s, by_uuid[s.uuid] if s.uuid in kept else next(rest)) for s in saved]


def _remapped(saved: Sequence[GpuFacts], free: Sequence[GpuFacts], driver: str) -> Placement:
    """runsc can remap and the saved GPUs are one model: any fitting free GPUs
    will do; the same cards first, then the same minors, then the lowest. Before
    R580 runsc can only move the same cards to other minors (no --device-map)."""
    uuids = {s.uuid for s in saved}
    minors = {s.minor for s in saved}
    major = driver_major(driver)
    other_cards_ok = major is not None and major >= DEVICE_MAP_DRIVER
    eligible = sorted((w for w in free if _fits(saved[0], w)
                       and (other_cards_ok or w.uuid in uuids)),
                      key=lambda w: (w.uuid not in uuids, w.minor not in minors, w.minor or 0))
    if len(eligible) < len(saved):
        return Placement(len(saved), tuple(eligible), refusals=(Refusal(
            "gpus", f"{_model_text(saved)} on driver {driver}",
            f"{len(eligible)} of those very cards free",
            f"restoring onto other cards needs cuda-checkpoint --device-map, driver "
            f"R{DEVICE_MAP_DRIVER}+: restore onto the same GPUs, or checkpoint on a newer "
            f"driver"),))
    mapping = _pair(saved, eligible[:len(saved)])
    return Placement(len(saved), tuple(eligible), tuple(mapping), any(m.moved for m in mapping))


def place_restore(record: CompatRecord, free: Iterable[GpuFacts], *,
                  runsc_supports_remap: bool) -> Placement:
    """Which of the `free` worker GPUs the checkpoint's actor may be restored onto.

    Same model and count always; without remap, the very minors it was taken on.
    """
    saved = sorted(record.gpus, key=lambda g: g.minor or 0)
    if not saved:
        return Placement(0)
    pool = list({w.uuid: w for w in free}.values())
    refusals = _shortfall(saved, pool)
    if refusals:
        return Placement(len(saved), refusals=tuple(refusals))
    if not runsc_supports_remap:
        return _same_slots(saved, pool, _NO_REMAP)
    if len({s.model for s in saved}) == 1:
        return _remapped(saved, pool, record.driver_version)
    placed = _same_slots(saved, pool, _MIXED)
    if placed.ok and any(m.moved for m in placed.mapping):
        return Placement(len(saved), placed.eligible, refusals=(Refusal(
            "gpus", _model_text(saved), _model_text(pool), _MIXED),))
    return placed


def runsc_remaps_gpus(build: RunscBuild) -> bool | None:
    """Whether this runsc remaps GPUs on restore; None when its version names no
    release date (pure). No flag tells (the remap came without one), so the
    release date decides: release-20260706.0 and later builds, and builds
    described from such a tag (``release-20260706.0-45-g<hash>``); Debian's
    ``0.0~20221219.0`` dates the snapshot it packaged."""
    date = release_date(build.version)
    if date is None:
        return None
    return date >= REMAP_RUNSC.removeprefix("release-").split(".")[0]


def _runsc(record: RunscBuild, here: RunscBuild) -> Refusal | None:
    same = record.version == here.version and (
        not record.commit or not here.commit or record.commit == here.commit)
    if same:
        return None
    return Refusal("runsc", str(record), str(here),
                   "a checkpoint image is restorable only by the runsc build that wrote it: "
                   f"run runsc {record} on this worker or place the actor on a worker with it")


def check_restore(record: CompatRecord, worker: WorkerGpus, *,
                  runsc_version: RunscBuild | str, runsc_supports_remap: bool,
                  free: Iterable[GpuFacts] | None = None,
                  nvproxy_capabilities: str | None = None) -> RestoreVerdict:
    """Whether `record`'s checkpoint may be restored on `worker` (pure).

    `free` narrows the GPUs it may use (default: all of the worker's);
    `nvproxy_capabilities`, when given, is what this worker passes runsc.
    """
    refusals: list[Refusal] = []
    if record.driver_version != worker.driver_version:
        refusals.append(Refusal(
            "driver_version", record.driver_version, worker.driver_version or "unknown",
            "the driver version must be the same (runsc: 'nvidia driver version changed "
            "during restore'): place the actor on a worker with driver "
            f"{record.driver_version}"))
    here = runsc_version if isinstance(runsc_version, RunscBuild) else RunscBuild(runsc_version)
    if (refusal := _runsc(record.runsc, here)) is not None:
        refusals.append(refusal)
    if nvproxy_capabilities is not None and nvproxy_capabilities != record.nvproxy_capabilities:
        refusals.append(Refusal(
            "nvproxy_capabilities", repr(record.nvproxy_capabilities), repr(nvproxy_capabilities),
            "the restored sandbox must be allowed the driver capabilities it was saved with: "
            "pass the checkpoint's --nvproxy-capabilities"))
    placed = place_restore(record, worker.gpus if free is None else free,
                           runsc_supports_remap=runsc_supports_remap)
    refusals += placed.refusals
    if refusals:
        return RestoreVerdict(tuple(refusals))
    return RestoreVerdict((), placed.mapping, placed.remap, placed.warnings)
