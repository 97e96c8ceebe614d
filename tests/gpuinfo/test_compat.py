"""The restore check and the placement: every refusal, the remap plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom.gpuinfo.compat import check_restore, place_restore, runsc_remaps_gpus
from ateom.gpuinfo.gather import gather_worker_gpus
from ateom.gpuinfo.inventory import GpuFacts, WorkerGpus
from ateom.gpuinfo.record import CompatRecord, ContainerDevices, RunscBuild, build_record
from tests.support.gpu_node import SimGpu, recorded_fixture, write_gpu_node, write_sim_fixture

H200, H100, T4 = 0x2335, 0x2330, 0x1EB8
NAMES = {H200: "NVIDIA H200", H100: "NVIDIA H100 80GB HBM3", T4: "Tesla T4"}
MEM = {H200: 143771, H100: 81559, T4: 15360}
RUNSC = RunscBuild("release-20260706.0")
DIGEST = "sha256:" + "0" * 64


def gpu(minor: int, node: str = "a", device: int = H200, index: int | None = None,
        memory: int | None = None, known: bool = True) -> GpuFacts:
    return GpuFacts(minor if index is None else index, minor,
                    f"GPU-{node}0000000-0000-4000-8000-{minor:012x}", NAMES[device],
                    f"0000:{0x18 + minor:02x}:00.0", 0x10DE if known else None,
                    device if known else None, (memory or MEM[device]) if known else None)


def record(gpus: list[GpuFacts], driver: str = "580.95.05",
           runsc: RunscBuild = RUNSC, caps: str = "") -> CompatRecord:
    return build_record(runsc=runsc, driver_version=driver, gpus=gpus, nvproxy_capabilities=caps,
                        containers=[ContainerDevices("app", ("nvidia.com/gpu=all",), DIGEST)])


def worker(gpus: list[GpuFacts], driver: str = "580.95.05") -> WorkerGpus:
    return WorkerGpus(driver, tuple(gpus))


def pairs(mapping: tuple) -> list[tuple[int | None, int | None]]:  # type: ignore[type-arg]
    return [(m.saved.minor, m.target.minor) for m in mapping]


EIGHT = [gpu(i) for i in range(8)]


@pytest.mark.parametrize("remap", [True, False])
def test_the_same_worker_restores_in_place(remap: bool) -> None:
    v = check_restore(record(EIGHT), worker(EIGHT), runsc_version=RUNSC,
                      runsc_supports_remap=remap)
    assert v.ok and not v.remap and v.warnings == ()
    assert pairs(v.mapping) == [(i, i) for i in range(8)]
    assert all(m.saved == m.target for m in v.mapping)


def test_a_different_driver_is_refused_naming_both() -> None:
    v = check_restore(record(EIGHT), worker(EIGHT, driver="580.105.08"), runsc_version=RUNSC,
                      runsc_supports_remap=True)
    (r,) = v.refusals
    assert (r.field, r.checkpoint, r.worker) == ("driver_version", "580.95.05", "580.105.08")
    assert r.describe().startswith("driver_version: checkpoint 580.95.05, worker 580.105.08: ")
    assert "driver 580.95.05" in r.reason and v.mapping == ()
    unknown = check_restore(record(EIGHT), worker(EIGHT, driver=""), runsc_version=RUNSC,
                            runsc_supports_remap=True)
    assert unknown.refusals[0].worker == "unknown"


@pytest.mark.parametrize("here", [
    "release-20260817.0", RunscBuild("release-20260706.0-3-gabcdef123456", "abcdef123456"),
])
def test_a_different_runsc_build_is_refused(here: RunscBuild | str) -> None:
    v = check_restore(record(EIGHT), worker(EIGHT), runsc_version=here,
                      runsc_supports_remap=True)
    (r,) = v.refusals
    assert (r.field, r.checkpoint, r.worker) == ("runsc", "release-20260706.0", str(here))


def test_the_same_runsc_tag_with_another_commit_is_refused() -> None:
    saved = RunscBuild("release-20260706.0-3-g1111111", "1111111")
    here = RunscBuild("release-20260706.0-3-g1111111", "2222222")
    v = check_restore(record(EIGHT, runsc=saved), worker(EIGHT), runsc_version=here,
                      runsc_supports_remap=True)
    assert [r.field for r in v.refusals] == ["runsc"]
    assert v.refusals[0].checkpoint.endswith("(1111111)")


def test_nvproxy_capabilities_are_compared_when_given() -> None:
    rec = record(EIGHT, caps="compute,utility")
    assert check_restore(rec, worker(EIGHT), runsc_version=RUNSC, runsc_supports_remap=True).ok
    v = check_restore(rec, worker(EIGHT), runsc_version=RUNSC, runsc_supports_remap=True,
                      nvproxy_capabilities="all")
    assert [(r.field, r.checkpoint, r.worker) for r in v.refusals] == \
        [("nvproxy_capabilities", "'compute,utility'", "'all'")]


def test_a_different_gpu_model_is_refused_naming_both() -> None:
    v = check_restore(record(EIGHT), worker([gpu(i, "b", H100) for i in range(8)]),
                      runsc_version=RUNSC, runsc_supports_remap=True)
    (r,) = v.refusals
    assert (r.field, r.checkpoint, r.worker) == \
        ("gpus", "8 x 10de:2335 NVIDIA H200", "8 x 10de:2330 NVIDIA H100 80GB HBM3")
    assert r.reason.startswith("different GPU model: no free 10de:2335 NVIDIA H200 here")


def test_fewer_gpus_are_refused() -> None:
    v = check_restore(record(EIGHT), worker([gpu(i, "b") for i in range(4)]),
                      runsc_version=RUNSC, runsc_supports_remap=True)
    (r,) = v.refusals
    assert r.worker == "4 x 10de:2335 NVIDIA H200"
    assert r.reason == ("fewer GPUs: the checkpoint needs 8 x 10de:2335 NVIDIA H200 with >= "
                        "143771 MiB, 4 such are free here")


def test_less_memory_on_the_same_chip_does_not_fit() -> None:
    smaller = [gpu(i, "b", memory=143000) for i in range(8)]
    v = check_restore(record(EIGHT), worker(smaller), runsc_version=RUNSC,
                      runsc_supports_remap=True)
    assert v.refusals[0].reason.startswith("fewer GPUs") and "0 such are free" in \
        v.refusals[0].reason


def test_unknown_pci_ids_say_why() -> None:
    v = check_restore(record(EIGHT[:1]), worker([gpu(0, known=False)]), runsc_version=RUNSC,
                      runsc_supports_remap=True)
    assert "1 free GPU(s) have unknown PCI ids or memory (did nvidia-smi fail?)" in \
        v.refusals[0].reason


def test_another_worker_with_remap_gets_a_plan() -> None:
    other = [gpu(i, "b") for i in (7, 1, 4, 0, 3, 6, 2, 5)]
    v = check_restore(record(EIGHT), worker(other), runsc_version=RUNSC,
                      runsc_supports_remap=True)
    assert v.ok and v.remap and v.warnings == ()
    assert pairs(v.mapping) == [(i, i) for i in range(8)]  # same slots, other cards
    assert all(m.saved.uuid != m.target.uuid and m.moved for m in v.mapping)


def test_remap_onto_other_cards_needs_driver_580() -> None:
    rec = record(EIGHT[:2], driver="570.133.20")
    v = check_restore(rec, worker([gpu(i, "b") for i in range(2)], driver="570.133.20"),
                      runsc_version=RUNSC, runsc_supports_remap=True)
    (r,) = v.refusals
    assert r.field == "gpus" and "cuda-checkpoint --device-map, driver R580+" in r.reason
    assert (r.checkpoint, r.worker) == ("2 x 10de:2335 NVIDIA H200 on driver 570.133.20",
                                        "0 of those very cards free")
    # The placement offers only the very cards then: one of them is free here.
    p = place_restore(rec, [gpu(1, "b"), EIGHT[1], gpu(0, "b")], runsc_supports_remap=True)
    assert [g.uuid for g in p.eligible] == [EIGHT[1].uuid] and not p.ok


def test_remap_of_the_same_cards_to_other_minors_needs_no_device_map() -> None:
    rec = record([gpu(0), gpu(1)], driver="570.133.20")
    renumbered = [GpuFacts(g.index, 1 - (g.minor or 0), g.uuid, g.name, g.pci_bus_id,
                           g.pci_vendor_id, g.pci_device_id, g.memory_mib) for g in rec.gpus]
    v = check_restore(rec, worker(renumbered, driver="570.133.20"), runsc_version=RUNSC,
                      runsc_supports_remap=True)
    assert v.ok and v.remap
    assert [(m.saved.uuid == m.target.uuid, m.saved.minor, m.target.minor) for m in v.mapping] \
        == [(True, 0, 1), (True, 1, 0)]


def test_without_remap_the_same_minors_on_other_cards_pass_with_a_warning() -> None:
    v = check_restore(record(EIGHT[:2]), worker([gpu(i, "b") for i in range(8)]),
                      runsc_version=RUNSC, runsc_supports_remap=False)
    assert v.ok and not v.remap
    assert pairs(v.mapping) == [(0, 0), (1, 1)]
    assert len(v.warnings) == 2 and "another card of the same model" in v.warnings[0]


def test_without_remap_other_minors_are_refused() -> None:
    rec = record([gpu(2), gpu(3)])
    free = [gpu(0, "b"), gpu(1, "b"), gpu(3, "b", T4)]
    p = place_restore(rec, free + [gpu(9, "b")], runsc_supports_remap=False)
    assert [(r.checkpoint.split(" (")[0], r.worker) for r in p.refusals] == [
        ("GPU 2", "minor 2: not free or absent"),
        ("GPU 3", "minor 3: GPU 3 (minor 3, GPU-b0000000-0000-4000-8000-000000000003, "
                  "10de:1eb8 Tesla T4)")]
    assert "needs release-20260706.0 or later" in p.refusals[0].reason
    assert place_restore(rec, free + [gpu(9, "b")], runsc_supports_remap=True).ok


def test_placement_among_free_gpus_prefers_the_same_cards_then_slots() -> None:
    rec = record([gpu(2), gpu(5)])
    here = [gpu(i) for i in range(8)]
    free = [here[i] for i in (0, 1, 5, 6)]  # 2 is taken; 5 is the very card
    p = place_restore(rec, free, runsc_supports_remap=True)
    assert p.ok and p.needed == 2 and p.remap
    assert [g.minor for g in p.eligible] == [5, 0, 1, 6]
    assert pairs(p.mapping) == [(2, 0), (5, 5)]
    assert check_restore(rec, worker(here), runsc_version=RUNSC, runsc_supports_remap=True,
                         free=free).mapping == p.mapping
    blocked = place_restore(rec, free, runsc_supports_remap=False)
    assert [r.worker for r in blocked.refusals] == ["minor 2: not free or absent"]


def test_placement_ignores_gpus_listed_twice() -> None:
    p = place_restore(record(EIGHT[:2]), [gpu(0), gpu(0)], runsc_supports_remap=True)
    assert p.refusals[0].reason.startswith("fewer GPUs") and "1 such are free" in \
        p.refusals[0].reason


def test_mixed_models_restore_only_onto_the_very_cards() -> None:
    mixed = [gpu(0, "c", H200), gpu(1, "c", T4)]
    rec = record(mixed)
    assert check_restore(rec, worker(mixed), runsc_version=RUNSC,
                         runsc_supports_remap=True).ok
    other = [gpu(0, "d", H200), gpu(1, "d", T4)]
    v = check_restore(rec, worker(other), runsc_version=RUNSC, runsc_supports_remap=True)
    assert [r.field for r in v.refusals] == ["gpus"]
    assert "runsc remaps only between identical GPUs" in v.refusals[0].reason
    swapped = [gpu(1, "c", H200), gpu(0, "c", T4)]
    assert not place_restore(rec, swapped, runsc_supports_remap=True).ok
    old_runsc = check_restore(rec, worker(other), runsc_version=RUNSC,
                              runsc_supports_remap=False)
    assert old_runsc.ok and len(old_runsc.warnings) == 2


def test_a_record_without_gpus_fits_anywhere() -> None:
    v = check_restore(record([]), worker([]), runsc_version=RUNSC, runsc_supports_remap=False)
    assert v.ok and v.mapping == ()


def test_the_refusal_as_an_error() -> None:
    v = check_restore(record(EIGHT), worker([gpu(0, "b", T4)], driver="525.89.02"),
                      runsc_version="release-20221219.0", runsc_supports_remap=False)
    assert [r.field for r in v.refusals] == ["driver_version", "runsc", "gpus"]
    err = v.error()
    assert err.code.name == "FAILED_PRECONDITION"
    assert str(err).startswith("GPU checkpoint cannot be restored on this worker: "
                               "driver_version: checkpoint 580.95.05, worker 525.89.02")
    assert "runsc: checkpoint release-20260706.0, worker release-20221219.0" in str(err)


def test_simulated_nodes_end_to_end(tmp_path: Path) -> None:
    """Checkpoint on minors 2, 3 of one recorded H200 node; restore on another node."""
    first = write_gpu_node(tmp_path / "n1", recorded_fixture("h200-8gpu"), pod_minors=[2, 3])
    saved = gather_worker_gpus(proc_root=first.proc_root, gpu_glob=first.gpu_glob,
                               nvidia_smi=first.nvidia_smi)
    rec = record(list(saved.gpus), driver=saved.driver_version)
    sims = [SimGpu(i, i, f"GPU-e0000000-0000-4000-8000-{i:012x}") for i in range(4)]
    second = write_gpu_node(tmp_path / "n2", write_sim_fixture(tmp_path / "fx", sims),
                            pod_minors=[0, 1])
    here = gather_worker_gpus(proc_root=second.proc_root, gpu_glob=second.gpu_glob,
                              nvidia_smi=second.nvidia_smi)
    v = check_restore(rec, here, runsc_version=RUNSC, runsc_supports_remap=True)
    assert v.ok and v.remap and pairs(v.mapping) == [(2, 0), (3, 1)]
    old = check_restore(rec, here, runsc_version=RUNSC, runsc_supports_remap=False)
    assert [r.worker for r in old.refusals] == ["minor 2: not free or absent",
                                                "minor 3: not free or absent"]


@pytest.mark.parametrize("version, remaps", [
    ("release-20260706.0", True), ("release-20260817.0", True),
    ("release-20260706.0-45-gabcdef123456", True), ("release-20260608.0", False),
    ("0.0~20221219.0", False), ("VERSION_MISSING", None), ("9f3c2a1", None),
])
def test_which_runsc_remaps(version: str, remaps: bool | None) -> None:
    assert runsc_remaps_gpus(RunscBuild(version)) is remaps
