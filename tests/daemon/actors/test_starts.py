"""`Starts`: the Run/Restore calls in flight that a checkpointed actor's cleanup
lets go first, a wait bounded in time, and a start set aside while it waits for
a release of its own uid."""

from __future__ import annotations

import threading
import time

from ateom.daemon.actors.starts import Starts


def _start_in_thread(starts: Starts, until: threading.Event) -> threading.Thread:
    entered = threading.Event()

    def run() -> None:
        with starts.starting():
            entered.set()
            until.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    assert entered.wait(5)
    return thread


def test_nothing_in_flight_is_idle_at_once() -> None:
    assert Starts().wait_idle(0) is True


def test_a_wait_ends_when_the_last_start_in_flight_ends() -> None:
    starts = Starts()
    first, second = threading.Event(), threading.Event()
    threads = [_start_in_thread(starts, first), _start_in_thread(starts, second)]
    assert starts.wait_idle(0) is False  # both in flight
    done: list[tuple[bool, bool]] = []
    waiter = threading.Thread(target=lambda: done.append(
        (starts.wait_idle(10), second.is_set())))
    waiter.start()
    first.set()
    threads[0].join(5)
    waiter.join(0.2)
    assert waiter.is_alive()  # one start still in flight
    second.set()
    waiter.join(5)
    assert done == [(True, True)]
    assert starts.wait_idle(0) is True


def test_the_wait_is_bounded() -> None:
    starts = Starts()
    stuck = threading.Event()
    thread = _start_in_thread(starts, stuck)
    began = time.monotonic()
    assert starts.wait_idle(0.2) is False  # a start that never ends holds no cleanup forever
    assert time.monotonic() - began < 5
    stuck.set()
    thread.join(5)


def test_a_start_set_aside_is_not_waited_for_and_counts_again_after() -> None:
    starts = Starts()
    with starts.starting():
        assert starts.wait_idle(0) is False
        with starts.set_aside():  # waiting for its own uid's release
            assert starts.wait_idle(0) is True
        assert starts.wait_idle(0) is False
    assert starts.wait_idle(0) is True


def test_set_aside_outside_a_start_changes_nothing() -> None:
    starts = Starts()
    other = threading.Event()
    thread = _start_in_thread(starts, other)  # another thread's start
    with starts.set_aside():
        assert starts.wait_idle(0) is False
    assert starts.wait_idle(0) is False
    other.set()
    thread.join(5)
    assert starts.wait_idle(0) is True
