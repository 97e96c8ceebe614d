"""GPU checkpoints: what the installed runsc, this worker's cuda-checkpoint and
driver allow, decided from what was probed (pure).

runsc saves GPU memory and contexts only through NVIDIA's cuda-checkpoint,
which it runs *inside* the sandbox (`runsc checkpoint
--cuda-checkpoint-path=<path in the container>`, a flag the probe lists from
release-20260608.0). So ateom bind-mounts the worker's cuda-checkpoint
read-only into every GPU container at `TOOL_IN_CONTAINER` when it boots the
actor, and names that path when it checkpoints. A checkpoint that cannot
work is refused before the sandbox is touched, with the fix: the runsc
cannot save GPU state, cuda-checkpoint was not in the actor's containers,
the driver is below R550, or a multi-GPU actor on R610+ needs a runsc with
``--cuda-checkpoint-sequential``. Releases from 20240501 up to 20260706
without the flag would panic ("can't save with live nvproxy clients") and
take the sandbox with them; they are refused by the same first rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from ateom.daemon.bundles.edits import TOOL_IN_CONTAINER
from ateom.gpuinfo import cuda_checkpoint
from ateom.gpuinfo.inventory import driver_major
from ateom.runsc.probe import RunscInfo

PATH_FLAG = "cuda-checkpoint-path"
SEQUENTIAL_FLAG = "cuda-checkpoint-sequential"
PATH_RELEASE = "release-20260608.0"
SEQUENTIAL_RELEASE = "release-20260615.0"


@dataclass(frozen=True, slots=True)
class Blocker:
    """Why a GPU actor cannot be checkpointed now: a slug for metrics, the fix."""

    reason: str
    message: str


def runsc_saves_gpu_state(info: RunscInfo) -> bool:
    return info.supports(f"checkpoint:{PATH_FLAG}")


def launch_job_prefix(driver_version: str, gpu_count: int) -> tuple[str, ...]:
    """What goes before a GPU container's command so it can be checkpointed as one
    job (multi-GPU on R610+: CUDA IPC peers must share a job file), else () (pure)."""
    if cuda_checkpoint.checkpoint_mode(driver_version, gpu_count).launch_job:
        return (TOOL_IN_CONTAINER, "--launch-job")
    return ()


def blocker(info: RunscInfo, *, tool_in_containers: str, driver_version: str,
            gpu_count: int) -> Blocker | None:
    """Why a GPU actor holding `gpu_count` GPUs cannot be checkpointed (pure).

    `tool_in_containers`: the host cuda-checkpoint mounted into the actor's
    GPU containers when it booted ("" when none was found then).
    """
    if not runsc_saves_gpu_state(info):
        return Blocker("runsc_cannot_save_gpu", (
            f"runsc {info.path} ({info.version}) cannot save GPU state: its checkpoint has"
            f" no --{PATH_FLAG} (first in {PATH_RELEASE}); install a newer runsc"))
    if not tool_in_containers:
        return Blocker("no_cuda_checkpoint", (
            "cuda-checkpoint was not found when this actor started, so it is not in its"
            " containers: install it on the node (driver root's bin/, the toolkit dir, or"
            " --cuda-checkpoint) and run the actor again"))
    major = driver_major(driver_version)
    if major is None:
        return Blocker("driver_unknown", (
            "the NVIDIA driver version is unknown (no /proc/driver/nvidia/version):"
            " cuda-checkpoint needs R550 or newer"))
    if major < cuda_checkpoint.MIN_DRIVER:
        return Blocker("driver_too_old", (
            f"driver {driver_version} is older than R{cuda_checkpoint.MIN_DRIVER}:"
            " cuda-checkpoint cannot save GPU state on it; upgrade the node's driver"))
    mode = cuda_checkpoint.checkpoint_mode(driver_version, gpu_count)
    if mode.sequential and not info.supports(f"checkpoint:{SEQUENTIAL_FLAG}"):
        return Blocker("needs_sequential", (
            f"{mode.reason}; runsc {info.version} has no --{SEQUENTIAL_FLAG}"
            f" (first in {SEQUENTIAL_RELEASE}): install a newer runsc"))
    return None


def checkpoint_flags(driver_version: str, gpu_count: int) -> tuple[str, ...]:
    """The GPU part of `runsc checkpoint`'s flags, once `blocker` found none (pure)."""
    flags = [f"--{PATH_FLAG}={TOOL_IN_CONTAINER}"]
    if cuda_checkpoint.checkpoint_mode(driver_version, gpu_count).sequential:
        flags.append(f"--{SEQUENTIAL_FLAG}")
    return tuple(flags)
