"""The hand-over protocol, step by step (`ateom.daemon.actors.succession`)."""

from __future__ import annotations

import threading
import time

import pytest

from ateom.daemon.actors.succession import Succession, yielders_of
from ateom.errors import AteomError, ErrorCode


def test_a_checkpointed_actor_leaves_in_three_steps() -> None:
    a = Succession("a")
    assert a.counted and not a.dying
    a.yield_capacity(("nvidia.com/gpu=0",))  # its stopped sandbox killed
    assert not a.counted and a.dying and a.yielded_gpus == ("nvidia.com/gpu=0",)
    a.free()  # every thread of its sandbox exited
    assert a.freed.is_set() and not a.dying and not a.gone.is_set()
    a.leave()  # the rest of its release done
    assert a.gone.is_set()


def test_a_successor_takes_those_whose_slot_or_gpus_it_took_once_each() -> None:
    a, c, b = Succession("a"), Succession("c"), Succession("b")
    a.yield_capacity(("nvidia.com/gpu=0",))
    c.yield_capacity(("nvidia.com/gpu=1",))
    assert yielders_of(["nvidia.com/gpu=1"], [a, c]) == [c]
    b.take([c])
    b.take([c, a])  # the slot too: both, each once
    assert b.predecessors == [c, a]


def test_a_successor_waits_until_its_predecessors_are_freed() -> None:
    a, b = Succession("a"), Succession("b")
    a.yield_capacity(())
    b.take([a])
    threading.Timer(0.2, a.free).start()
    started = time.monotonic()
    b.wait_for_predecessors(10)
    assert time.monotonic() - started >= 0.15 and b.predecessors == []


def test_a_predecessor_that_does_not_exit_is_unavailable_naming_it() -> None:
    a, b = Succession("a"), Succession("b")
    a.yield_capacity(())
    b.take([a])
    with pytest.raises(AteomError) as err:
        b.wait_for_predecessors(0.1)
    assert err.value.code is ErrorCode.UNAVAILABLE
    assert "actor b: the slot or GPUs of actor a" in str(err.value) and "0.1 s" in str(err.value)


def test_a_call_for_the_leaving_actor_waits_until_it_is_gone_bounded() -> None:
    a = Succession("a")
    assert a.wait_gone(0.05, "actor a: restore") is False
    threading.Timer(0.1, a.leave).start()
    assert a.wait_gone(10, "actor a: restore") is True
