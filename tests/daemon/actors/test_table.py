"""The actor state machine and the hosting table."""

from __future__ import annotations

import pytest

from ateom.daemon.actors.table import Actor, ActorTable, Asks, Op, Phase, next_phase, over_capacity
from ateom.daemon.calls.requests import (
    ActorRef,
)
from ateom.errors import AteomError, ErrorCode
from tests.support.pure import code

# -- state machine --------------------------------------------------------------

@pytest.mark.parametrize("phase", [None, *Phase])
@pytest.mark.parametrize("op", list(Op))
def test_transitions(phase: Phase | None, op: Op) -> None:
    allowed = {
        (None, Op.RUN): Phase.BOOTING, (None, Op.RESTORE): Phase.RESTORING,
        (Phase.RUNNING, Op.CHECKPOINT): Phase.CHECKPOINTING,
        (Phase.RUNNING, Op.TERMINATE): Phase.TERMINATING,
        (Phase.RUNNING, Op.STATS): Phase.RUNNING,
        (Phase.EXITED, Op.TERMINATE): Phase.TERMINATING,  # all one can do with it
    }
    if (phase, op) in allowed:
        assert next_phase(phase, op, "a") is allowed[(phase, op)]
    elif phase is None:
        assert code(next_phase, phase, op, "a") is ErrorCode.NOT_FOUND
    else:
        assert code(next_phase, phase, op, "a") is ErrorCode.FAILED_PRECONDITION


def test_an_exited_actor_refuses_everything_but_terminate_naming_the_exit() -> None:
    with pytest.raises(AteomError) as err:
        next_phase(Phase.EXITED, Op.CHECKPOINT, "a",
                   exit_note="its sandbox exited on its own (killed by signal 9) at T")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "killed by signal 9" in str(err.value) and "terminate it" in str(err.value)
    assert "in state stopped" not in str(err.value)


def _running(table: ActorTable, uid: str) -> Actor:
    actor = table.admit(ActorRef(uid), Op.RUN)
    table.up(actor)
    actor.lock.release()
    return actor


def test_a_running_actor_whose_sandbox_exits_is_exited_and_reported_once() -> None:
    seen: list[str] = []
    table = ActorTable(2, on_exited=lambda a: seen.append(a.ref.actor_uid))
    a = _running(table, "a")
    table.sandbox_exited(a, -9)
    assert a.phase is Phase.EXITED and seen == ["a"]
    assert a.exit_note.startswith("its sandbox exited on its own (killed by signal 9) at ")
    assert len(table) == 1  # still listed, holding its slot, until terminated
    with pytest.raises(AteomError, match="killed by signal 9") as err, \
            table.operate("a", Op.CHECKPOINT, max_wait=1):
        pass
    assert err.value.code is ErrorCode.FAILED_PRECONDITION and seen == ["a"]
    with table.operate("a", Op.TERMINATE, max_wait=1) as actor:
        assert actor.phase is Phase.TERMINATING
        table.remove(actor)


def test_an_exit_during_a_call_is_the_call_s_to_judge_and_shows_once_it_ends() -> None:
    seen: list[str] = []
    table = ActorTable(1, on_exited=lambda a: seen.append(a.ref.actor_uid))
    a = _running(table, "a")
    with pytest.raises(AteomError), table.operate("a", Op.CHECKPOINT, max_wait=1):
        table.sandbox_exited(a, 0)  # e.g. a save that failed and took the sandbox
        assert a.phase is Phase.CHECKPOINTING and seen == []
        raise AteomError("refused", code=ErrorCode.FAILED_PRECONDITION)
    assert a.phase is Phase.EXITED and seen == ["a"]  # not back to running


def test_an_exit_while_booting_makes_the_booted_actor_exited() -> None:
    seen: list[str] = []
    table = ActorTable(1, on_exited=lambda a: seen.append(a.ref.actor_uid))
    a = table.admit(ActorRef("a"), Op.RUN)
    table.sandbox_exited(a, 1)
    assert a.phase is Phase.BOOTING and seen == []
    table.up(a)
    assert a.phase is Phase.EXITED and seen == ["a"]


def test_table_admission_and_operate() -> None:
    table = ActorTable(max_actors=1)
    a = table.admit(ActorRef("a"), Op.RUN)
    assert code(table.admit, ActorRef("a"), Op.RUN) is ErrorCode.FAILED_PRECONDITION
    assert code(table.admit, ActorRef("b"), Op.RESTORE) is ErrorCode.RESOURCE_EXHAUSTED
    a.phase = Phase.RUNNING
    a.lock.release()
    with pytest.raises(AteomError), table.operate("a", Op.CHECKPOINT, max_wait=1) as actor:
        assert actor.phase is Phase.CHECKPOINTING
        raise AteomError("runsc refused", code=ErrorCode.FAILED_PRECONDITION)
    assert a.phase is Phase.RUNNING  # a failed op leaves the actor as it was
    with table.operate("a", Op.TERMINATE, max_wait=1) as actor:
        table.remove(actor)
    assert len(table) == 0
    with pytest.raises(AteomError) as err, table.operate("a", Op.CHECKPOINT, max_wait=1):
        pass
    assert err.value.code is ErrorCode.NOT_FOUND


