"""tests.support.attribution (what bench_turns prints): an RPC's time split by its
op's child phases."""

from __future__ import annotations

from tests.support.attribution import calls, summary


def _phase(call: int, name: str, ms: float, parent: str | None) -> dict[str, object]:
    return {"event": "phase", "call": call, "phase": name, "duration_ms": ms, "parent": parent}


EVENTS = [
    _phase(1, "validate", 1.0, "checkpoint"),
    _phase(2, "validate", 2.0, "restore"),  # another call, interleaved
    _phase(1, "runsc.delete", 9.0, "teardown"),  # nested: inside teardown, not counted twice
    _phase(1, "runsc.checkpoint", 70.0, "checkpoint"),
    _phase(1, "teardown", 20.0, "checkpoint"),
    _phase(1, "checkpoint", 95.0, None),
    {"event": "rpc", "call": 1, "rpc": "Ateom.CheckpointWorkload", "duration_ms": 100.0,
     "actor_uid": "a", "cpu_ms": 6.5},
    {"event": "phase", "phase": "reconcile", "duration_ms": 5.0, "parent": None},  # no call
    _phase(2, "restore", 3.0, None),
    {"event": "rpc", "call": 2, "rpc": "Ateom.RestoreWorkload", "duration_ms": 4.0},
    _phase(3, "run", 1.0, None),  # a call whose rpc line is missing: left out
]


def test_a_calls_time_is_its_ops_children_and_the_rest_unattributed() -> None:
    ckpt, restore = calls(EVENTS)
    assert ckpt.rpc == "Ateom.CheckpointWorkload" and ckpt.wall_ms == 100.0
    assert ckpt.phases_ms == {"validate": 1.0, "runsc.checkpoint": 70.0, "teardown": 20.0}
    assert ckpt.unattributed_ms == 9.0 and round(ckpt.unattributed_share, 3) == 0.09
    assert restore.phases_ms == {"validate": 2.0} and restore.unattributed_ms == 2.0
    assert (ckpt.cpu_ms, restore.cpu_ms) == (6.5, 0.0)  # an older daemon's line has none


def test_the_summary_gives_medians_and_the_worst_share() -> None:
    s = summary(calls(EVENTS))
    assert s["Ateom.CheckpointWorkload"]["unattributed_pct_max"] == 9.0
    assert s["Ateom.RestoreWorkload"]["unattributed_pct_median"] == 50.0
    assert s["Ateom.CheckpointWorkload"]["phases_ms"]["runsc.checkpoint"] == 70.0
    assert list(summary(calls(EVENTS), actor="a")) == ["Ateom.CheckpointWorkload"]
