"""The background stats sampler: what the discovery read answers, and how the thread
paces itself (a stand-in for runsc's sample; the real one: the daemon suites)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ateom.daemon.actors import sampling
from ateom.daemon.actors.sampling import StatsSampler
from ateom.daemon.actors.table import Actor, ActorTable, Op, Phase
from ateom.daemon.calls.requests import ActorRef, StatsSample
from ateom.errors import AteomError, ErrorCode


class Runsc:
    """Samples as runsc would give them, each call recorded; `wedged` uids raise."""

    def __init__(self, takes: float = 0.0) -> None:
        self.takes = takes
        self.calls: list[tuple[str, float, float]] = []  # uid, started, ended
        self.wedged: set[str] = set()
        self.broken: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, actor: Actor, uid: str) -> StatsSample:
        started = time.monotonic()
        time.sleep(self.takes)
        with self.lock:
            self.calls.append((uid, started, time.monotonic()))
        if uid in self.wedged:
            raise AteomError(f"actor {uid}: no stats: runsc events timed out after 3 s",
                             code=ErrorCode.UNAVAILABLE)
        if uid in self.broken:
            raise RuntimeError("a bug")
        return StatsSample(actor=actor.ref, memory_current_bytes=1 << 20,
                           memory_peak_bytes=2 << 20, memory_working_set_bytes=1 << 19,
                           cpu_usage_usec=7, observed_at_unix_nano=time.time_ns(),
                           epoch_unix_nano=actor.epoch_unix_nano)

    def uids(self) -> list[str]:
        with self.lock:
            return [c[0] for c in self.calls]


def hosted(table: ActorTable, uid: str, phase: Phase = Phase.RUNNING) -> Actor:
    actor = table.admit(ActorRef(uid), Op.RUN)
    actor.phase = phase
    actor.lock.release()
    return actor


@pytest.fixture
def table() -> ActorTable:
    return ActorTable(16)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    now = [1000.0]
    monkeypatch.setattr(sampling.time, "monotonic", lambda: now[0])
    yield now


def until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.01)
    raise AssertionError("not within the time")


def test_the_discovery_read_asks_runsc_nothing_and_lists_every_executing_actor(
        table: ActorTable) -> None:
    runsc = Runsc()
    sampler = StatsSampler(table, runsc, interval=60)
    running, booting = hosted(table, "running"), hosted(table, "booting", Phase.BOOTING)
    hosted(table, "released", Phase.RELEASING)  # its checkpoint answered: not executing here
    before = sampler.active()
    assert runsc.calls == []
    assert sorted((s.actor.actor_uid, s.measured) for s in before) == [
        ("booting", False), ("running", False)]  # not measured yet: no numbers, attributed
    assert all(s.memory_current_bytes == 0 and s.epoch_unix_nano for s in before)
    sampler.start()
    try:
        until(lambda: runsc.uids() == ["running"])
        until(lambda: any(s.measured for s in sampler.active()))
    finally:
        sampler.stop()
    after = {s.actor.actor_uid: s for s in sampler.active()}
    assert set(after) == {"running", "booting"}
    assert after["running"].measured and after["running"].memory_current_bytes == 1 << 20
    assert not after["booting"].measured
    assert runsc.uids() == ["running"]  # one sample in 60 s; the reads asked nothing
    # A checkpoint under way still describes it; torn down or exited, not measured.
    running.phase = Phase.CHECKPOINTING
    assert {s.actor.actor_uid: s.measured for s in sampler.active()}["running"]
    running.phase = Phase.TERMINATING
    assert not {s.actor.actor_uid: s.measured for s in sampler.active()}["running"]
    assert booting.phase is Phase.BOOTING


def test_the_oldest_sample_goes_first_and_none_before_its_interval(
        table: ActorTable, clock: list[float]) -> None:
    runsc = Runsc()
    sampler = StatsSampler(table, runsc, interval=10)
    a, b = hosted(table, "a"), hosted(table, "b")
    hosted(table, "boot", Phase.BOOTING)  # nothing to sample
    first, _ = sampler._due()
    assert first in (a, b)
    sampler.keep(first, runsc(first, first.ref.actor_uid))
    second, _ = sampler._due()
    assert second is not first and second is not None  # never sampled beats sampled
    clock[0] += 1
    sampler.keep(second, runsc(second, second.ref.actor_uid))
    nothing, wait = sampler._due()
    assert nothing is None and 0 < wait <= sampling.LOOK_AGAIN
    clock[0] += 9.5
    assert sampler._due()[0] is first  # 10.5 s old; the other 9.5
    clock[0] += 1
    assert sampler._due()[0] is first  # both due: the older


def test_a_uid_run_again_is_a_new_actor_and_one_that_left_is_forgotten(
        table: ActorTable, clock: list[float]) -> None:
    runsc = Runsc()
    sampler = StatsSampler(table, runsc, interval=10)
    old = hosted(table, "a")
    sampler.keep(old, runsc(old, "a"))
    assert sampler._due()[0] is None
    table.remove(old)
    assert sampler.active() == [] and sampler._due()[0] is None
    assert "a" not in sampler._taken  # forgotten
    sampler.keep(old, runsc(old, "a"))  # a late sample of the old one
    new = hosted(table, "a")
    assert sampler._due()[0] is new  # the old one's sample is not the new one's
    assert [s.measured for s in sampler.active()] == [False]


def test_a_sandbox_that_does_not_answer_is_unmeasured_and_holds_up_no_other(
        table: ActorTable) -> None:
    runsc = Runsc()
    runsc.wedged.add("wedged")
    runsc.broken.add("broken")
    for uid in ("wedged", "broken", "fine"):
        hosted(table, uid)
    sampler = StatsSampler(table, runsc, interval=60)
    sampler.start()
    try:
        until(lambda: sampler.failures >= 2 and sampler.samples >= 1)
    finally:
        sampler.stop()
    got = {s.actor.actor_uid: s.measured for s in sampler.active()}
    assert got == {"wedged": False, "broken": False, "fine": True}


def test_the_thread_keeps_to_its_share_of_a_cpu(table: ActorTable) -> None:
    # Each sample takes 40 ms; at duty 0.5 the thread rests at least as long after it.
    runsc = Runsc(takes=0.04)
    for uid in ("a", "b", "c"):
        hosted(table, uid)
    sampler = StatsSampler(table, runsc, interval=0.01, duty=0.5)
    sampler.start()
    try:
        until(lambda: len(runsc.calls) >= 6)
    finally:
        sampler.stop()
    calls = sorted(runsc.calls, key=lambda c: c[1])
    for (_, _, ended), (_, next_started, _) in zip(calls, calls[1:], strict=False):
        assert next_started - ended >= 0.04 * 0.9, calls
    assert set(runsc.uids()[:3]) == {"a", "b", "c"}  # each once before any twice


def test_bad_pacing_is_refused(table: ActorTable) -> None:
    for interval, duty in ((0, 0.5), (1, 0), (1, 1.5)):
        with pytest.raises(ValueError):
            StatsSampler(table, Runsc(), interval=interval, duty=duty)
