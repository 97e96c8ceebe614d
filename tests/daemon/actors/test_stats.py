"""Workload stats: runsc's per-container figures summed into one actor sample (pure)."""

from __future__ import annotations

from typing import Any

from ateom.daemon.actors.stats import sample_from_runsc_stats
from ateom.daemon.actors.table import Actor, Phase
from ateom.daemon.calls.requests import ActorRef


def _stats(usage: int, peak: int = 0, cache: int = 0, cpu_ns: int = 0) -> dict[str, Any]:
    """One container's `runsc events --stats` data, in runsc's JSON shape."""
    return {"memory": {"usage": {"usage": usage, "max": peak}, "cache": cache},
            "cpu": {"usage": {"total": cpu_ns}}}


def test_a_sandbox_s_containers_are_summed_the_root_reads_zero() -> None:
    # runsc/boot/events.go splits the sandbox's usage over the non-root
    # containers and gives the root 0: asking the root alone reads 0.
    actor = Actor(ActorRef("a"), Phase.RUNNING)
    sample = sample_from_runsc_stats(actor, [
        _stats(0), _stats(300 << 20, 310 << 20, 10 << 20, 7_000_000),
        _stats(100 << 20, 120 << 20, 5 << 20, 3_000_000)], now_ns=42)
    assert sample.memory_current_bytes == 400 << 20
    assert sample.memory_peak_bytes == 430 << 20
    assert sample.memory_working_set_bytes == (400 - 15) << 20
    assert sample.cpu_usage_usec == 10_000
    assert sample.observed_at_unix_nano == 42


def test_the_peak_is_kept_across_samples_and_junk_reads_as_zero() -> None:
    actor = Actor(ActorRef("a"), Phase.RUNNING)
    sample_from_runsc_stats(actor, [_stats(0), _stats(500)], now_ns=1)
    later = sample_from_runsc_stats(actor, [{"memory": {"usage": {"usage": "x"}}}, _stats(200)],
                                    now_ns=2)
    assert (later.memory_current_bytes, later.memory_peak_bytes) == (200, 500)
    assert sample_from_runsc_stats(Actor(ActorRef("b"), Phase.RUNNING), [{}],
                                   now_ns=3).memory_current_bytes == 0
