"""Workload stats: a hosted actor's memory and CPU, from `runsc events --stats`.

With --ignore-cgroups there is no sandbox cgroup to read, so runsc's own view
is the one source. runsc reports a multi-container sandbox's usage split over
its containers (runsc/boot/events.go: the sandbox's total over the non-root
containers, 0 for the root), so the actor's figures are the sum over every
container of its sandbox; one container's stats alone would read 0 for every
actor with app containers. The peak is tracked per actor across samples
(runsc reports the current value and, when it has one, its own max).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ateom.daemon.actors.table import Actor, Phase
from ateom.daemon.calls.requests import StatsSample
from ateom.errors import AteomError, ErrorCode
from ateom.runsc.commands import RunscError, RunscTimeout


def _number(value: Any) -> int:
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError):
        return 0


def _figures(data: dict[str, Any]) -> tuple[int, int, int, int]:
    """(memory usage, its max, page cache, CPU ns) of one container's stats (pure)."""
    memory = data.get("memory") or {}
    usage = memory.get("usage") or {}
    cpu = ((data.get("cpu") or {}).get("usage") or {}).get("total", 0)
    return (_number(usage.get("usage")), _number(usage.get("max")),
            _number(memory.get("cache")), _number(cpu))


def sample_from_runsc_stats(actor: Actor, per_container: Sequence[dict[str, Any]],
                            now_ns: int) -> StatsSample:
    """Map `runsc events --stats` data of each of the sandbox's containers to one
    sample, their sum (pure but for the peak it tracks)."""
    figures = [_figures(d) for d in per_container]
    current = sum(f[0] for f in figures)
    peak = max(actor.memory_peak_bytes, sum(f[1] for f in figures), current)
    actor.memory_peak_bytes = peak
    cache = sum(f[2] for f in figures)
    cpu_total_ns = sum(f[3] for f in figures)
    return StatsSample(
        actor=actor.ref,
        memory_current_bytes=current,
        memory_peak_bytes=peak,
        memory_working_set_bytes=max(current - cache, 0),
        cpu_usage_usec=cpu_total_ns // 1000,
        observed_at_unix_nano=now_ns,
        epoch_unix_nano=actor.epoch_unix_nano,
    )


def _sample_containers(actor: Actor, uid: str, *, apps_only: bool = False
                       ) -> list[dict[str, Any]]:
    """`runsc events --stats` of each container of the actor's sandbox (runs runsc);
    `apps_only`: of its app containers alone when it has any (the root's memory
    reads 0 then: the usage is theirs)."""
    sandbox = actor.sandbox
    if sandbox is None:
        raise AteomError(f"actor {uid}: no sandbox", code=ErrorCode.FAILED_PRECONDITION)
    ids = sandbox.plan.runsc_ids
    try:
        return [sandbox.runsc.stats(runsc_id)
                for runsc_id in ((ids[1:] or ids) if apps_only else ids)]
    except RunscTimeout as exc:  # its sandbox does not answer
        raise AteomError(f"actor {uid}: no stats: {exc}", code=ErrorCode.UNAVAILABLE) from exc
    except RunscError as exc:
        raise AteomError(f"actor {uid}: runsc reported no stats: {exc.tail}",
                         code=ErrorCode.UNAVAILABLE) from exc


def memory_in_use(actor: Actor, uid: str) -> int:
    """The memory the actor's sandbox uses now, as runsc accounts it (runs runsc once
    per app container, or once for a sandbox root alone)."""
    return sum(_figures(d)[0] for d in _sample_containers(actor, uid, apps_only=True))


def actor_stats(actor: Actor | None, uid: str) -> StatsSample:
    """One sample of a hosted actor (runs runsc events --stats); errors say why not."""
    if actor is None:
        raise AteomError(f"actor {uid}: not hosted by this worker", code=ErrorCode.NOT_FOUND)
    if actor.phase in (Phase.BOOTING, Phase.RESTORING):
        raise AteomError(f"actor {uid}: still {actor.phase.value}; no stats yet",
                         code=ErrorCode.FAILED_PRECONDITION)
    if actor.sandbox_exit is not None:
        raise AteomError(f"actor {uid}: {actor.exit_note}; no stats, terminate it",
                         code=ErrorCode.FAILED_PRECONDITION)
    return sample_from_runsc_stats(actor, _sample_containers(actor, uid), time.time_ns())
