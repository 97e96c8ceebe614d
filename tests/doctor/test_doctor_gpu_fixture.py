"""The GPU checks on a simulated worker: the NVIDIA module's /proc files, a stand-in
nvidia-smi and cuda-checkpoint, runsc releases emulated in front of Debian's runsc,
and CDI specs shaped like the DRA driver's; each breakage shows in its own check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ateom.cdi.testing import spec_document
from ateom.doctor import CHECK_NAMES, Report, Status, render_text, run_doctor
from tests.support.doctor_worker import GpuWorker

REPO = Path(__file__).resolve().parents[2]


def statuses(report: Report) -> dict[str, Status]:
    return {r.name: r.status for r in report.results}


def not_passing(report: Report) -> dict[str, Status]:
    return {n: s for n, s in statuses(report).items() if s is not Status.PASS}


def test_a_hanging_nvidia_smi_warns_gpu_inventory_only(gpu_worker: GpuWorker) -> None:
    smi = gpu_worker.root / "driver" / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\nsleep 600\n")
    report = run_doctor(gpu_worker.config(probe_timeout=2.0))
    assert not_passing(report) == {"gpu-inventory": Status.WARN}, render_text(report)
    r = report.result("gpu-inventory")
    assert f"{smi}: timed out after 2s; PCI ids and memory unknown" in r.details
    # /proc still names the GPUs; only what nvidia-smi adds is unknown.
    assert any(d.startswith("GPU 1: minor 1, GPU-a0000000") and d.endswith("memory ?")
               for d in r.details), r.details


def test_a_gpu_the_module_does_not_list_is_a_problem(gpu_worker: GpuWorker) -> None:
    os.symlink("/dev/null", gpu_worker.dev / "nvidia2")  # the Pod got a third node
    report = run_doctor(gpu_worker.config())
    r = report.result("gpu-inventory")
    assert r.status is Status.WARN
    assert any("nvidia2: no /proc/driver/nvidia/gpus entry has Device Minor 2" in d
               for d in r.details), r.details


def test_no_cuda_checkpoint_warns_unless_the_operator_configured_one(
        gpu_worker: GpuWorker) -> None:
    gpu_worker.cuda_checkpoint.unlink()
    env_path = {"PATH": "/nonexistent"}
    report = run_doctor(gpu_worker.config(), environ=env_path)
    assert not_passing(report) == {"cuda-checkpoint": Status.WARN}, render_text(report)
    assert report.ok
    r = report.result("cuda-checkpoint")
    assert r.summary.startswith("GPU checkpoints will be refused: cuda-checkpoint not found in "
                                f"{gpu_worker.root / 'driver' / 'bin'}, {gpu_worker.toolkit} "
                                "or $PATH")
    configured = str(gpu_worker.root / "opt" / "cuda-checkpoint")
    report = run_doctor(gpu_worker.config(cuda_checkpoint=configured), environ=env_path)
    assert not_passing(report) == {"cuda-checkpoint": Status.FAIL}, render_text(report)
    assert report.result("cuda-checkpoint").summary.startswith(f"{configured} does not exist")


def test_a_configured_cuda_checkpoint_is_used_where_it_is(gpu_worker: GpuWorker) -> None:
    elsewhere = gpu_worker.root / "opt" / "cuda-checkpoint"
    elsewhere.parent.mkdir()
    shutil.move(gpu_worker.cuda_checkpoint, elsewhere)
    report = run_doctor(gpu_worker.config(cuda_checkpoint=str(elsewhere)))
    assert report.result("cuda-checkpoint").status is Status.PASS
    assert report.result("cuda-checkpoint").summary.startswith(f"{elsewhere} 590.44.01")


def test_something_else_named_cuda_checkpoint_is_not_trusted(gpu_worker: GpuWorker) -> None:
    gpu_worker.cuda_checkpoint.write_text("#!/bin/sh\necho 'usage: cuda-checkpoint [x]'\n")
    report = run_doctor(gpu_worker.config())
    r = report.result("cuda-checkpoint")
    assert r.status is Status.WARN and "lists no --toggle" in r.summary


def test_multi_gpu_on_r610_warns_and_an_old_tool_is_named(gpu_worker: GpuWorker) -> None:
    gpu_worker.set_gpu_driver("610.57.04")
    report = run_doctor(gpu_worker.config())
    r = report.result("cuda-checkpoint-driver")
    assert r.status is Status.WARN, render_text(report)
    assert "2 GPUs on driver R610" in r.summary and "--launch-job" in r.summary
    assert report.result("gpu-inventory").summary.endswith("driver 610.57.04")
    gpu_worker.cuda_checkpoint_prints("help-570.86.10.txt")
    expected = gpu_worker.config(cuda_checkpoint=str(gpu_worker.cuda_checkpoint))
    report = run_doctor(expected)
    r = report.result("cuda-checkpoint-driver")
    assert r.status is Status.FAIL, render_text(report)
    assert "cuda-checkpoint 570.86.10 has no --launch-job" in r.summary


def test_an_old_driver_cannot_checkpoint(gpu_worker: GpuWorker) -> None:
    gpu_worker.set_gpu_driver("535.104.05", gpus=2)
    report = run_doctor(gpu_worker.config())
    r = report.result("cuda-checkpoint-driver")
    assert r.status is Status.WARN
    assert "driver 535.104.05 < R550" in r.summary


@pytest.mark.parametrize(("release", "expected", "sequential"), [
    ("20260525", Status.WARN, "no"),
    ("20260608", Status.PASS, "no"),
    ("20260817", Status.PASS, "yes"),
])
def test_runsc_releases_and_gpu_checkpoints(gpu_worker: GpuWorker, release: str,
                                            expected: Status, sequential: str) -> None:
    from tests.support import install_runsc

    emu = install_runsc(release, gpu_worker.root / f"runsc-{release}")
    report = run_doctor(gpu_worker.config(runsc=str(emu.path)))
    r = report.result("runsc-gpu-checkpoint")
    assert r.status is expected, render_text(report)
    assert f"runsc release-{release}.0" in r.summary
    if expected is Status.WARN:
        assert "(added in release-20260608.0)" in r.summary
    assert r.details[0].endswith(f": {sequential}")
    remaps = "yes" if release >= "20260706" else "no"
    assert r.details[1] == f"remaps GPUs on restore (release-20260706.0+): {remaps}"
    # Nothing else about this runsc differs from the shim's answers.
    assert {n: s for n, s in not_passing(report).items() if n != "runsc-gpu-checkpoint"} == {}


def dra_mps_claim(claim: str) -> dict[str, object]:
    """A claim spec with the MPS edits NVIDIA's DRA driver writes (sharing.go)."""
    root = f"/var/lib/kubelet/plugins/gpu.resource.nvidia.com/mps/{claim}-0a1b2"
    return spec_document("k8s.gpu.nvidia.com/claim", {f"{claim}-gpu-0": {
        "env": ["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"],
        "mounts": [
            {"hostPath": f"{root}/shm", "containerPath": "/dev/shm",
             "options": ["rw", "nosuid", "nodev", "bind"]},
            {"hostPath": f"{root}/pipe", "containerPath": "/tmp/nvidia-mps",
             "options": ["rw", "nosuid", "nodev", "bind"]},
        ],
    }})


