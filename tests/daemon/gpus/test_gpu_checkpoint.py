"""A GPU actor's checkpoint in the lifecycle: the tool mounted, the flags passed, the
record written; a checkpoint that cannot work refused before the sandbox is touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom.daemon.actors.table import Phase
from ateom.daemon.calls.requests import (
    ActorRef,
    CheckpointRequest,
    GpuWish,
)
from ateom.daemon.gpus.checkpoint_policy import TOOL_IN_CONTAINER
from ateom.daemon.rpc.inspection import Inspector
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.record import RECORD_FILE, parse_record
from tests.support.world import (
    gpu_world,
    needs_busybox,
)

pytestmark = needs_busybox


def test_gpu_checkpoint_mounts_the_tool_passes_the_flag_and_writes_the_record(
        tmp_path: Path) -> None:
    w = gpu_world(tmp_path)
    w.service.run_workload(w.run("g", gpus=GpuWish(count=2)))
    [mount] = [m for m in w.app_config("g")["mounts"]  # type: ignore[attr-defined]
               if m["destination"] == TOOL_IN_CONTAINER]
    assert mount["source"] == str(Path(w.config.node.driver_root) / "bin" / "cuda-checkpoint")
    assert "ro" in mount["options"]
    result = w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("g"),
                                                             dirs=w.dirs("g")))
    assert RECORD_FILE in result.snapshot_files
    [argv] = [a for a in w.fake.calls() if "checkpoint" in a]
    assert f"--cuda-checkpoint-path={TOOL_IN_CONTAINER}" in argv
    assert argv.index("checkpoint") < argv.index(f"--cuda-checkpoint-path={TOOL_IN_CONTAINER}")
    record = parse_record((tmp_path / "actors/g/checkpoint" / RECORD_FILE).read_bytes()).record
    assert record.driver_version == "580.95.05" and record.runsc.version == "release-20260706.0"
    assert [g.index for g in record.gpus] == [0, 1]
    assert [(c.name, c.cdi_devices) for c in record.containers] == [
        ("app", ("nvidia.com/gpu=0", "nvidia.com/gpu=1"))]
    # Booked until the checkpointed sandbox is reaped (after the answer), then free.
    assert w.service.actors.settle(10)
    assert w.holders()["nvidia.com/gpu=0"] == ()


@pytest.mark.parametrize(("kw", "reason", "says"), [
    ({"checkpoint_flags": ()}, "runsc_cannot_save_gpu", "--cuda-checkpoint-path"),
    ({"tool": False}, "no_cuda_checkpoint", "cuda-checkpoint was not found"),
    ({"driver": "535.104.05"}, "driver_too_old", "R550"),
])
def test_a_gpu_checkpoint_that_cannot_work_is_refused_before_the_sandbox_is_touched(
        tmp_path: Path, refusals: list[tuple[str, str]], kw: dict[str, object], reason: str,
        says: str) -> None:
    w = gpu_world(tmp_path, **kw)  # type: ignore[arg-type]
    w.service.run_workload(w.run("g", gpus=GpuWish(count=1)))
    before = w.fake.commands()
    with pytest.raises(AteomError) as err:
        w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("g"), dirs=w.dirs("g")))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert says in str(err.value) and "keeps running" in str(err.value)
    assert refusals == [("checkpoint", reason)]
    assert w.fake.commands() == before  # no runsc call at all
    actor = w.service.actors.get("g")
    assert actor is not None and actor.phase is Phase.RUNNING
    assert w.holders()["nvidia.com/gpu=0"] == ("g",)  # it keeps its GPU
    status = Inspector.for_service(w.service).status()
    assert says in status.actors[0].checkpoint_blocker


def test_a_multi_gpu_actor_on_r610_needs_the_sequential_flag(tmp_path: Path) -> None:
    w = gpu_world(tmp_path, driver="610.10.01", checkpoint_flags=("cuda-checkpoint-path",))
    w.service.run_workload(w.run("g", gpus=GpuWish(count=2)))
    process = w.app_config("g")["process"]
    assert process["args"][:2] == [TOOL_IN_CONTAINER, "--launch-job"]  # type: ignore[index]
    with pytest.raises(AteomError, match="cuda-checkpoint-sequential") as err:
        w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("g"), dirs=w.dirs("g")))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION


def test_a_failed_save_that_killed_the_sandbox_terminates_the_actor_with_the_reason(
        tmp_path: Path) -> None:
    w = gpu_world(tmp_path)
    w.service.run_workload(w.run("g", gpus=GpuWish(count=1)))
    w.fake.fail("checkpoint g_pause", "state g_pause")  # failed, and state unknown after
    with pytest.raises(AteomError) as err:
        w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("g"), dirs=w.dirs("g")))
    assert "actor was lost" in str(err.value) and "boom marker" in str(err.value)
    assert err.value.code is ErrorCode.DATA_LOSS
    assert w.service.actors.get("g") is None
    assert w.holders()["nvidia.com/gpu=0"] == ()
    assert not (tmp_path / "actors/g/checkpoint" / RECORD_FILE).exists()  # never reported saved


def test_a_gpu_checkpoint_counts_device_memory_only_when_the_disk_is_tight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ateom.daemon.sandbox import save

    w = gpu_world(tmp_path)
    asked: list[str] = []

    def device_memory(actor: object) -> int:
        asked.append("nvidia-smi")
        return 1 << 30

    monkeypatch.setattr(w.service.gpus, "device_memory", device_memory)
    w.service.run_workload(w.run("g", gpus=GpuWish(count=1)))
    actor = w.service.actors.get("g")
    assert actor is not None
    bound = w.service.gpus.device_memory_bound(actor)
    assert bound == 143771 << 20  # the GPU's memory, from the inventory
    memory = 1 << 20  # the fake runsc's 1 MiB, of the app container (the root's is not asked)
    free = {"bytes": save.image_bytes_needed(memory, bound)}  # room for every GPU byte
    monkeypatch.setattr(save, "free_bytes", lambda path: (free["bytes"], path))
    request = CheckpointRequest(actor=ActorRef("g"), dirs=w.dirs("g"))
    # The save itself is not what is tested: refused, it keeps the actor.
    monkeypatch.setattr(save, "save", lambda *a, **k: (_ for _ in ()).throw(
        save.SaveRefused("stop here")))
    with pytest.raises(AteomError, match="stop here"):
        w.service.checkpoint_workload(request)
    assert asked == []  # room for every byte of its GPU: nvidia-smi not asked
    free["bytes"] -= 1  # no longer: how much does the sandbox hold?
    with pytest.raises(AteomError, match="stop here"):
        w.service.checkpoint_workload(request)
    assert asked == ["nvidia-smi"]
    free["bytes"] = save.image_bytes_needed(memory, 1 << 30) - 1  # and it does not fit
    with pytest.raises(AteomError) as err:
        w.service.checkpoint_workload(request)
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert "GPU memory 1024.0 MiB" in str(err.value)


def test_a_record_that_cannot_be_staged_is_written_after_the_save(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ateom.daemon.gpus import compat_record

    def unstageable(directory: str, record: object, *, beneath: str) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(compat_record, "stage_record", unstageable)
    w = gpu_world(tmp_path)
    w.service.run_workload(w.run("g", gpus=GpuWish(count=1)))
    result = w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("g"),
                                                             dirs=w.dirs("g")))
    assert RECORD_FILE in result.snapshot_files  # the save went on; the record came after
    assert (tmp_path / "actors/g/checkpoint" / RECORD_FILE).exists()
