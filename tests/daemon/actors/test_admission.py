"""Admission: call slots that leave threads for Health, the drain's door."""

from __future__ import annotations

import pytest

from ateom.daemon.actors.admission import Admission
from ateom.daemon.actors.table import ActorTable, Op
from ateom.daemon.calls.requests import ActorRef
from ateom.daemon.lifecycle.config import RESERVED_RPC_THREADS, DaemonConfig
from ateom.errors import AteomError, ErrorCode


def test_calls_beyond_the_slots_are_refused_at_once() -> None:
    admission = Admission(2)
    with admission.call(Op.TERMINATE, "a", admits=False), \
            admission.call(Op.CHECKPOINT, "b", admits=False):
        assert admission.inflight == 2
        with pytest.raises(AteomError) as err, admission.call(Op.RUN, "c", admits=True):
            pass
        assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED and "2 call slots" in str(err.value)
    with admission.call(Op.RUN, "c", admits=True):  # freed again
        pass
    assert admission.inflight == 0


def test_the_server_keeps_threads_no_call_slot_can_take() -> None:
    for max_actors in (1, 2, 16):
        config = DaemonConfig(actors_root="/r", max_actors=max_actors)
        assert config.rpc_threads - config.lifecycle_slots == RESERVED_RPC_THREADS >= 2


def test_draining_refuses_new_actors_and_the_closed_door_refuses_admission() -> None:
    admission, table = Admission(4), ActorTable(2)
    admission.drain(0, lambda: 0)
    with pytest.raises(AteomError) as err, admission.call(Op.RUN, "a", admits=True):
        pass
    assert err.value.code is ErrorCode.UNAVAILABLE
    with admission.call(Op.TERMINATE, "a", admits=False):  # stays open
        pass
    with pytest.raises(AteomError) as err:
        admission.admit(table, ActorRef("a"), Op.RUN, max_wait=0)
    assert err.value.code is ErrorCode.UNAVAILABLE and len(table) == 0
