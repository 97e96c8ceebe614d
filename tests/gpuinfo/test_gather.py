"""The gatherer on simulated GPU nodes (recorded fixtures, a misbehaving nvidia-smi)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from ateom.gpuinfo.gather import device_minors, find_nvidia_smi, gather_worker_gpus
from ateom.gpuinfo.inventory import parse_smi_query
from tests.support.gpu_node import (
    SimGpu,
    recorded_fixture,
    write_gpu_node,
    write_sim_fixture,
)


def test_every_recorded_node_gathers_whole(recorded: Path, tmp_path: Path) -> None:
    node = write_gpu_node(tmp_path, recorded)
    w = gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                           nvidia_smi=node.nvidia_smi)
    rows = parse_smi_query((recorded / "nvidia-smi" / "query-gpu.csv").read_text())
    assert w.problems == () and w.conflicts == ()
    assert w.driver_version == rows[0].driver_version
    assert [(g.index, g.uuid, g.model, g.memory_mib) for g in w.gpus] == \
        [(r.index, r.uuid, (r.pci_vendor_id, r.pci_device_id), r.memory_mib) for r in rows]
    assert sorted(g.minor for g in w.gpus) == list(range(len(rows)))


def test_only_the_pods_gpus(tmp_path: Path) -> None:
    node = write_gpu_node(tmp_path, recorded_fixture("h200-8gpu"), pod_minors=[5, 2])
    w = gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                           nvidia_smi=node.nvidia_smi)
    # NVML in the Pod numbers its two GPUs 0 and 1; the minors stay the host's.
    assert [(g.index, g.minor, g.pci_bus_id) for g in w.gpus] == \
        [(0, 2, "0000:72:00.0"), (1, 5, "0000:8c:00.0")]
    assert w.problems == ()


def test_a_hanging_nvidia_smi_costs_its_timeout_and_leaves_proc_facts(tmp_path: Path) -> None:
    node = write_gpu_node(tmp_path, recorded_fixture("t4-1gpu-525"), smi="hang")
    w = gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                           nvidia_smi=node.nvidia_smi, smi_timeout=0.5)
    assert [(g.uuid, g.minor, g.model, g.memory_mib) for g in w.gpus] == \
        [("GPU-b0000000-0000-4000-8000-000000000000", 0, None, None)]
    assert w.driver_version == "525.89.02"
    assert w.problems == (f"{node.nvidia_smi}: timed out after 0.5s; PCI ids and memory "
                          f"unknown",)


@pytest.mark.parametrize("smi, says", [
    ("missing", "not run ("), ("fail", "exit 9: \"NVIDIA-SMI has failed because it couldn't"),
])
def test_a_missing_or_failing_nvidia_smi_is_a_problem_not_an_error(
        tmp_path: Path, smi: str, says: str) -> None:
    node = write_gpu_node(tmp_path, recorded_fixture("mixed-5090-4090"), smi=smi)
    w = gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                           nvidia_smi=node.nvidia_smi)
    assert len(w.gpus) == 2 and all(g.model is None for g in w.gpus)
    assert len(w.problems) == 1 and says in w.problems[0]


def test_without_nvidia_smi_indices_follow_pci_order(tmp_path: Path) -> None:
    gpus = [SimGpu(0, 3, "GPU-00000000-0000-4000-8000-000000000003", pci_bus_id="0000:18:00.0"),
            SimGpu(1, 0, "GPU-00000000-0000-4000-8000-000000000000", pci_bus_id="0000:2a:00.0")]
    node = write_gpu_node(tmp_path / "n", write_sim_fixture(tmp_path / "fx", gpus))
    w = gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob, nvidia_smi=None)
    assert [(g.index, g.minor) for g in w.gpus] == [(0, 3), (1, 0)]
    assert not any("nvidia-smi" in s for s in w.sources)


def test_a_pod_without_device_nodes_has_no_gpus(tmp_path: Path) -> None:
    node = write_gpu_node(tmp_path, recorded_fixture("h200-8gpu"), pod_minors=[])
    w = gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                           nvidia_smi=node.nvidia_smi)
    assert w.gpus == () and w.driver_version == "580.95.05" and w.problems == ()


def test_a_device_node_the_module_does_not_list(tmp_path: Path) -> None:
    node = write_gpu_node(tmp_path, recorded_fixture("t4-1gpu-525"), pod_minors=[0, 1])
    w = gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                           nvidia_smi=node.nvidia_smi)
    assert [g.minor for g in w.gpus] == [0]
    assert w.problems == ("/dev/nvidia1: no /proc/driver/nvidia/gpus entry has Device Minor 1; "
                          "GPU left out",)


def test_sources_that_disagree_leave_the_gpu_out(tmp_path: Path) -> None:
    node = write_gpu_node(tmp_path, recorded_fixture("mixed-5090-4090"))
    csv = node.root / "nvidia-smi" / "query-gpu.csv"
    csv.write_text(csv.read_text().replace("c0000000-0000-4000-8000-000000000001",
                                           "c0000000-0000-4000-8000-0000000000ff"))
    w = gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                           nvidia_smi=node.nvidia_smi)
    assert [g.name for g in w.gpus] == ["NVIDIA GeForce RTX 5090"]
    assert [(c.pci_bus_id, c.field) for c in w.conflicts] == [("0000:02:00.0", "uuid")]


def test_no_nvidia_module(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    w = gather_worker_gpus(proc_root=str(tmp_path / "proc"),
                           gpu_glob=str(tmp_path / "dev" / "nvidia[0-9]*"), nvidia_smi=None)
    assert w.gpus == () and w.driver_version == ""
    assert any("version: No such file or directory" in p for p in w.problems)
    assert any("gpus: No such file or directory" in p for p in w.problems)


def test_a_corrupt_information_file_is_named(tmp_path: Path) -> None:
    node = write_gpu_node(tmp_path, recorded_fixture("t4-1gpu-525"))
    info = Path(node.proc_root) / "driver" / "nvidia" / "gpus" / "0000:00:1e.0" / "information"
    info.write_text("Model: \t\t Tesla T4\n")
    w = gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                           nvidia_smi=node.nvidia_smi)
    assert w.gpus == ()
    assert any(p.startswith(f"{info}: no GPU UUID, Bus Location, Device Minor line")
               for p in w.problems)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_a_device_node_whose_minor_contradicts_its_name(tmp_path: Path) -> None:
    path = tmp_path / "nvidia3"
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(195, 7))
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            pytest.skip(f"mknod not permitted here: {exc}")
        raise
    (tmp_path / "nvidia4").touch()
    minors, problems = device_minors(str(tmp_path / "nvidia[0-9]*"))
    assert minors == {4}
    assert problems == [f"{path}: character device 195:7 does not match its name; GPU left out"]


def test_find_nvidia_smi_prefers_the_driver_root(tmp_path: Path) -> None:
    for d in ("driver/bin", "image/bin"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "nvidia-smi").write_text("#!/bin/sh\n")
        (tmp_path / d / "nvidia-smi").chmod(0o755)
    image = str(tmp_path / "image" / "bin")
    assert find_nvidia_smi(str(tmp_path / "driver"), image) == \
        str(tmp_path / "driver" / "bin" / "nvidia-smi")
    assert find_nvidia_smi(str(tmp_path / "none"), image) == os.path.join(image, "nvidia-smi")
    assert find_nvidia_smi(str(tmp_path / "none"), "") is None
