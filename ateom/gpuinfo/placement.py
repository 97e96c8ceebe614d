"""Which of the Pod's GPUs each hosted actor holds (pure: no I/O, no gRPC).

Policy (``--gpu-placement``): ``exclusive`` gives each actor whole GPUs no
other actor holds; ``shared`` lets actors hold the same GPUs (the driver
time-slices their contexts), ``shared:N`` at most N actors per GPU. Default:
uncapped ``shared``, which with every actor asking for all GPUs is what
ateom did before placement existed, whatever --max-actors says.

What a request gets: all (the default) every GPU of the Pod, in either
mode, each needing room; named GPUs, those; a count, that many, chosen
deterministically: in exclusive mode the free ones of lowest index (packed
low, leaving whole runs free for a later large request), in shared mode the
least-held, lowest index on ties (spread, so time slices go round evenly).
A grant lists its GPUs by index.

`PlacementRefused` carries a `reason` slug and a code by whether waiting
helps: RESOURCE_EXHAUSTED when GPUs held by others are in the way (naming
who holds which), FAILED_PRECONDITION when this Pod never can (no such GPU,
another model, more GPUs than it has).

The daemon calls this under its admission lock (the placer locks inside
too, so a caller that forgets cannot double-book a GPU):
- Run: `choose` before any bundle is written; containers choose among
  ``grant.names``; if the boot fails, `vacate`.
- Checkpoint: once the stopped sandbox is killed, `vacate` (the checkpoint's
  GPU facts go in ateom.gpuinfo.record's CompatRecord). A failed checkpoint
  that leaves the actor running keeps its GPUs.
- Restore: pick targets with ateom.gpuinfo.compat.place_restore among the
  GPUs of ``snapshot().with_room()``, then book exactly those with
  ``choose(uid, GpuRequest.at_indices(...))`` (or ``.named``): a refusal
  there (another Restore won the race) names the holder and books nothing.
  Without that record, ``GpuRequest(count, model=...)`` (runsc remaps) or
  ``at_indices(..., model=...)`` (it does not). If the restore fails, `vacate`.
- Terminate, and a sandbox that exited on its own: `vacate` (idempotent: a
  repeated Terminate or a rollback after a partial one is harmless).
"""

from __future__ import annotations

import enum
import heapq
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NoReturn

from ateom.errors import AteomError, ErrorCode
from ateom.settings import DEFAULT_PLACEMENT, PlacementPolicy, PlacementSettings

ALL_GPUS = -1  # GpuRequest.count: every GPU of the Pod (what actors got before placement)
_MAX_ENTRIES = 8  # GPU runs named in one refusal; the rest are counted
_MAX_HOLDERS = 3  # actor uids named per GPU run


def _invalid(message: str) -> AteomError:
    return AteomError(message, code=ErrorCode.INVALID_ARGUMENT)


