"""The record a GPU checkpoint carries, as the daemon uses it (`gpus.compat_record`):
written and read back beside the image, and the restore placement it implies —
FAILED_PRECONDITION when this worker never can, RESOURCE_EXHAUSTED when its GPUs are
only held, and each container's devices renamed onto the GPUs it lands on."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom.daemon.gpus import compat_record
from ateom.daemon.gpus.placement import GpuPool
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.inventory import GpuFacts, WorkerGpus
from ateom.gpuinfo.placement import GpuRequest, PlacementRefused
from ateom.gpuinfo.record import (
    RECORD_FILE,
    ContainerDevices,
    RunscBuild,
    build_record,
    write_record,
)
from ateom.runsc.probe import RunscInfo
from ateom.settings import parse_placement

INFO = RunscInfo("/usr/bin/runsc", "release-20260817.0", frozenset({"nvproxy"}))
DRIVER = "580.95.05"


def _gpu(index: int) -> GpuFacts:
    return GpuFacts(index=index, minor=index, uuid=f"GPU-{index:08d}-1111-2222-3333-444444444444",
                    name="NVIDIA H200", pci_bus_id=f"0000:{index + 16:02x}:00.0",
                    pci_vendor_id=0x10DE, pci_device_id=0x2335, memory_mib=143771)


def _pool(gpus: int) -> tuple[GpuPool, tuple[str, ...]]:
    worker = WorkerGpus(DRIVER, tuple(_gpu(i) for i in range(gpus)))
    return (GpuPool(parse_placement("exclusive"), lambda: worker),
            tuple(f"nvidia.com/gpu={i}" for i in range(gpus)))


RECORD = build_record(runsc=RunscBuild.of_version(INFO.version), driver_version=DRIVER,
                      gpus=[_gpu(0), _gpu(1)],
                      containers=[ContainerDevices("app", ("nvidia.com/gpu=0", "nvidia.com/gpu=1"),
                                                   "sha256:" + "0" * 64)])


def test_the_record_is_written_beside_the_image_and_read_back(tmp_path: Path) -> None:
    image = tmp_path / "ckpt"
    image.mkdir()
    assert compat_record.read(str(image), beneath=str(tmp_path)) is None  # a CPU checkpoint
    written = write_record(str(image), RECORD, beneath=str(tmp_path))
    assert Path(written).parent == image
    assert compat_record.read(str(image), beneath=str(tmp_path)) == RECORD


def test_the_record_is_on_disk_during_the_save_and_in_place_after_it(tmp_path: Path) -> None:
    image = tmp_path / "ckpt"
    image.mkdir()
    record = compat_record.RecordWrite(str(image), RECORD, beneath=str(tmp_path))
    record.stage()  # runsc checkpoint has started
    during = sorted(p.name for p in image.iterdir())
    (image / "checkpoint.img").write_bytes(b"state")
    files = record.commit(sorted(p.name for p in image.iterdir()))  # what the save lists
    [staged] = during
    assert staged.startswith(f".{RECORD_FILE}.")  # staged, hidden
    assert files == ("ateom-compat.json", "checkpoint.img")  # not the staged name
    assert sorted(p.name for p in image.iterdir()) == list(files)
    assert compat_record.read(str(image), beneath=str(tmp_path)) == RECORD


def test_a_failed_save_leaves_no_record_beside_its_image(tmp_path: Path) -> None:
    image = tmp_path / "ckpt"
    image.mkdir()
    record = compat_record.RecordWrite(str(image), RECORD, beneath=str(tmp_path))
    record.stage()
    (image / "checkpoint.img").write_bytes(b"half")  # then runsc checkpoint fails
    record.discard()
    assert [p.name for p in image.iterdir()] == ["checkpoint.img"]


def test_a_record_never_staged_is_written_after_the_save(tmp_path: Path) -> None:
    # A runsc that returned before the hook ran (it could not start), or a dir the
    # record could not be staged in then.
    image = tmp_path / "ckpt"
    image.mkdir()
    files = compat_record.RecordWrite(str(image), RECORD, beneath=str(tmp_path)).commit(())
    assert files == (RECORD_FILE,)
    assert compat_record.read(str(image), beneath=str(tmp_path)) == RECORD


def test_a_fitting_worker_books_free_gpus_and_renames_each_containers_devices(
        refusals: list[tuple[str, str]]) -> None:
    pool, names = _pool(4)
    pool.grant("other", GpuRequest.at_indices([0]), names)  # GPU 0 taken: land elsewhere
    granted, per_container, saved_paths = compat_record.book_saved_gpus(
        RECORD, pool, "g", INFO, names, nvproxy_capabilities="")
    assert granted == ("nvidia.com/gpu=1", "nvidia.com/gpu=2")
    # The saved GPU 1 stays in its slot; the saved GPU 0 moves to the free GPU 2, whose
    # node the container keeps seeing at the saved GPU's path.
    assert per_container == {"app": ("nvidia.com/gpu=2", "nvidia.com/gpu=1")}
    assert saved_paths == {"/dev/nvidia2": "/dev/nvidia0"}
    assert pool.held_by("g") == granted and refusals == []


def test_gpus_only_held_by_others_are_resource_exhausted_naming_the_holders(
        refusals: list[tuple[str, str]]) -> None:
    pool, names = _pool(2)
    pool.grant("other", GpuRequest.at_indices([1]), names)
    with pytest.raises(PlacementRefused) as err:
        compat_record.book_saved_gpus(RECORD, pool, "g", INFO, names, nvproxy_capabilities="")
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED  # waiting helps
    assert "nvidia.com/gpu=1 held by other" in str(err.value)
    assert refusals == [("placement", "too_few_free")] and pool.held_by("g") == ()


@pytest.mark.parametrize(("gpus", "capabilities", "field", "says"), [
    (1, "", "gpus", "GPU"),  # fewer GPUs of the model on this worker in all
    (4, "compute,utility", "nvproxy_capabilities", "compute,utility"),
])
def test_a_worker_that_never_fits_is_failed_precondition_counted_as_restore(
        refusals: list[tuple[str, str]], gpus: int, capabilities: str, field: str,
        says: str) -> None:
    pool, names = _pool(gpus)
    with pytest.raises(AteomError) as err:
        compat_record.book_saved_gpus(RECORD, pool, "g", INFO, names,
                            nvproxy_capabilities=capabilities)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION and says in str(err.value)
    assert refusals == [("restore", field)] and pool.held_by("g") == ()
