"""Honest answers under faults, on the fake runsc (the argv and the decisions; the
same faults on the real newest runsc: tests/daemon/test_e2e_faults.py).

- SERVING means able to run an actor: a missing runsc, a global flag it does not
  know, an unusable --run-dir are each named, and Run is refused before any runsc
  call; mended, the next look says ready.
- A GPU actor on a worker without the NVIDIA control nodes: refused, naming them,
  before any runsc call.
- A checkpoint whose image cannot fit: RESOURCE_EXHAUSTED naming both sizes and the
  dir, before anything is paused; the actor runs on, nothing written.
- A sandbox that exits on its own: the actor exited, its GPUs back at once,
  Checkpoint refused naming the exit, counted; Terminate clears it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ateom.daemon.actors.table import Phase
from ateom.daemon.calls import sandbox_exits
from ateom.daemon.calls.requests import (
    ActorRef,
    CheckpointRequest,
    DeviceChoice,
    TerminateRequest,
)
from ateom.daemon.sandbox import save
from ateom.errors import AteomError, ErrorCode
from tests.support.world import needs_busybox

pytestmark = needs_busybox


def _refused(call, code: ErrorCode) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(AteomError) as err:
        call()
    assert err.value.code is code, err.value
    return str(err.value)


def test_a_missing_runsc_is_named_and_mended_without_a_restart(make_world,  # type: ignore[no-untyped-def]
                                                               tmp_path: Path) -> None:
    w = make_world()
    moved = tmp_path / "runsc-away"
    shutil.move(w.fake.path, moved)
    [problem] = w.service.not_ready()
    assert str(w.fake.path) in problem and "not found" in problem
    said = _refused(lambda: w.service.run_workload(w.run("a")), ErrorCode.FAILED_PRECONDITION)
    assert "not found or not executable" in said and str(w.fake.path) in said
    assert w.service.actors.get("a") is None
    shutil.move(moved, w.fake.path)
    assert w.service.not_ready() == ()
    w.service.run_workload(w.run("a"))


def test_a_global_flag_runsc_does_not_know_is_named_before_any_runsc_call(  # type: ignore[no-untyped-def]
        make_world) -> None:
    w = make_world(runsc_global_flags=("--network=none", "--netwrk=none"))
    [problem] = w.service.not_ready()
    assert "--netwrk=none" in problem and "no such flag" in problem
    said = _refused(lambda: w.service.run_workload(w.run("a")), ErrorCode.FAILED_PRECONDITION)
    assert "--netwrk=none" in said
    assert w.fake.commands() == []


def test_an_unusable_run_dir_and_actors_root_are_named(make_world, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    shutil.rmtree(w.config.run_dir, ignore_errors=True)
    Path(w.config.run_dir).write_text("a file where the run dir should be")
    os.rename(w.actors_root, tmp_path / "actors-away")
    problems = w.service.not_ready()
    assert any(p.startswith(f"--actors-root {w.actors_root}: does not exist") for p in problems)
    assert any(p.startswith("--run-dir: ") and w.config.state_root in p for p in problems)
    os.rename(tmp_path / "actors-away", w.actors_root)
    os.unlink(w.config.run_dir)
    assert w.service.not_ready() == ()  # its actors/ and logs/ made again


def test_a_gpu_actor_without_control_nodes_is_refused_before_runsc(  # type: ignore[no-untyped-def]
        make_world, refusals) -> None:
    w = make_world(fake_kw={"global_flags": ["nvproxy"]})
    os.unlink(w.tmp / "dev" / "nvidia-uvm")
    said = _refused(lambda: w.service.run_workload(w.run("g", "app", devices=DeviceChoice())),
                    ErrorCode.FAILED_PRECONDITION)
    assert str(w.tmp / "dev" / "nvidia-uvm") in said and "nvidiactl" in said
    assert w.fake.commands() == [] and w.service.actors.get("g") is None
    assert ("run", "no_control_nodes") in refusals
    w.service.run_workload(w.run("c", "app"))  # an actor without GPUs does not need them


def test_a_checkpoint_that_cannot_fit_is_refused_before_anything_is_paused(  # type: ignore[no-untyped-def]
        make_world, monkeypatch) -> None:
    w = make_world()
    w.service.run_workload(w.run("big", "app"))
    dirs = w.dirs("big")
    free, _ = save.free_bytes(dirs.checkpoint_dir)
    # The fake runsc reports 1 MiB for its app container; the margin fills the rest.
    monkeypatch.setattr(save, "IMAGE_MARGIN_BYTES", free)
    said = _refused(lambda: w.service.checkpoint_workload(
        CheckpointRequest(actor=ActorRef("big"), dirs=dirs)), ErrorCode.RESOURCE_EXHAUSTED)
    assert dirs.checkpoint_dir in said and "memory 1.0 MiB" in said and "keeps running" in said
    assert not os.path.exists(dirs.checkpoint_dir)  # nothing written
    assert not any(c.startswith("checkpoint") for c in w.fake.commands())
    # Its memory asked of the app container only: runsc puts the sandbox's there.
    assert [c for c in w.fake.commands() if c.startswith("events")] == ["events app"]
    actor = w.service.actors.get("big")
    assert actor is not None and actor.phase is Phase.RUNNING
    monkeypatch.setattr(save, "IMAGE_MARGIN_BYTES", 0)
    w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("big"), dirs=dirs))


def test_a_sandbox_exiting_on_its_own_frees_its_gpus_and_refuses_a_checkpoint(  # type: ignore[no-untyped-def]
        make_world) -> None:
    w = make_world(fake_kw={"global_flags": ["nvproxy"]}, gpu_placement="exclusive",
                   max_actors=2)
    w.service.run_workload(w.run("g", "app", devices=DeviceChoice()))
    assert w.service.gpus.pool.held_by("g")
    counted: list[str] = []
    sandbox_exits.SANDBOX_EXIT_OBSERVERS.append(counted.append)
    try:
        actor = w.service.actors.get("g")
        assert actor is not None
        w.service.actors.sandbox_exited(actor, -9)  # what the reaper reports for kill -9
    finally:
        sandbox_exits.SANDBOX_EXIT_OBSERVERS.remove(counted.append)
    assert actor.phase is Phase.EXITED and counted == ["on_its_own"]
    assert w.service.gpus.pool.held_by("g") == ()  # back at once
    # Another GPU actor gets them while the exited one is still listed.
    w.service.run_workload(w.run("h", "app", devices=DeviceChoice()))
    assert w.service.gpus.pool.held_by("h")
    said = _refused(lambda: w.service.checkpoint_workload(
        CheckpointRequest(actor=ActorRef("g"), dirs=w.dirs("g"))),
        ErrorCode.FAILED_PRECONDITION)
    assert "killed by signal 9" in said and "terminate it" in said
    assert not any(c.startswith("checkpoint") for c in w.fake.commands())
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("g")))
    assert w.service.actors.get("g") is None and w.service.gpus.pool.held_by("h")


def test_a_sandbox_that_dies_before_the_run_answers_fails_the_run_and_leaves_nothing(  # type: ignore[no-untyped-def]
        make_world, monkeypatch: pytest.MonkeyPatch) -> None:
    # The reaper sees the sandbox go between its boot and the answer: "OK" would be
    # untrue a moment later, so the Run fails naming the exit, and nothing stays.
    w = make_world(fake_kw={"global_flags": ["nvproxy"]}, gpu_placement="exclusive")
    hosting = w.service.hosting
    boot = hosting.host

    def boots_then_dies(actor, *args, **kwargs):  # type: ignore[no-untyped-def]
        boot(actor, *args, **kwargs)
        w.service.actors.sandbox_exited(actor, -9)
    monkeypatch.setattr(hosting, "host", boots_then_dies)
    said = _refused(lambda: w.service.run_workload(w.run("g", "app", devices=DeviceChoice())),
                    ErrorCode.INTERNAL)
    assert said.startswith("actor g: its sandbox exited on its own (killed by signal 9) at ")
    assert said.endswith(", before the run could answer; it was cleaned up")
    assert w.service.actors.get("g") is None and w.service.gpus.pool.held_by("g") == ()
    monkeypatch.setattr(hosting, "host", boot)
    w.service.run_workload(w.run("g", "app", devices=DeviceChoice()))  # the slot is free
