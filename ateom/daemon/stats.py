"""Workload stats: a hosted actor's memory and CPU, from `runsc events --stats`.

With --ignore-cgroups there is no sandbox cgroup to read, so runsc's own view
is the one source. The peak is tracked per actor across samples (runsc
reports the current value and, when it has one, its own max).
"""

from __future__ import annotations

import time
from typing import Any

from ateom.daemon.actors import Actor, Phase
from ateom.daemon.requests import StatsSample
from ateom.daemon.runsc import RunscError
from ateom.errors import AteomError, ErrorCode


def sample_from_runsc_stats(actor: Actor, data: dict[str, Any], now_ns: int) -> StatsSample:
    """Map `runsc events --stats` data to a sample (pure but for the peak it tracks)."""
    memory = data.get("memory") or {}
    usage = memory.get("usage") or {}
    current = int(usage.get("usage", 0) or 0)
    peak = max(actor.memory_peak_bytes, int(usage.get("max", 0) or 0), current)
    actor.memory_peak_bytes = peak
    cache = int((memory.get("cache") or 0) or 0)
    cpu_total_ns = int(((data.get("cpu") or {}).get("usage") or {}).get("total", 0) or 0)
    return StatsSample(
        actor=actor.ref,
        memory_current_bytes=current,
        memory_peak_bytes=peak,
        memory_working_set_bytes=max(current - cache, 0),
        cpu_usage_usec=cpu_total_ns // 1000,
        observed_at_unix_nano=now_ns,
        epoch_unix_nano=actor.epoch_unix_nano,
    )


def actor_stats(actor: Actor | None, uid: str) -> StatsSample:
    """One sample of a hosted actor (runs runsc events --stats); errors say why not."""
    if actor is None:
        raise AteomError(f"actor {uid}: not hosted by this worker", code=ErrorCode.NOT_FOUND)
    if actor.phase in (Phase.BOOTING, Phase.RESTORING):
        raise AteomError(f"actor {uid}: still {actor.phase.value}; no stats yet",
                         code=ErrorCode.FAILED_PRECONDITION)
    sandbox = actor.sandbox
    if sandbox is None:
        raise AteomError(f"actor {uid}: no sandbox", code=ErrorCode.FAILED_PRECONDITION)
    if actor.sandbox_exit is not None:
        raise AteomError(
            f"actor {uid}: its sandbox exited (code {actor.sandbox_exit}); terminate it",
            code=ErrorCode.FAILED_PRECONDITION)
    try:
        data = sandbox.runsc.stats(sandbox.plan.root_id)
    except RunscError as exc:
        raise AteomError(f"actor {uid}: runsc reported no stats: {exc.tail}",
                         code=ErrorCode.UNAVAILABLE) from exc
    return sample_from_runsc_stats(actor, data, time.time_ns())
