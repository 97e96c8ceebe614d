"""No ateom lock or call slot is held across another actor's runsc checkpoint or
restore: two actors' calls run at once. The fake runsc makes each listed call wait
until all of them have started (`FakeRunsc.meet`), so these pass only when ateom
lets them overlap; run one after the other, the first would give up waiting."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ateom.daemon.calls.requests import ActorRef, CheckpointRequest, RestoreRequest
from ateom.errors import AteomError


def _at_once(*calls: Callable[[], object]) -> list[BaseException]:
    failed: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 -- reported by the test
            failed.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return failed


def _restorable(w, uid: str) -> RestoreRequest:  # type: ignore[no-untyped-def]
    w.bundles(uid)
    dirs = w.dirs(uid)
    os.makedirs(dirs.restore_dir)
    Path(dirs.restore_dir, "checkpoint.img").write_text("img")
    return RestoreRequest(actor=ActorRef(uid), dirs=dirs)


def test_two_actors_restores_overlap(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(max_actors=2)
    first, second = _restorable(w, "r1"), _restorable(w, "r2")
    w.fake.meet("restore r1_pause", "restore r2_pause")
    assert _at_once(lambda: w.service.restore_workload(first),
                    lambda: w.service.restore_workload(second)) == []
    assert {a.ref.actor_uid for a in w.service.actors.snapshot()} == {"r1", "r2"}


def test_two_actors_checkpoints_overlap_and_one_overlaps_anothers_restore(
        make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(max_actors=3)
    for uid in ("c1", "c2"):
        w.service.run_workload(w.run(uid))
    w.fake.meet("checkpoint c1_pause", "checkpoint c2_pause")
    assert _at_once(*(lambda uid=uid: w.service.checkpoint_workload(CheckpointRequest(
        actor=ActorRef(uid), dirs=w.dirs(uid))) for uid in ("c1", "c2"))) == []
    w.service.run_workload(w.run("c3"))
    restore = _restorable(w, "r3")
    w.fake.meet("checkpoint c3_pause", "restore r3_pause")
    assert _at_once(lambda: w.service.checkpoint_workload(CheckpointRequest(
        actor=ActorRef("c3"), dirs=w.dirs("c3"))),
        lambda: w.service.restore_workload(restore)) == []


def test_the_rendezvous_fails_calls_run_one_after_the_other(
        make_world) -> None:  # type: ignore[no-untyped-def]
    # The check itself can fail: the same two restores, one after the other.
    w = make_world(max_actors=2)
    w.fake.meet("restore s1_pause", "restore s2_pause", within=1.0)
    with pytest.raises(AteomError, match="waited 1 s for restore s2_pause"):
        w.service.restore_workload(_restorable(w, "s1"))
