"""MPS in CDI edits: the DRA driver's claim edits are refused, near misses are not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ateom.cdi.model import ContainerEdits, EditStep, Mount, Resolution
from ateom.cdi.registry import Registry
from ateom.cdi.testing import spec_document, write_spec
from ateom.errors import ErrorCode
from ateom.gpuinfo.mps import (
    MpsRefused,
    check_no_mps,
    mps_in_edits,
    mps_in_resolution,
)

CLAIM_KIND = "k8s.gpu.nvidia.com/claim"
MPS_ROOT = "/var/lib/kubelet/plugins/gpu.resource.nvidia.com/mps/4f1c-0a1b2"


def dra_mps_edits(pipe: str = "/tmp/nvidia-mps") -> dict[str, Any]:
    """What MpsControlDaemon.GetCDIContainerEdits writes (NVIDIA/k8s-dra-driver-gpu)."""
    return {
        "env": [f"CUDA_MPS_PIPE_DIRECTORY={pipe}"],
        "mounts": [
            {"hostPath": f"{MPS_ROOT}/shm", "containerPath": "/dev/shm",
             "options": ["rw", "nosuid", "nodev", "bind"]},
            {"hostPath": f"{MPS_ROOT}/pipe", "containerPath": pipe,
             "options": ["rw", "nosuid", "nodev", "bind"]},
        ],
    }


def resolve(tmp_path: Path, devices: dict[str, dict[str, Any]], *names: str,
            spec_edits: dict[str, Any] | None = None) -> Resolution:
    doc = spec_document(CLAIM_KIND, devices, spec_edits=spec_edits)
    write_spec(tmp_path / "cdi", "claim.json", doc)
    return Registry.load([str(tmp_path / "cdi")], cache=None).resolve(list(names))


def step(origin: str, **edits: Any) -> EditStep:
    return EditStep(origin, "/var/run/cdi/x.json", ContainerEdits(**edits))


def test_the_dra_drivers_mps_claim_is_refused_naming_device_and_edits(tmp_path: Path) -> None:
    gpu = {"deviceNodes": [{"path": "/dev/nvidia0"}]}
    res = resolve(tmp_path, {"4f1c-gpu-0": {**gpu, **dra_mps_edits()}},
                  f"{CLAIM_KIND}=4f1c-gpu-0")
    verdict = mps_in_resolution(res)
    assert verdict.expresses_mps
    assert [f.signal for f in verdict.findings] == ["env", "shm-bind", "pipe-mount"]
    assert verdict.origins == (f"{CLAIM_KIND}=4f1c-gpu-0",)
    with pytest.raises(MpsRefused) as err:
        check_no_mps("trainer", res)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    text = str(err.value)
    assert text.startswith(f"container 'trainer': {CLAIM_KIND}=4f1c-gpu-0 expresses NVIDIA MPS")
    assert "CUDA_MPS_PIPE_DIRECTORY='/tmp/nvidia-mps'" in text
    assert f"'/tmp/nvidia-mps' <- '{MPS_ROOT}/pipe'" in text
    assert str(tmp_path / "cdi" / "claim.json") in text
    assert "gVisor" in text


def test_env_in_spec_level_edits_makes_a_device_mount_the_pipe_dir(tmp_path: Path) -> None:
    # The pipe directory comes from another step's env: a mount there is MPS.
    edits = dra_mps_edits("/run/mps")
    res = resolve(tmp_path, {"0": {"mounts": edits["mounts"][1:]}}, f"{CLAIM_KIND}=0",
                  spec_edits={"env": edits["env"]})
    verdict = mps_in_resolution(res)
    by_signal = {f.signal: f for f in verdict.findings}
    assert by_signal["env"].origin == f"{CLAIM_KIND} (spec-level)"
    assert by_signal["pipe-mount"].origin == f"{CLAIM_KIND}=0"
    assert "(/run/mps)" in by_signal["pipe-mount"].why


def test_a_mount_at_cudas_default_pipe_dir_is_mps_without_the_env() -> None:
    found = mps_in_edits("v.com/c=0", ContainerEdits(mounts=(
        Mount("/host/mps/pipe", "/tmp/nvidia-mps/", options=("bind",)),)))
    assert [f.signal for f in found] == ["pipe-mount"]


def test_the_log_directory_env_alone_is_mps() -> None:
    res = Resolution(("v.com/c=0",), (step("v.com/c=0", env=("CUDA_MPS_LOG_DIRECTORY=/x",)),))
    assert mps_in_resolution(res).expresses_mps


@pytest.mark.parametrize("edits", [
    # A bigger /dev/shm from the host (NCCL's need) works inside one sandbox.
    ContainerEdits(mounts=(Mount("/run/big-shm", "/dev/shm", options=("rbind",)),)),
    ContainerEdits(mounts=(Mount("/run/big-shm", "/dev/shm"),)),
])
def test_a_dev_shm_bind_alone_is_reported_but_not_refused(edits: ContainerEdits) -> None:
    res = Resolution(("v.com/c=0",), (EditStep("v.com/c=0", "/etc/cdi/v.json", edits),))
    verdict = check_no_mps("app", res)
    assert [f.signal for f in verdict.findings] == ["shm-bind"]
    assert not verdict.expresses_mps


@pytest.mark.parametrize("edits", [
    ContainerEdits(),
    # Tuning variables only matter to a client that found a server.
    ContainerEdits(env=("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PIPE=/x",
                        "NOT_CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps")),
    # The container's own tmpfs at /dev/shm shares nothing with the host.
    ContainerEdits(mounts=(Mount("shm", "/dev/shm", type="tmpfs", options=("nosuid",)),)),
    # Neighbours of the pipe dir are not it.
    ContainerEdits(mounts=(Mount("/h/a", "/tmp/nvidia-mps-other", options=("bind",)),
                           Mount("/h/b", "/dev/shmem", options=("bind",)))),
])
def test_edits_without_mps_pass(edits: ContainerEdits) -> None:
    res = Resolution(("v.com/c=0",), (EditStep("v.com/c=0", "", edits),))
    assert check_no_mps("app", res).findings == ()


def test_an_empty_pipe_directory_env_still_names_mps() -> None:
    # An empty value makes CUDA use its default directory: still an MPS client.
    found = mps_in_edits("v.com/c=0", ContainerEdits(env=("CUDA_MPS_PIPE_DIRECTORY=",)))
    assert [f.signal for f in found] == ["env"]


def test_a_mount_above_the_pipe_dir_covers_it() -> None:
    found = mps_in_edits("v.com/c=0", ContainerEdits(mounts=(Mount("/host/tmp", "/tmp"),)))
    assert [f.signal for f in found] == ["pipe-mount"]
    assert mps_in_edits("v.com/c=0", ContainerEdits(mounts=(Mount("/host/root", "/"),))) == ()


def test_long_values_are_quoted_short_and_many_findings_are_counted() -> None:
    steps = tuple(step(f"v.com/c={i}", env=(f"CUDA_MPS_PIPE_DIRECTORY=/{'p' * 5000}",))
                  for i in range(9))
    res = Resolution(tuple(s.origin for s in steps), steps)
    with pytest.raises(MpsRefused) as err:
        check_no_mps("app", res)
    text = str(err.value)
    assert text.startswith("container 'app': v.com/c=0, v.com/c=1, ") and " express NVIDIA" in text
    assert "(5001 chars)" in text and "and 3 more" in text
    assert len(text) < 4000