def test_a_wait_for_a_busy_actor_is_bounded_and_then_does_nothing() -> None:
    import threading

    from ateom.daemon.calls import deadline
    from ateom.daemon.calls.requests import ActorRef

    table = ActorTable(1)
    actor = table.admit(ActorRef("a"), Op.RUN)
    actor.phase = Phase.RUNNING  # the lock stays held: a stuck call
    ran = threading.Event()
    with pytest.raises(AteomError) as err:
        with table.operate("a", Op.TERMINATE, max_wait=0.05):
            ran.set()
    assert err.value.code is ErrorCode.UNAVAILABLE and not ran.is_set()
    with deadline.bound(0.05), pytest.raises(AteomError) as err:
        with table.operate("a", Op.TERMINATE, max_wait=60):
            ran.set()
    assert err.value.code is ErrorCode.DEADLINE_EXCEEDED and not ran.is_set()
    # The lock frees after the deadline: the late call still does nothing.
    actor.lock.release()
    with deadline.bound(-1), pytest.raises(AteomError) as err:
        with table.operate("a", Op.TERMINATE, max_wait=60):
            ran.set()
    assert err.value.code is ErrorCode.DEADLINE_EXCEEDED and not ran.is_set()
    assert actor.phase is Phase.RUNNING and not actor.lock.locked()


def test_a_cleanup_slot_keeps_a_run_out_but_takes_no_capacity() -> None:
    from ateom.daemon.calls.requests import ActorRef

    table = ActorTable(1)
    cleanup = table.admit_cleanup(ActorRef("gone"))
    assert cleanup is not None and len(table) == 0
    with pytest.raises(AteomError) as err:
        table.admit(ActorRef("gone"), Op.RUN)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    other = table.admit(ActorRef("other"), Op.RUN)  # the one slot is still free
    assert table.admit_cleanup(ActorRef("other")) is None  # hosted: no cleanup
    table.remove(cleanup)
    table.remove(other)


def test_an_actor_a_call_removed_is_not_reported_exited_by_its_own_teardown() -> None:
    seen: list[str] = []
    table = ActorTable(1, on_exited=lambda a: seen.append(a.ref.actor_uid))
    a = _running(table, "a")
    with table.operate("a", Op.TERMINATE, max_wait=1) as actor:
        table.sandbox_exited(actor, -9)  # killed by the teardown, reaped meanwhile
        table.remove(actor)
    assert seen == []  # a terminated actor did not exit "on its own"
    assert a.phase is Phase.TERMINATING


def test_an_actor_fits_only_beside_what_the_hosted_ask_of_the_workers_capacity() -> None:
    table = ActorTable(4, capacity=Asks(cpu_milli=1000, memory_bytes=1 << 30))
    a = table.admit(ActorRef("a"), Op.RUN, Asks(600, 256 << 20))
    a.lock.release()
    with pytest.raises(AteomError) as full:
        table.admit(ActorRef("b"), Op.RUN, Asks(600, 0))
    assert full.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert full.value.message == ("actor b: asks 600m of CPU, and this worker has 400m of its"
                                  " 1000m left (1 actor(s) hold 600m)")
    assert table.get("b") is None and table.held() == Asks(600, 256 << 20)
    with pytest.raises(AteomError, match="asks 1073741824 bytes of memory"):
        table.admit(ActorRef("b"), Op.RUN, Asks(0, 1 << 30))
    b = table.admit(ActorRef("b"), Op.RUN, Asks(400, 0))  # exactly what is left
    c = table.admit(ActorRef("c"), Op.RUN)  # asking nothing, bound by nothing
    assert table.held() == Asks(1000, 256 << 20)
    table.remove(a)
    assert table.held() == Asks(400, 0)
    for actor in (b, c):
        actor.lock.release()


def test_a_capacity_or_an_ask_of_zero_binds_nothing() -> None:
    assert over_capacity("x", Asks(10**6, 1 << 40), Asks(), Asks(), 0) == ""
    assert over_capacity("x", Asks(0, 0), Asks(5000, 1 << 40), Asks(1000, 1 << 30), 3) == ""
    assert "memory" in over_capacity("x", Asks(1, 2), Asks(0, 1), Asks(0, 2), 1)