def test_a_dra_mps_claim_in_the_spec_dirs_warns_naming_it(gpu_worker: GpuWorker) -> None:
    path = gpu_worker.add_spec("k8s.gpu.nvidia.com-claim_4f1c.json", dra_mps_claim("4f1c"))
    report = run_doctor(gpu_worker.config())
    assert not_passing(report) == {"cdi-mps": Status.WARN}, render_text(report)
    r = report.result("cdi-mps")
    assert "k8s.gpu.nvidia.com/claim=4f1c-gpu-0" in r.summary
    assert [d.split(": ")[1] for d in r.details] == [
        "env CUDA_MPS_PIPE_DIRECTORY='/tmp/nvidia-mps'",
        "mount '/dev/shm' <- '/var/lib/kubelet/plugins/gpu.resource.nvidia.com/mps/"
        "4f1c-0a1b2/shm'",
        "mount '/tmp/nvidia-mps' <- '/var/lib/kubelet/plugins/gpu.resource.nvidia.com/mps/"
        "4f1c-0a1b2/pipe'"]
    assert all(str(path) in d for d in r.details)


def test_mps_in_the_pods_gpu_spec_fails(gpu_worker: GpuWorker) -> None:
    spec = json.loads(gpu_worker.spec_path.read_text())
    spec["containerEdits"]["env"] = [*spec["containerEdits"].get("env", []),
                                     "CUDA_MPS_PIPE_DIRECTORY=/run/mps"]
    gpu_worker.spec_path.write_text(json.dumps(spec))
    report = run_doctor(gpu_worker.config())
    assert {n for n, s in statuses(report).items() if s is Status.FAIL} == {"cdi-mps"}
    r = report.result("cdi-mps")
    assert r.details[0].startswith(f"nvidia.com/gpu (spec-level) ({gpu_worker.spec_path}): "
                                   "env CUDA_MPS_PIPE_DIRECTORY='/run/mps'")


