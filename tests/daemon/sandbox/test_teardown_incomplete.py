"""A teardown that cannot remove the actor's runsc state dir says so, and where.

Terminate fails INTERNAL naming what stayed; a checkpoint whose save completed
still answers its files (the image is whole, the actor unhosted, GPUs and
bundles given back): failing it would have the node agent discard a good image.
The state dir's removal is made to fail by standing in for `remove_state_dir`.
"""

from __future__ import annotations

import pytest

from ateom.daemon.calls.requests import ActorRef, CheckpointRequest, TerminateRequest
from ateom.daemon.sandbox import teardown
from ateom.daemon.sandbox.teardown import TeardownIncomplete
from ateom.errors import ErrorCode

STAYED = ["/run/ateom/actors/x/null-netns (umount: Device or resource busy)"]


def test_terminate_says_what_stayed(make_world, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("t1", "app"))
    monkeypatch.setattr(teardown, "remove_state_dir", lambda root: list(STAYED))
    with pytest.raises(TeardownIncomplete) as err:
        w.service.terminate_workload(TerminateRequest(actor=ActorRef("t1")))
    assert err.value.code is ErrorCode.INTERNAL and "null-netns" in str(err.value)
    # Unhosted all the same: the sandbox is gone and nothing else waits on it.
    assert w.service.actors.get("t1") is None


def test_a_completed_save_still_answers_its_files(  # type: ignore[no-untyped-def]
        make_world, monkeypatch: pytest.MonkeyPatch) -> None:
    w = make_world()
    w.service.run_workload(w.run("c1", "app"))
    monkeypatch.setattr(teardown, "remove_state_dir", lambda root: list(STAYED))
    result = w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("c1"),
                                                             dirs=w.dirs("c1")))
    assert result.snapshot_files == ("checkpoint.img", "sub/pages.img")
    assert w.service.actors.settle(10)
    assert w.service.actors.get("c1") is None