@dataclass(frozen=True, slots=True)
class PodGpu:
    """One GPU of the Pod as placement sees it."""

    name: str  # qualified CDI name, e.g. nvidia.com/gpu=0
    index: int
    uuid: str = ""
    model: str = ""  # PCI vendor:device id ("10de:2330"), else the product name; "" unknown


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What an actor asks for: ``GpuRequest()`` all of the Pod's GPUs (the default
    before placement), ``GpuRequest(0)`` none, ``GpuRequest(2)`` two; `named`
    and `at_indices` (a restore onto the checkpoint's indices) set `count` to
    their number. `model`, when set, must be every granted GPU's model
    (a GPU of unknown model does not match: a CUDA image restored onto
    another model fails far later and worse).
    """

    count: int = ALL_GPUS
    names: tuple[str, ...] = ()
    model: str = ""
    exact_indices: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.names and self.exact_indices:
            raise _invalid("gpu request: names and exact_indices exclude each other")
        specific: tuple[Any, ...] = self.names or self.exact_indices
        if len(set(specific)) != len(specific):
            raise _invalid(f"gpu request: {specific}: a GPU is named twice")
        if any(not isinstance(i, int) or i < 0 for i in self.exact_indices):
            raise _invalid(f"gpu request: exact_indices {self.exact_indices}: must be >= 0")
        if specific and self.count != len(specific):
            raise _invalid(f"gpu request: count {self.count} but {len(specific)} GPUs named")
        if self.count < ALL_GPUS:
            raise _invalid(f"gpu request: count {self.count}: must be >= 0 or ALL_GPUS")

    @classmethod
    def named(cls, names: Sequence[str], model: str = "") -> GpuRequest:
        return cls(len(names), names=tuple(names), model=model)

    @classmethod
    def at_indices(cls, indices: Sequence[int], model: str = "") -> GpuRequest:
        return cls(len(indices), model=model, exact_indices=tuple(indices))


@dataclass(frozen=True, slots=True)
class Grant:
    """The GPUs an actor was given, by index."""

    actor_uid: str
    gpus: tuple[PodGpu, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.gpus)


class RefusalReason(enum.Enum):
    TOO_FEW_FREE = "too_few_free"  # exclusive: others hold too many of the GPUs asked for
    CAP_REACHED = "cap_reached"  # shared: too many of them already have `cap` holders
    NAMES_TAKEN = "names_taken"  # exclusive: a GPU asked for by name is held
    INDICES_TAKEN = "indices_taken"  # exclusive: a GPU asked for by index is held
    UNKNOWN_GPU = "unknown_gpu"  # the Pod has no GPU of that name or index
    MODEL_MISMATCH = "model_mismatch"  # the Pod has too few GPUs of the model asked for
    EXCEEDS_POD = "exceeds_pod"  # more GPUs than the Pod has


# Waiting never helps these: the node agent should place the actor elsewhere.
_PERMANENT = frozenset({RefusalReason.UNKNOWN_GPU, RefusalReason.MODEL_MISMATCH,
                        RefusalReason.EXCEEDS_POD})


class PlacementRefused(AteomError):
    """The Pod cannot give an actor the GPUs it asked for; nothing changed."""

    code = ErrorCode.RESOURCE_EXHAUSTED

    def __init__(self, actor_uid: str, reason: RefusalReason, detail: str) -> None:
        self.actor_uid = actor_uid
        self.reason = reason
        code = ErrorCode.FAILED_PRECONDITION if reason in _PERMANENT else None
        super().__init__(f"actor {actor_uid}: {detail}", code=code)


@dataclass(frozen=True, slots=True)
class GpuHolding:
    gpu: PodGpu
    holders: tuple[str, ...]  # actor uids, in the order they were placed


@dataclass(frozen=True, slots=True)
class PlacementSnapshot:
    """For GetStatus and metrics: each GPU's holders, refusals so far by reason."""

    settings: PlacementSettings
    gpus: tuple[GpuHolding, ...]
    refusals: Mapping[RefusalReason, int]  # every reason, 0 included (counters start at 0)

    @property
    def free(self) -> int:
        """GPUs no actor holds."""
        return sum(1 for g in self.gpus if not g.holders)

    def with_room(self) -> tuple[PodGpu, ...]:
        """GPUs one more actor may hold: the `free` a restore chooses among."""
        limit = self.settings.per_gpu_limit
        return tuple(h.gpu for h in self.gpus if limit is None or len(h.holders) < limit)


def _plural(n: int, noun: str = "GPU") -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _bounded(items: Sequence[object]) -> str:
    """At most _MAX_ENTRIES items, the rest counted: a message stays short on 64 GPUs."""
    shown = ", ".join(str(i)[:100] for i in items[:_MAX_ENTRIES])
    more = len(items) - _MAX_ENTRIES
    return f"{shown} and {more} more" if more > 0 else shown


class GpuPlacer:
    """The Pod's GPUs and who holds them. Thread-safe; see the module doc for the calls."""

    def __init__(self, gpus: Iterable[PodGpu],
                 settings: PlacementSettings = DEFAULT_PLACEMENT) -> None:
        self.settings = settings
        self.gpus = tuple(sorted(gpus, key=lambda g: g.index))
        for attr in ("name", "index", "uuid"):
            seen = Counter(getattr(g, attr) for g in self.gpus if getattr(g, attr) != "")
            twice = [v for v, n in seen.items() if n > 1]
            if twice:
                raise AteomError(f"Pod GPUs: {attr} {twice[0]!r} given twice",
                                 code=ErrorCode.FAILED_PRECONDITION)
        self._limit = settings.per_gpu_limit
        self._by_name = {g.name: p for p, g in enumerate(self.gpus)}
        self._by_index = {g.index: p for p, g in enumerate(self.gpus)}
        self._everything = tuple(range(len(self.gpus)))
        self._by_model: dict[str, tuple[int, ...]] = {}
        for p, g in enumerate(self.gpus):
            self._by_model[g.model] = (*self._by_model.get(g.model, ()), p)
        # Per position, holders as an ordered set (dict): placement order, O(1) removal.
        self._holders: list[dict[str, None]] = [{} for _ in self.gpus]
        # Each holder's positions and grant: release hands the grant's GPUs back as they are.
        self._held: dict[str, tuple[tuple[int, ...], Grant]] = {}
        self._refusals = dict.fromkeys(RefusalReason, 0)
        self._lock = threading.Lock()

    def choose(self, actor_uid: str, request: GpuRequest) -> Grant:
        """Give `actor_uid` the GPUs `request` asks for, or raise PlacementRefused."""
        with self._lock:
            if actor_uid in self._held:
                held = ", ".join(self._held[actor_uid][1].names)
                raise AteomError(f"actor {actor_uid}: already holds {held}; release first",
                                 code=ErrorCode.ALREADY_EXISTS)
            try:
                chosen = self._choose(request)
            except _Refusal as refusal:
                self._refusals[refusal.reason] += 1
                raise PlacementRefused(actor_uid, refusal.reason, refusal.detail) from None
            holders, gpus = self._holders, self.gpus
            for p in chosen:
                holders[p][actor_uid] = None
            grant = Grant(actor_uid, gpus if chosen is self._everything else
                          tuple([gpus[p] for p in chosen]))
            if chosen:
                self._held[actor_uid] = (chosen, grant)
            return grant

    def vacate(self, actor_uid: str) -> tuple[PodGpu, ...]:
        """Free every GPU `actor_uid` holds; what it held (none the second time)."""
        with self._lock:
            chosen, grant = self._held.pop(actor_uid, ((), None))
            holders = self._holders
            for p in chosen:
                del holders[p][actor_uid]
            return grant.gpus if grant else ()

    def held_by(self, actor_uid: str) -> tuple[PodGpu, ...]:
        with self._lock:
            held = self._held.get(actor_uid)
            return held[1].gpus if held else ()

    def holders(self) -> Mapping[str, tuple[str, ...]]:
        """Every GPU's name -> the uids holding it (empty when free)."""
        return MappingProxyType({h.gpu.name: h.holders for h in self.snapshot().gpus})

    def snapshot(self) -> PlacementSnapshot:
        with self._lock:
            holdings = (GpuHolding(self.gpus[p], tuple(h)) for p, h in enumerate(self._holders))
            return PlacementSnapshot(self.settings, tuple(holdings),
                                     MappingProxyType(dict(self._refusals)))

    # -- choosing (called under the lock) -----------------------------------

    def _choose(self, request: GpuRequest) -> tuple[int, ...]:
        """Positions to grant, ascending; raises _Refusal."""
        if request.names or request.exact_indices:
            return self._choose_specific(request)
        if request.count == 0:
            return ()
        want = len(self.gpus) if request.count == ALL_GPUS else request.count
        # A GPU of unknown model ("") never matches a model asked for.
        candidates = self._by_model.get(request.model, ()) if request.model else self._everything
        if len(candidates) < want:
            if want > len(self.gpus):
                raise _Refusal(RefusalReason.EXCEEDS_POD,
                               f"needs {_plural(want)}; the Pod has {len(self.gpus)}")
            raise _Refusal(RefusalReason.MODEL_MISMATCH, f"needs {self._wants(request, want)};"
                           f" the Pod has {self._models()}")
        limit = self._limit
        open_ = candidates if limit is None else \
            tuple([p for p in candidates if len(self._holders[p]) < limit])
        if len(open_) < want:
            self._refuse_full(f"needs {self._wants(request, want)}", len(open_), candidates)
        if len(open_) == want:
            return open_  # all of them (for ALL_GPUS: `_everything` itself)
        if limit == 1:
            return open_[:want]
        # Shared: the least-held first, lowest index on ties (deterministic spread).
        return tuple(sorted(heapq.nsmallest(want, open_,
                                            key=lambda p: (len(self._holders[p]), p))))

    def _choose_specific(self, request: GpuRequest) -> tuple[int, ...]:
        by_name = bool(request.names)
        keys: tuple[Any, ...] = request.names if by_name else request.exact_indices
        where = self._by_name if by_name else self._by_index
        unknown = [k for k in keys if k not in where]
        if unknown:
            what = _bounded(unknown) if by_name else "at index " + _bounded(unknown)
            raise _Refusal(RefusalReason.UNKNOWN_GPU,
                           f"the Pod has no GPU {what} (it has {self._span(self._everything)})")
        chosen = tuple(sorted(where[k] for k in keys))
        wrong = [p for p in chosen if request.model and self.gpus[p].model != request.model]
        if wrong:
            g = self.gpus[wrong[0]]
            raise _Refusal(RefusalReason.MODEL_MISMATCH, f"needs model {request.model};"
                           f" {g.name} is {g.model or 'of unknown model'}")
        limit = self._limit
        full = [] if limit is None else [p for p in chosen if len(self._holders[p]) >= limit]
        if full:
            label = _bounded(request.names) if by_name else \
                "the GPUs at indices " + _bounded(request.exact_indices)
            reason = RefusalReason.NAMES_TAKEN if by_name else RefusalReason.INDICES_TAKEN
            self._refuse_full(f"needs {label}", len(chosen) - len(full), full, reason)
        return chosen

    def _refuse_full(self, needs: str, room: int, among: Sequence[int],
                     taken: RefusalReason = RefusalReason.TOO_FEW_FREE) -> NoReturn:
        if self.settings.policy is PlacementPolicy.EXCLUSIVE:
            reason, room_text = taken, f"{room} free"
        else:
            reason = RefusalReason.CAP_REACHED
            room_text = f"{room} under the cap of {_plural(self._limit or 0, 'actor')} per GPU"
        raise _Refusal(reason, f"{needs}: {room_text} ({self._held_summary(among)})")

    def _wants(self, request: GpuRequest, want: int) -> str:
        what = f"all {_plural(want)}" if request.count == ALL_GPUS else _plural(want)
        return f"{what} of model {request.model}" if request.model else what

    def _models(self) -> str:
        counts = Counter(g.model or "unknown model" for g in self.gpus)
        return ", ".join(f"{n} of {m}" for m, n in sorted(counts.items())) or "no GPUs"

    def _span(self, positions: Sequence[int]) -> str:
        if not positions:
            return "no GPUs"
        first, last = self.gpus[positions[0]].name, self.gpus[positions[-1]].name
        return first if first == last else f"{first} to {last}"

    def _held_summary(self, positions: Sequence[int]) -> str:
        """Who holds which of `positions`: runs of one holder set merged, the first
        _MAX_ENTRIES runs named, the rest counted (a message stays short on 64 GPUs)."""
        runs: list[tuple[list[int], dict[str, None]]] = []
        rest_gpus, rest_actors = 0, set[str]()
        for p in positions:
            holders = self._holders[p]
            if not holders:
                continue
            if rest_gpus:
                rest_gpus += 1
                rest_actors.update(holders)
            elif runs and runs[-1][1] == holders and runs[-1][0][-1] == p - 1:
                runs[-1][0].append(p)
            elif len(runs) < _MAX_ENTRIES:
                runs.append(([p], holders))
            else:
                rest_gpus, rest_actors = 1, set(holders)
        parts = []
        for run, holders in runs:
            who = ", ".join(list(holders)[:_MAX_HOLDERS])
            if len(holders) > _MAX_HOLDERS:
                who += f" and {len(holders) - _MAX_HOLDERS} more"
            parts.append(f"{self._span(run)} held by {who}")
        if rest_gpus:
            parts.append(f"{_plural(rest_gpus)} more held by {_plural(len(rest_actors), 'actor')}")
        return "; ".join(parts)


class _Refusal(Exception):
    """Inside the placer only: why `_choose` refused, before the actor is named."""

    def __init__(self, reason: RefusalReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