def _cli(worker: GpuWorker, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ateom", "doctor", "--json", *worker.cli_args(), *args],
        env={**os.environ, **worker.env(), **env}, cwd=REPO, capture_output=True, text=True,
        timeout=120, check=False,
    )


def test_cli_reads_placement_and_max_actors_from_the_daemons_env(gpu_worker: GpuWorker) -> None:
    done = _cli(gpu_worker, ATEOM_GPU_PLACEMENT="exclusive", ATEOM_MAX_ACTORS="4")
    doc = json.loads(done.stdout)
    assert [c["name"] for c in doc["checks"]] == list(CHECK_NAMES)
    placement = next(c for c in doc["checks"] if c["name"] == "gpu-placement")
    assert done.returncode == 0 and placement["status"] == "DOCTOR_STATUS_WARN", placement
    assert placement["summary"].startswith("exclusive: 2 GPU(s), --max-actors 4")
    done = _cli(gpu_worker, "--gpu-placement", "shared:2", "--max-actors", "2",
                ATEOM_GPU_PLACEMENT="exclusive")
    placement = next(c for c in json.loads(done.stdout)["checks"]
                     if c["name"] == "gpu-placement")
    assert (placement["status"], placement["summary"]) == (
        "DOCTOR_STATUS_PASS", "shared:2: 2 GPU(s), --max-actors 2")


def test_cli_fails_a_placement_serve_would_refuse(gpu_worker: GpuWorker) -> None:
    done = _cli(gpu_worker, ATEOM_GPU_PLACEMENT="fair-share")
    placement = next(c for c in json.loads(done.stdout)["checks"]
                     if c["name"] == "gpu-placement")
    assert done.returncode == 1 and placement["status"] == "DOCTOR_STATUS_FAIL"
    assert "'fair-share'" in placement["summary"]


def test_cli_says_why_a_bad_max_actors_stops_it(gpu_worker: GpuWorker) -> None:
    done = _cli(gpu_worker, ATEOM_MAX_ACTORS="lots")  # with --json: the error as JSON
    assert done.returncode == 2 and done.stderr == ""  # a malformed twin is usage
    said = json.loads(done.stdout)
    assert said["exit_code"] == 2 and "$ATEOM_MAX_ACTORS='lots': not a number" in said["error"]


def test_cli_flags_and_env_for_the_gpu_tools(gpu_worker: GpuWorker) -> None:
    done = _cli(gpu_worker, "--nvidia-smi", "/nonexistent/nvidia-smi")
    by_name = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert by_name["gpu-inventory"]["status"] == "DOCTOR_STATUS_WARN"
    assert any(d.startswith("/nonexistent/nvidia-smi: not run")
               for d in by_name["gpu-inventory"]["details"])
    done = _cli(gpu_worker, ATEOM_CUDA_CHECKPOINT="/nonexistent/cuda-checkpoint")
    by_name = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert done.returncode == 1 and by_name["cuda-checkpoint"]["status"] == "DOCTOR_STATUS_FAIL"
