"""A checkpoint is answered once the image is complete; the stopped sandbox is reaped
after, on a thread of its own. Meanwhile the actor is RELEASING: a call for it waits
until it is gone instead of being refused (the fake runsc's `delete` is made slow or
held to keep the release open); its slot and its GPUs go to the next actor as soon
as its sandbox's processes have exited, before the rest of the release (a real
process stands in for the sandbox the fake runsc does not start).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ateom.daemon.actors.table import Phase
from ateom.daemon.calls import answer
from ateom.daemon.calls.requests import (
    ActorRef,
    CheckpointRequest,
    GpuWish,
    RestoreRequest,
    TerminateRequest,
)
from ateom.daemon.lifecycle import release
from ateom.daemon.sandbox import teardown
from ateom.errors import AteomError, ErrorCode
from ateom.process.exits import alive
from tests.support.world import gpu_world, restore_actor


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
    assert not actor.succession.gone.is_set()  # its delete takes 0.5 s, after the answer
    # Terminate of a releasing actor waits until it is gone: idempotent, no refusal.
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("c1")))
    assert actor.succession.gone.is_set() and w.service.actors.get("c1") is None
    assert not w.state_dir("c1").exists()


def test_a_restore_right_after_its_checkpoint_waits_for_the_old_sandbox(
        make_world, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The old sandbox's release lets the starts in flight go first, and this
    # restore is one, waiting for that release: set aside, it does not hold it.
    monkeypatch.setattr(release, "START_YIELD_LIMIT", 60.0)
    w = make_world()
    w.service.run_workload(w.run("c2"))
    w.fake.slow("delete c2_pause")
    _checkpoint(w, "c2")
    dirs = w.dirs("c2")
    os.rename(dirs.checkpoint_dir, dirs.restore_dir)
    restore = threading.Thread(target=w.service.restore_workload,
                               args=(RestoreRequest(actor=ActorRef("c2"), dirs=dirs),))
    restore.start()
    restore.join(30)
    assert not restore.is_alive(), "the restore and its own old release waited for each other"
    commands = w.fake.commands()
    # The old sandbox was deleted before the new one was restored under its id.
    assert commands.index("delete c2_pause") < commands.index("restore c2_pause")
    actor = w.service.actors.get("c2")
    assert actor is not None and actor.phase is Phase.RUNNING


@pytest.fixture
def sandbox_of_a(monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen[bytes]]:
    """A real process listed as actor a's sandbox (``--root=<state root>/a``) while it
    runs, which the release's kill does not end at once: a checkpointed sandbox
    the kernel is slow to tear down. It exits when the test kills it."""
    proc = subprocess.Popen(["sleep", "60"])
    real = teardown.sandbox_processes
    monkeypatch.setattr(teardown, "sandbox_processes", lambda root: (
        [proc.pid] if Path(root).name == "a" and alive(proc.pid) else real(root)))
    # The fake runsc starts no sandbox: a's only "process" is this one, which outlives the kill.
    monkeypatch.setattr(teardown.StoppedSandbox, "kill", lambda self: None)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _run_in_thread(w, req) -> tuple[threading.Thread, list[object]]:  # type: ignore[no-untyped-def]
    """Run `req` on a thread; what it saw (the holders, a's phase) once it answered."""
    seen: list[object] = []

    def run() -> None:
        w.service.run_workload(req)
        a = w.service.actors.get("a")
        gpu_worker = w.service.placement_snapshot() is not None
        seen.append((w.holders() if gpu_worker else None,
                     a.phase if a is not None else None))
    thread = threading.Thread(target=run)
    thread.start()
    return thread, seen


def test_a_full_worker_admits_the_next_actor_once_the_checkpointed_sandbox_exited(
        make_world, sandbox_of_a, tmp_path) -> None:  # type: ignore[no-untyped-def]
    w = make_world(max_actors=1)
    w.service.run_workload(w.run("a"))
    gate = tmp_path / "let-a-delete-finish"
    w.fake.hold("delete a_pause", gate)
    _checkpoint(w, "a")
    thread, seen = _run_in_thread(w, w.run("b"))
    thread.join(0.5)
    assert thread.is_alive() and not seen  # a's sandbox still runs: a holds the slot
    sandbox_of_a.kill()
    thread.join(20)
    # b ran (not RESOURCE_EXHAUSTED) while a's delete was still held: a was RELEASING.
    assert seen == [(None, Phase.RELEASING)]
    gate.touch()
    assert w.service.actors.settle(20)
    assert [x.ref.actor_uid for x in w.service.actors.snapshot()] == ["b"]


def test_the_gpus_go_to_the_next_actor_at_once_and_its_app_waits_for_the_sandbox_to_exit(
        tmp_path, sandbox_of_a) -> None:  # type: ignore[no-untyped-def]
    w = gpu_world(tmp_path)  # exclusive, 4 GPUs
    w.service.run_workload(w.run("a", gpus=GpuWish(count=4)))
    gate = tmp_path / "let-a-delete-finish"
    w.fake.hold("delete a_pause", gate)
    _checkpoint(w, "a")
    a = w.service.actors.get("a")
    assert a is not None and a.phase is Phase.RELEASING
    assert set(w.holders().values()) == {()}  # yielded with the answer
    thread, seen = _run_in_thread(w, w.run("b", gpus=GpuWish(count=2)))
    _wait_for(w, "start b_pause")  # b's sandbox root boots while a's sandbox exits
    assert sorted(w.holders().values()) == [(), (), ("b",), ("b",)]
    time.sleep(0.3)
    assert thread.is_alive() and not seen
    assert w.fake.commands().count("create app") == 1  # a's; b's app (the GPUs) waits
    sandbox_of_a.kill()
    thread.join(20)
    assert seen, "b's Run never answered"
    commands = w.fake.commands()
    assert commands.count("create app") == 2
    assert commands.index("start b_pause") < len(commands) - commands[::-1].index("create app")
    holders, a_phase = seen[0]  # type: ignore[misc]
    assert sorted(holders.values()) == [(), (), ("b",), ("b",)]
    assert a_phase is Phase.RELEASING  # its delete still held: the rest of its release
    gate.touch()
    assert w.service.actors.settle(20) and w.service.actors.get("a") is None


def test_a_restore_on_yielded_gpus_waits_for_the_sandbox_before_its_root(
        tmp_path, sandbox_of_a) -> None:  # type: ignore[no-untyped-def]
    w = gpu_world(tmp_path)
    w.service.run_workload(w.run("c", gpus=GpuWish(count=1)))
    _checkpoint(w, "c")  # its record: GPU 0
    assert w.service.actors.settle(20)
    dirs = w.dirs("c")
    os.rename(dirs.checkpoint_dir, dirs.restore_dir)
    w.service.run_workload(w.run("a", gpus=GpuWish(count=4)))
    _checkpoint(w, "a")
    restore = threading.Thread(target=restore_actor, args=(w, "c"))
    restore.start()
    restore.join(0.5)
    # A restore's root brings the sandbox's memory (and GPU state) back: nothing
    # of it is restored before the sandbox whose GPU it took has exited.
    assert restore.is_alive() and "restore c_pause" not in w.fake.commands()
    sandbox_of_a.kill()
    restore.join(20)
    assert not restore.is_alive() and "restore c_pause" in w.fake.commands()
    assert w.service.actors.settle(20)


def test_an_actor_that_took_nothing_of_a_releasing_one_does_not_wait_for_it(
        tmp_path, sandbox_of_a) -> None:  # type: ignore[no-untyped-def]
    w = gpu_world(tmp_path)  # exclusive, 4 GPUs, 8 slots
    w.service.run_workload(w.run("a", gpus=GpuWish(names=("nvidia.com/gpu=0", "nvidia.com/gpu=1"))))
    _checkpoint(w, "a")  # its sandbox (the stand-in) keeps exiting until the test ends
    w.service.run_workload(w.run("b", gpus=GpuWish(names=("nvidia.com/gpu=2", "nvidia.com/gpu=3"))))
    b = w.service.actors.get("b")
    assert b is not None and b.phase is Phase.RUNNING and sandbox_of_a.poll() is None
    sandbox_of_a.kill()
    assert w.service.actors.settle(20)  # no release left running into the next test


def test_a_run_whose_predecessor_never_exits_is_unavailable_and_keeps_nothing(
        tmp_path, sandbox_of_a) -> None:  # type: ignore[no-untyped-def]
    w = gpu_world(tmp_path)  # exclusive, 4 GPUs
    w.service.hosting.config = dataclasses.replace(w.service.hosting.config, lock_wait=0.3)
    w.service.run_workload(w.run("a", gpus=GpuWish(count=4)))
    _checkpoint(w, "a")  # its sandbox (the stand-in) does not exit
    with pytest.raises(AteomError) as err:
        w.service.run_workload(w.run("b", gpus=GpuWish(count=2)))
    assert err.value.code is ErrorCode.UNAVAILABLE
    assert "actor b: the slot or GPUs of actor a, whose sandbox is still exiting" in str(err.value)
    assert w.service.actors.get("b") is None and set(w.holders().values()) == {()}
    sandbox_of_a.kill()
    assert w.service.actors.settle(20)


def _wait_for(w, command: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(1000):
        if command in w.fake.commands():
            return
        time.sleep(0.01)
    raise AssertionError(f"{command} never ran: {w.fake.commands()}")


def test_the_rest_of_a_release_waits_until_the_run_that_took_its_slot_has_booted(
        make_world, sandbox_of_a, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a's runsc deletes are bookkeeping: run beside b's boot they took its cores.
    w = make_world(max_actors=1)
    w.service.run_workload(w.run("a"))
    _checkpoint(w, "a")
    gate = tmp_path / "let-b-start-finish"
    w.fake.hold("start b_pause", gate)
    thread, seen = _run_in_thread(w, w.run("b"))
    sandbox_of_a.kill()  # a's slot goes to b
    _wait_for(w, "start b_pause")  # b is booting on a's slot
    time.sleep(0.3)
    assert "delete a_pause" not in w.fake.commands()
    a = w.service.actors.get("a")
    assert a is not None and a.phase is Phase.RELEASING
    gate.touch()
    thread.join(20)
    assert seen, "b's Run never answered"
    assert w.service.actors.settle(20) and w.service.actors.get("a") is None
    commands = w.fake.commands()
    assert commands.index("start b_pause") < commands.index("delete a_pause")


def test_the_stopped_sandbox_is_killed_before_the_checkpoint_answers(
        make_world, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("k"))
    sandbox = subprocess.Popen(["sleep", "60"])  # listed as k's sandbox while it runs
    real = teardown.sandbox_processes
    monkeypatch.setattr(teardown, "sandbox_processes", lambda root: (
        [sandbox.pid] if Path(root).name == "k" and alive(sandbox.pid) else real(root)))
    later: list[Callable[[], None]] = []
    monkeypatch.setattr(answer, "after_answer", later.append)  # the release waits for us
    try:
        _checkpoint(w, "k")
        assert sandbox.wait(5) == -9  # killed in the call, not by its release
    finally:
        sandbox.kill()
        sandbox.wait()
    for start in later:
        start()
    assert w.service.actors.settle(20) and w.service.actors.get("k") is None


def test_a_refused_save_kills_nothing(make_world, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("r"))
    sandbox = subprocess.Popen(["sleep", "60"])
    real = teardown.sandbox_processes
    monkeypatch.setattr(teardown, "sandbox_processes", lambda root: (
        [sandbox.pid] if Path(root).name == "r" and alive(sandbox.pid) else real(root)))
    w.fake.fail("checkpoint r_pause")  # runsc refuses, the sandbox still runs
    try:
        with pytest.raises(AteomError, match="keeps running"):
            _checkpoint(w, "r")
        assert sandbox.poll() is None  # listed while runsc tried, not killed
        actor = w.service.actors.get("r")
        assert actor is not None and actor.phase is Phase.RUNNING
    finally:
        sandbox.kill()
        sandbox.wait()
