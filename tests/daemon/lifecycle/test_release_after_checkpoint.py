"""A checkpoint is answered once the image is complete; the stopped sandbox is reaped
after, on a thread of its own. Meanwhile the actor is RELEASING: it keeps its slot
and its GPUs, and a call for it, or one that needs what it holds, waits until it is
gone instead of being refused (the fake runsc's `delete` is made slow to hold the
release open)."""

from __future__ import annotations

import os
import threading

from ateom.daemon.actors.table import Phase
from ateom.daemon.calls.requests import (
    ActorRef,
    CheckpointRequest,
    GpuWish,
    RestoreRequest,
    TerminateRequest,
)
from tests.daemon.gpus.world import GpuWorld


def _checkpoint(w, uid: str) -> None:  # type: ignore[no-untyped-def]
    w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef(uid), dirs=w.dirs(uid)))


def test_the_answer_comes_before_the_release_and_the_actor_waits_out_its_release(
        make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("c1"))
    w.fake.slow("delete c1_pause")
    _checkpoint(w, "c1")
    actor = w.service.actors.get("c1")
    assert actor is not None and actor.phase is Phase.RELEASING  # answered, being reaped
    assert not actor.gone.is_set()  # its delete takes 0.5 s, after the answer
    # Terminate of a releasing actor waits until it is gone: idempotent, no refusal.
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("c1")))
    assert actor.gone.is_set() and w.service.actors.get("c1") is None
    assert not w.state_dir("c1").exists()


def test_a_restore_right_after_its_checkpoint_waits_for_the_old_sandbox(
        make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("c2"))
    w.fake.slow("delete c2_pause")
    _checkpoint(w, "c2")
    dirs = w.dirs("c2")
    os.rename(dirs.checkpoint_dir, dirs.restore_dir)
    w.service.restore_workload(RestoreRequest(actor=ActorRef("c2"), dirs=dirs))
    commands = w.fake.commands()
    # The old sandbox was deleted before the new one was restored under its id.
    assert commands.index("delete c2_pause") < commands.index("restore c2_pause")
    actor = w.service.actors.get("c2")
    assert actor is not None and actor.phase is Phase.RUNNING


def test_a_full_worker_admits_the_next_actor_once_the_checkpointed_one_is_gone(
        make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(max_actors=1)
    w.service.run_workload(w.run("a"))
    w.fake.slow("delete a_pause")
    _checkpoint(w, "a")
    w.service.run_workload(w.run("b"))  # not RESOURCE_EXHAUSTED: it waited for a's slot
    assert [x.ref.actor_uid for x in w.service.actors.snapshot()] == ["b"]


def test_the_gpus_stay_booked_until_the_release_and_the_next_actor_gets_them(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    w = GpuWorld(tmp_path)  # exclusive, 4 GPUs
    w.service.run_workload(w.run("a", GpuWish(count=4)))
    w.fake.slow("delete a_pause")
    _checkpoint(w, "a")
    assert set(w.holders().values()) == {("a",)}  # answered, still booked
    seen: list[dict[str, tuple[str, ...]]] = []
    waiter = threading.Thread(target=lambda: (w.service.run_workload(
        w.run("b", GpuWish(count=2))), seen.append(w.holders())))
    waiter.start()
    waiter.join(20)
    assert seen and sorted(seen[0].values()) == [(), (), ("b",), ("b",)]
    assert w.service.actors.get("a") is None
