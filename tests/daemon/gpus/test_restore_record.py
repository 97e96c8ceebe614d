"""A GPU restore in the lifecycle, checked against the checkpoint's compatibility
record first: where it lands, what it waits for, what refuses it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ateom.daemon.calls.requests import (
    ActorRef,
    CheckpointRequest,
    GpuWish,
    TerminateRequest,
)
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.record import RECORD_FILE
from tests.support.spec import STAND_IN_DEVICES
from tests.support.world import (
    checkpointed,
    gpu_world,
    needs_busybox,
    restore_actor,
)

pytestmark = needs_busybox


def _host_nodes(config: dict[str, object]) -> dict[str, tuple[int, int]]:
    """Each GPU node's container path -> the host node's (major, minor) it stands for."""
    devices = config["linux"]["devices"]  # type: ignore[index]
    return {str(d["path"]): (d["major"], d["minor"]) for d in devices
            if str(d["path"])[-1].isdigit()}


def _stand_in(index: int) -> tuple[int, int]:
    """The host node the simulated spec gives GPU `index` (tests.support.spec)."""
    st = os.stat(STAND_IN_DEVICES[index % len(STAND_IN_DEVICES)])
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def test_restore_lands_on_free_gpus_matching_the_record(tmp_path: Path) -> None:
    w = gpu_world(tmp_path)  # release-20260706.0: remaps
    checkpointed(w, "g", 2)  # held gpu=0,1 when saved
    w.service.run_workload(w.run("other", gpus=GpuWish(count=1)))  # takes gpu=0 meanwhile
    restore_actor(w, "g")
    assert w.holders()["nvidia.com/gpu=0"] == ("other",)
    held = sorted(n for n, h in w.holders().items() if h == ("g",))
    assert len(held) == 2 and "nvidia.com/gpu=0" not in held
    # runsc checks a restore's devices by path: the sandbox keeps seeing its GPUs where
    # it was saved, each path now the node of the GPU it landed on (nvproxy remaps).
    nodes = _host_nodes(w.app_config("g"))
    assert sorted(nodes) == ["/dev/nvidia0", "/dev/nvidia1"]
    assert sorted(nodes.values()) == sorted(_stand_in(int(n[-1])) for n in held)


def test_a_sandbox_restored_onto_other_gpus_keeps_its_paths_turn_after_turn(
        tmp_path: Path) -> None:
    """Saved on GPU 0, restored onto GPU 1 (GPU 0 taken), saved again, restored onto
    GPU 2: its container sees /dev/nvidia0 every time, the record saying so."""
    w = gpu_world(tmp_path)
    checkpointed(w, "g", 1)
    w.service.run_workload(w.run("b0", gpus=GpuWish(count=1)))  # takes GPU 0
    restore_actor(w, "g")
    assert _host_nodes(w.app_config("g")) == {"/dev/nvidia0": _stand_in(1)}
    w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("g"), dirs=w.dirs("g")))
    assert w.service.actors.settle(10)
    dirs = w.dirs("g")
    saved = json.loads((Path(dirs.checkpoint_dir) / RECORD_FILE).read_text())
    assert [g["minor"] for g in saved["gpus"]] == [0]  # as its containers see it
    shutil.rmtree(dirs.restore_dir, ignore_errors=True)
    os.rename(dirs.checkpoint_dir, dirs.restore_dir)
    w.service.run_workload(w.run("b1", gpus=GpuWish(count=1)))  # takes GPU 1
    restore_actor(w, "g")
    assert w.holders()["nvidia.com/gpu=2"] == ("g",)
    assert _host_nodes(w.app_config("g")) == {"/dev/nvidia0": _stand_in(2)}


def test_restore_without_remap_needs_the_same_gpus(tmp_path: Path) -> None:
    w = gpu_world(tmp_path, version="release-20260608.0")
    checkpointed(w, "g", 1)
    w.service.run_workload(w.run("other", gpus=GpuWish(count=1)))  # takes gpu=0, g's
    with pytest.raises(AteomError) as err:
        restore_actor(w, "g")
    assert err.value.code in (ErrorCode.FAILED_PRECONDITION, ErrorCode.RESOURCE_EXHAUSTED)
    assert w.service.actors.get("g") is None


def test_a_restore_whose_gpus_are_held_waits_its_turn(tmp_path: Path,
                                                     refusals: list[tuple[str, str]]) -> None:
    """The worker fits the checkpoint, but other actors hold the GPUs it needs:
    RESOURCE_EXHAUSTED naming them (waiting helps), not a refusal of the record."""
    w = gpu_world(tmp_path)
    checkpointed(w, "g", 2)
    for uid in ("x", "y", "z"):
        w.service.run_workload(w.run(uid, gpus=GpuWish(count=1)))
    with pytest.raises(AteomError) as err:
        restore_actor(w, "g")
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert "held by x" in str(err.value) and "held by z" in str(err.value)
    assert refusals == [("placement", "too_few_free")]
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("y")))
    restore_actor(w, "g")  # its turn now
    assert len([n for n, h in w.holders().items() if h == ("g",)]) == 2


@pytest.mark.parametrize(("field", "change"), [
    ("driver_version", lambda r: {**r, "driver_version": "575.1.1"}),
    ("runsc", lambda r: {**r, "runsc": {"version": "release-20260817.0", "commit": ""}}),
    ("gpus", lambda r: {**r, "gpus": [{**g, "pci_device_id": "0x2330"} for g in r["gpus"]]}),
])
def test_restore_refuses_a_record_this_worker_does_not_match_before_any_runsc_call(
        tmp_path: Path, refusals: list[tuple[str, str]], field: str, change: object) -> None:
    w = gpu_world(tmp_path)
    restore = checkpointed(w, "g", 1)
    path = restore / RECORD_FILE
    path.write_text(json.dumps(change(json.loads(path.read_text()))))  # type: ignore[operator]
    calls = len(w.fake.calls())
    with pytest.raises(AteomError) as err:
        restore_actor(w, "g")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION and field in str(err.value)
    assert len(w.fake.calls()) == calls
    assert refusals == [("restore", field)]
    assert w.service.actors.get("g") is None and all(h == () for h in w.holders().values())


@pytest.mark.parametrize("content", [b"", b"{", b'{"format_version": "9.0"}'])
def test_a_corrupt_or_newer_record_is_refused_clearly(tmp_path: Path, content: bytes) -> None:
    w = gpu_world(tmp_path)
    restore = checkpointed(w, "g", 1)
    (restore / RECORD_FILE).write_bytes(content)
    with pytest.raises(AteomError) as err:
        restore_actor(w, "g")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION and RECORD_FILE in str(err.value)
    assert w.service.actors.get("g") is None
