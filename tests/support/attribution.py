"""Where an RPC's time went, from the daemon's JSON log (pure).

Every line a call logs carries its ``call`` number (`ateom.daemon.rpc.handler`);
each ``phase`` event its ``duration_ms`` and ``parent``. A call's attributed time
is what the children of its outermost phase (the op: ``run``, ``checkpoint``...)
took; the rest of the RPC's wall time (the ``rpc`` event's ``duration_ms``) is
unattributed: parsing, the handler, and whatever ateom does outside a named phase.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class CallTime:
    rpc: str
    actor: str  # the call's actor uid ("" for calls without one)
    wall_ms: float
    phases_ms: Mapping[str, float] = field(default_factory=dict)  # the op's children, summed
    cpu_ms: float = 0.0  # the CPU of the call's own thread (the daemon's, not runsc's)

    @property
    def attributed_ms(self) -> float:
        return sum(self.phases_ms.values())

    @property
    def unattributed_ms(self) -> float:
        return max(self.wall_ms - self.attributed_ms, 0.0)

    @property
    def unattributed_share(self) -> float:
        return self.unattributed_ms / self.wall_ms if self.wall_ms else 0.0


def calls(events: Iterable[Mapping[str, Any]]) -> list[CallTime]:
    """Each logged RPC's wall time and its op's child phases, in log order."""
    by_call: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    order: list[int] = []
    for e in events:
        call = e.get("call")
        if isinstance(call, int):
            if call not in by_call:
                order.append(call)
            by_call[call].append(e)
    out = []
    for call in order:
        lines = by_call[call]
        rpc = next((e for e in lines if e.get("event") == "rpc"), None)
        if rpc is None:
            continue
        phases = [e for e in lines if e.get("event") == "phase"]
        tops = {e["phase"] for e in phases if e.get("parent") is None}
        spent: dict[str, float] = defaultdict(float)
        for e in phases:
            if e.get("parent") in tops:
                spent[e["phase"]] += float(e["duration_ms"])
        out.append(CallTime(str(rpc["rpc"]), str(rpc.get("actor_uid") or ""),
                            float(rpc["duration_ms"]), dict(spent),
                            float(rpc.get("cpu_ms") or 0.0)))
    return out


def summary(times: Iterable[CallTime], *, actor: str | None = None
            ) -> dict[str, dict[str, Any]]:
    """Per RPC (of `actor`'s calls only, when given): median wall and unattributed
    ms, the median and worst unattributed share, and the median of each child phase."""
    grouped: dict[str, list[CallTime]] = defaultdict(list)
    for t in times:
        if actor is None or t.actor == actor:
            grouped[t.rpc].append(t)
    out: dict[str, dict[str, Any]] = {}
    for rpc, ts in sorted(grouped.items()):
        names = sorted({n for t in ts for n in t.phases_ms})
        out[rpc] = {
            "n": len(ts),
            "wall_ms": round(statistics.median(t.wall_ms for t in ts), 1),
            "unattributed_ms": round(statistics.median(t.unattributed_ms for t in ts), 2),
            "unattributed_pct_median": round(
                100 * statistics.median(t.unattributed_share for t in ts), 2),
            "unattributed_pct_max": round(100 * max(t.unattributed_share for t in ts), 2),
            "phases_ms": {n: round(statistics.median(t.phases_ms.get(n, 0.0) for t in ts), 1)
                          for n in names},
        }
    return out
