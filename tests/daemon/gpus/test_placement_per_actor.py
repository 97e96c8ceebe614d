"""Placement per actor in the lifecycle: exclusive and shared GPUs, concurrent Runs,
a container naming a GPU its actor was not given (fake runsc argv, simulated node)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from ateom.daemon.calls.requests import (
    ActorRef,
    CheckpointRequest,
    DeviceChoice,
    DevicePolicy,
    GpuWish,
    RunRequest,
    TerminateRequest,
)
from ateom.daemon.rpc.inspection import Inspector
from ateom.errors import AteomError, ErrorCode
from tests.support.world import (
    gpu_nodes,
    gpu_world,
    needs_busybox,
    restore_actor,
)

pytestmark = needs_busybox


def test_exclusive_actors_get_distinct_gpus_and_a_full_pod_names_holders(
        tmp_path: Path, refusals: list[tuple[str, str]]) -> None:
    w = gpu_world(tmp_path)
    for uid in ("a", "b"):
        w.service.run_workload(w.run(uid, gpus=GpuWish(count=2)))
    assert w.holders() == {"nvidia.com/gpu=0": ("a",), "nvidia.com/gpu=1": ("a",),
                           "nvidia.com/gpu=2": ("b",), "nvidia.com/gpu=3": ("b",)}
    # Each container sees exactly its actor's GPUs.
    def nodes(uid: str) -> list[str]:
        return gpu_nodes(w.app_config(uid))

    assert nodes("a") == ["/dev/nvidia0", "/dev/nvidia1"]
    assert nodes("b") == ["/dev/nvidia2", "/dev/nvidia3"]
    with pytest.raises(AteomError) as err:
        w.service.run_workload(w.run("c", gpus=GpuWish(count=1)))
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert "held by a" in str(err.value) and "held by b" in str(err.value)
    assert refusals == [("placement", "too_few_free")]
    assert w.service.actors.get("c") is None and not (tmp_path / "run" / "bundles" / "c").exists()
    # Terminate frees at once; the refused actor now fits.
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("a")))
    w.service.run_workload(w.run("c", gpus=GpuWish(count=1)))
    assert w.holders()["nvidia.com/gpu=0"] == ("c",)
    status = Inspector.for_service(w.service).status()
    assert status.gpu_placement == "exclusive"
    assert {a.ref.actor_uid: a.gpus for a in status.actors} == {
        "b": ("nvidia.com/gpu=2", "nvidia.com/gpu=3"), "c": ("nvidia.com/gpu=0",)}


def test_concurrent_runs_never_share_a_gpu_in_exclusive_mode(tmp_path: Path) -> None:
    w = gpu_world(tmp_path)
    requests = [w.run(f"r{i}", gpus=GpuWish(count=1)) for i in range(6)]
    outcomes: dict[str, str] = {}

    def run(req: RunRequest) -> None:
        try:
            w.service.run_workload(req)
            outcomes[req.actor.actor_uid] = "ok"
        except AteomError as exc:
            outcomes[req.actor.actor_uid] = exc.code.name

    threads = [threading.Thread(target=run, args=(r,)) for r in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes.values()) == ["OK"] * 0 + ["RESOURCE_EXHAUSTED"] * 2 + ["ok"] * 4
    held = [h for hs in w.holders().values() for h in hs]
    assert sorted(held) == sorted(u for u, o in outcomes.items() if o == "ok")
    assert len(set(held)) == len(held) == 4


def test_a_container_may_not_name_a_gpu_its_actor_was_not_given(tmp_path: Path) -> None:
    w = gpu_world(tmp_path)
    w.service.run_workload(w.run("a", gpus=GpuWish(count=1)))
    explicit = DeviceChoice(DevicePolicy.EXPLICIT, ("nvidia.com/gpu=0",))
    with pytest.raises(AteomError) as err:
        w.service.run_workload(w.run("b", gpus=GpuWish(names=("nvidia.com/gpu=1",)),
                                     devices=explicit))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "nvidia.com/gpu=0" in str(err.value) and "not one of this actor's GPUs" in str(
        err.value)
    assert w.holders()["nvidia.com/gpu=1"] == ()  # released with the failed Run


def test_shared_mode_gives_every_actor_every_gpu(tmp_path: Path) -> None:
    w = gpu_world(tmp_path, placement="shared:2")
    w.service.run_workload(w.run("a"))
    w.service.run_workload(w.run("b"))
    assert set(w.holders().values()) == {("a", "b")}
    with pytest.raises(AteomError) as err:
        w.service.run_workload(w.run("c"))
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED


def test_many_concurrent_run_checkpoint_restore_cycles_never_share_a_gpu(tmp_path: Path) -> None:
    """An 8-GPU Pod, exclusive: 12 one-GPU actors cycle Run -> Checkpoint -> Restore
    at once; a watcher checks at every step that no GPU has two holders; at the end
    every GPU is free (release is total)."""
    w = gpu_world(tmp_path, gpus=8, max_actors=12)
    stop = threading.Event()
    violations: list[str] = []

    def watch() -> None:
        while not stop.is_set():
            snapshot = w.service.placement_snapshot()
            for h in snapshot.gpus if snapshot else ():
                if len(h.holders) > 1:
                    violations.append(f"{h.gpu.name} held by {h.holders}")

    outcomes: dict[str, list[str]] = {}

    def cycle(uid: str) -> None:
        done = outcomes.setdefault(uid, [])
        for _ in range(2):
            try:
                w.service.run_workload(w.run(uid, gpus=GpuWish(count=1)))
                w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef(uid),
                                                                dirs=w.dirs(uid)))
                shutil.rmtree(w.actors_root / uid / "restore", ignore_errors=True)
                os.rename(w.actors_root / uid / "checkpoint", w.actors_root / uid / "restore")
                restore_actor(w, uid)
                w.service.terminate_workload(TerminateRequest(actor=ActorRef(uid)))
                done.append("ok")
            except AteomError as exc:
                done.append(exc.code.name)
                w.service.terminate_workload(TerminateRequest(actor=ActorRef(uid)))

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=cycle, args=(f"c{i}",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    stop.set()
    watcher.join(10)
    assert not violations, violations[:5]
    results = [r for rs in outcomes.values() for r in rs]
    assert set(results) <= {"ok", "RESOURCE_EXHAUSTED"} and results.count("ok") >= 8  # waits
    snapshot = w.service.placement_snapshot()
    assert snapshot is not None and all(not h.holders for h in snapshot.gpus)
    assert not w.service.actors.snapshot()
