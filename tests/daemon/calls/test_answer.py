"""`calls.answer`: work a call leaves for after its answer is collected while the RPC
runs and started when gRPC has sent the answer (at once without an RPC)."""

from __future__ import annotations

from ateom.daemon.calls import answer


def test_without_an_rpc_the_work_starts_at_once() -> None:
    ran: list[str] = []
    answer.after_answer(lambda: ran.append("now"))
    assert ran == ["now"]


def test_within_an_rpc_it_waits_for_the_caller_to_run_it() -> None:
    ran: list[str] = []
    with answer.collecting() as later:
        answer.after_answer(lambda: ran.append("release"))
        answer.after_answer(lambda: ran.append("discard"))
        assert ran == []
    assert ran == []  # collected: the RPC layer runs them once the answer is sent
    answer.run_all(later)
    assert ran == ["release", "discard"]
    answer.after_answer(lambda: ran.append("outside"))  # the collection is over
    assert ran[-1] == "outside"
