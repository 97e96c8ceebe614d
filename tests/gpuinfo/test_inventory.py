"""The pure parsers and the join of /proc and nvidia-smi facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom.gpuinfo.inventory import (
    FactConflict,
    GpuInfoError,
    ProcGpu,
    SmiGpu,
    combine,
    driver_major,
    normalize_bus_id,
    parse_driver_version,
    parse_gpu_information,
    parse_pci_device_id,
    parse_smi_query,
)
from tests.support.gpu_node import recorded_fixture

# What each recorded node is, per its PROVENANCE.md: driver, GPUs, (vendor, device), MiB.
EXPECTED = {
    "h200-8gpu": ("580.95.05", 8, (0x10DE, 0x2335), 143771, "NVIDIA H200"),
    "t4-1gpu-525": ("525.89.02", 1, (0x10DE, 0x1EB8), 15360, "Tesla T4"),
    "mixed-5090-4090": ("580.82.09", 2, (0x10DE, 0x2B85), 32607, "NVIDIA GeForce RTX 5090"),
}


def _proc(node: str) -> Path:
    return recorded_fixture(node) / "proc" / "driver" / "nvidia"


@pytest.mark.parametrize("node", sorted(EXPECTED))
def test_driver_version_of_every_recorded_node(node: str) -> None:
    assert parse_driver_version((_proc(node) / "version").read_text()) == EXPECTED[node][0]


@pytest.mark.parametrize("line, version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
     "550.54.15"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
     "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024", "565.57.01"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  595.84  Release Build", "595.84"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05", "580.95.05"),
])
def test_driver_version_variants(line: str, version: str) -> None:
    assert parse_driver_version(line + "\nGCC version:  gcc version 13.3.0 \n") == version


def test_driver_version_garbage_names_source_and_quotes_little() -> None:
    text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64 malformed " + "x" * 5000
    with pytest.raises(GpuInfoError) as err:
        parse_driver_version(text, source="/p/version")
    assert str(err.value).startswith("/p/version: ")
    assert len(str(err.value)) < 400
    assert err.value.code.name == "FAILED_PRECONDITION"


def test_driver_major() -> None:
    assert [driver_major(v) for v in ("550.54.15", "595.84", "", "abc")] == [550, 595, None,
                                                                            None]


@pytest.mark.parametrize("node", sorted(EXPECTED))
def test_information_files_of_every_recorded_node(node: str) -> None:
    gpus = [parse_gpu_information(p.read_text(), source=str(p))
            for p in sorted((_proc(node) / "gpus").glob("*/information"))]
    assert len(gpus) == EXPECTED[node][1]
    for g in gpus:
        assert (_proc(node) / "gpus" / g.pci_bus_id).is_dir()  # dir name = Bus Location
        assert g.uuid.startswith("GPU-") and not g.excluded
    assert sorted(g.minor for g in gpus) == list(range(len(gpus)))
    assert EXPECTED[node][4] in {g.name for g in gpus}


def test_information_requires_its_four_facts() -> None:
    text = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 10\nBus Location: \t 0000:59:00.0\n"
    with pytest.raises(GpuInfoError, match="no GPU UUID, Device Minor line"):
        parse_gpu_information(text, source="info")


def test_information_rejects_a_malformed_uuid_and_minor() -> None:
    base = ("Model: \t\t X\nGPU UUID: \t {uuid}\nBus Location: \t 0000:59:00.0\n"
            "Device Minor: \t {minor}\n")
    with pytest.raises(GpuInfoError, match="GPU UUID 'GPU-1234'"):
        parse_gpu_information(base.format(uuid="GPU-1234", minor=0), source="i")
    with pytest.raises(GpuInfoError, match="Device Minor '-1'"):
        uuid = "GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b"
        parse_gpu_information(base.format(uuid=uuid, minor=-1), source="i")


def test_information_excluded_gpu_and_upper_case_uuid() -> None:
    text = ("Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-9221D5D1-B60B-A624-BF14-"
            "0A1819CFDA3B\nBus Location: \t 0000:62:00.0\nDevice Minor: \t 5\n"
            "GPU Excluded:\t Yes\n")
    g = parse_gpu_information(text, source="i")
    assert g == ProcGpu("0000:62:00.0", "NVIDIA H100 80GB HBM3",
                        "GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b", 5, excluded=True)


@pytest.mark.parametrize("node", sorted(EXPECTED))
def test_smi_query_of_every_recorded_node(node: str) -> None:
    driver, count, model, memory, name = EXPECTED[node]
    rows = parse_smi_query((recorded_fixture(node) / "nvidia-smi" / "query-gpu.csv").read_text())
    assert len(rows) == count
    assert [r.index for r in rows] == list(range(count))
    assert {r.driver_version for r in rows} == {driver}
    first = next(r for r in rows if r.name == name)
    assert ((first.pci_vendor_id, first.pci_device_id), first.memory_mib) == (model, memory)


def test_smi_na_cells_and_errors() -> None:
    row = ("0, GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b, NVIDIA H100 80GB HBM3, "
           "00000000:62:00.0, [N/A], [N/A], 535.129.03\n")
    (g,) = parse_smi_query(row)
    assert (g.pci_vendor_id, g.pci_device_id, g.memory_mib) == (None, None, None)
    assert g.pci_bus_id == "0000:62:00.0"
    with pytest.raises(GpuInfoError, match="line 1: 3 fields, expected 7"):
        parse_smi_query("0, GPU-x, name\n")
    with pytest.raises(GpuInfoError, match="pci.device_id '2335'"):
        parse_smi_query(row.replace("[N/A], [N/A]", "2335, 81559"))
    with pytest.raises(GpuInfoError, match="memory.total '81559 MiB'"):
        parse_smi_query(row.replace("[N/A], [N/A]", "0x233010DE, 81559 MiB"))


def test_pci_device_id_word() -> None:
    assert parse_pci_device_id("0x233510DE", source="s") == (0x10DE, 0x2335)
    assert parse_pci_device_id("0x1df010de", source="s") == (0x10DE, 0x1DF0)
    assert parse_pci_device_id("[N/A]", source="s") is None
    with pytest.raises(GpuInfoError):
        parse_pci_device_id("0x1233510DE", source="s")


def test_bus_id_forms_compare_equal() -> None:
    assert normalize_bus_id("00000000:5A:00.0", source="s") == "0000:5a:00.0"
    assert normalize_bus_id("0000:5a:00.0", source="s") == "0000:5a:00.0"
    assert normalize_bus_id("00000001:01:00.0", source="s") == "0001:01:00.0"
    with pytest.raises(GpuInfoError, match="not DOMAIN:BUS:DEVICE.FUNCTION"):
        normalize_bus_id("5a:00.0", source="s")


UA = "GPU-00000000-0000-4000-8000-00000000000a"
UB = "GPU-00000000-0000-4000-8000-00000000000b"


def _proc_gpu(bus: str, minor: int, uuid: str, name: str = "NVIDIA H200") -> ProcGpu:
    return ProcGpu(bus, name, uuid, minor)


def _smi(index: int, bus: str, uuid: str, name: str = "NVIDIA H200",
         driver: str = "580.95.05") -> SmiGpu:
    return SmiGpu(index, uuid, name, bus, 0x10DE, 0x2335, 143771, driver)


def test_combine_joins_by_bus_and_scopes_by_minor() -> None:
    proc = [_proc_gpu("0000:72:00.0", 1, UB), _proc_gpu("0000:59:00.0", 0, UA)]
    w = combine(proc_driver="580.95.05", proc_gpus=proc, smi=[_smi(0, "0000:72:00.0", UB)],
                minors={1})
    assert [(g.index, g.minor, g.uuid, g.pci_id) for g in w.gpus] == [(0, 1, UB, "10de:2335")]
    assert w.problems == () and w.conflicts == ()


def test_combine_reports_a_disagreeing_gpu_instead_of_guessing() -> None:
    proc = [_proc_gpu("0000:59:00.0", 0, UA), _proc_gpu("0000:5a:00.0", 1, UB)]
    smi = [_smi(0, "0000:59:00.0", UB), _smi(1, "0000:5a:00.0", UB, name="NVIDIA H100")]
    w = combine(proc_driver="580.95.05", proc_gpus=proc, smi=smi, minors=None)
    assert w.gpus == ()
    assert set(w.conflicts) == {FactConflict("0000:59:00.0", "uuid", UA, UB),
                                FactConflict("0000:5a:00.0", "name", "NVIDIA H200",
                                             "NVIDIA H100")}
    assert "in /proc/driver/nvidia but" in w.conflicts[0].describe()


def test_combine_keeps_the_module_driver_and_reports_the_library_one() -> None:
    w = combine(proc_driver="580.95.05", proc_gpus=[_proc_gpu("0000:59:00.0", 0, UA)],
                smi=[_smi(0, "0000:59:00.0", UA, driver="580.105.08")], minors=None)
    assert w.driver_version == "580.95.05"
    assert w.conflicts == (FactConflict("", "driver_version", "580.95.05", "580.105.08"),)
    assert len(w.gpus) == 1


def test_combine_one_source_missing_a_gpu_leaves_it_out() -> None:
    proc = [_proc_gpu("0000:59:00.0", 0, UA)]
    w = combine(proc_driver="580.95.05", proc_gpus=proc, smi=[_smi(0, "0000:72:00.0", UB)],
                minors={0, 4})
    assert w.gpus == ()
    joined = "\n".join(w.problems)
    assert "/dev/nvidia4: no /proc/driver/nvidia/gpus entry has Device Minor 4" in joined
    assert "GPU 0000:59:00.0 (minor 0): nvidia-smi does not list it" in joined
    assert "GPU 0000:72:00.0: nvidia-smi lists it but /proc" in joined


def test_combine_without_nvidia_smi_numbers_in_pci_order() -> None:
    proc = [_proc_gpu("0000:72:00.0", 0, UB), _proc_gpu("0000:59:00.0", 3, UA)]
    w = combine(proc_driver="580.95.05", proc_gpus=proc, smi=None, minors=None)
    assert [(g.index, g.minor, g.model) for g in w.gpus] == [(0, 3, None), (1, 0, None)]


def test_combine_without_proc_takes_nvidia_smi_as_the_pods_view() -> None:
    w = combine(proc_driver="", proc_gpus=None, smi=[_smi(0, "0000:59:00.0", UA)], minors={0})
    assert [(g.minor, g.uuid) for g in w.gpus] == [(None, UA)]
    assert w.driver_version == "580.95.05"
    assert any("device minors unknown" in p for p in w.problems)
    empty = combine(proc_driver="", proc_gpus=None, smi=[_smi(0, "0000:59:00.0", UA)],
                    minors=set())
    assert empty.gpus == ()


def test_combine_leaves_out_excluded_gpus() -> None:
    excluded = ProcGpu("0000:59:00.0", "NVIDIA H200", UA, 0, excluded=True)
    w = combine(proc_driver="580.95.05", proc_gpus=[excluded], smi=None, minors=None)
    assert w.gpus == () and "GPU Excluded: Yes" in w.problems[0]


def test_compute_apps_sum_each_process_s_device_memory() -> None:
    from ateom.gpuinfo.inventory import GpuInfoError, parse_compute_apps

    # One process on two GPUs (a sandbox's sentry holds every GPU it was given).
    text = "4242, 30000\n4242, 1024\n5151, [N/A]\n"
    assert parse_compute_apps(text) == {4242: 31024, 5151: 0}
    assert parse_compute_apps("No running processes found\n") == {}
    with pytest.raises(GpuInfoError, match="line 1"):
        parse_compute_apps("pid, used_memory, extra\n")


def test_device_memory_by_pid_runs_the_query_and_says_why_not() -> None:
    from ateom.gpuinfo.gather import device_memory_by_pid
    from ateom.gpuinfo.inventory import COMPUTE_APPS_ARGS

    seen: list[list[str]] = []

    def runner(argv, *, env=None, timeout=60.0):  # type: ignore[no-untyped-def]
        seen.append(list(argv))
        return 0, "77, 512\n"

    assert device_memory_by_pid("/bin/nvidia-smi", runner) == ({77: 512}, "")
    assert seen == [["/bin/nvidia-smi", *COMPUTE_APPS_ARGS]]
    held, why = device_memory_by_pid("/bin/nvidia-smi",
                                     lambda argv, **kw: (124, "timed out"))
    assert held is None and "timed out" in why
