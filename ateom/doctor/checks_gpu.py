"""Checks of what the daemon does with the Pod's GPUs beyond handing them to a
sandbox: knowing them (inventory), sharing them (placement) and saving their
state (cuda-checkpoint, the driver, runsc's GPU checkpoint). Pure over `Facts`.

Severity, decided here once: a worker runs GPU actors without any of the
checkpoint pieces, so a missing one WARNs ("GPU checkpoints will be
refused") unless the operator configured ``--cuda-checkpoint``: then GPU
checkpoints are part of this worker's job and a missing piece FAILs
(`DoctorConfig.checkpoint_expected`). The inventory WARNs too: a GPU actor
runs without it, but a checkpoint's compatibility record and a restore check
need every fact of every GPU.
"""

from __future__ import annotations

import os
from collections import Counter

from ateom.doctor.facts import Facts
from ateom.doctor.verdict import CheckResult, Status, passed, skipped
from ateom.errors import AteomError
from ateom.gpuinfo.compat import REMAP_RUNSC, runsc_remaps_gpus
from ateom.gpuinfo.cuda_checkpoint import CONFIG_FLAG, judge_binary, judge_driver
from ateom.gpuinfo.inventory import GpuFacts
from ateom.gpuinfo.record import RunscBuild
from ateom.settings import PlacementPolicy, PlacementSettings, parse_placement

CUDA_CHECKPOINT_RUNSC = "release-20260608.0"  # runsc checkpoint --cuda-checkpoint-path
SEQUENTIAL_RUNSC = "release-20260615.0"  # runsc checkpoint --cuda-checkpoint-sequential
_NO_GPUS = "no GPU device nodes (gpu-nodes)"
_REFUSED = "GPU checkpoints will be refused: "


def _missing(f: Facts) -> Status:
    """What a missing checkpoint prerequisite is on this worker (see the module doc)."""
    return Status.FAIL if f.config.checkpoint_expected else Status.WARN


def _gpu_line(g: GpuFacts) -> str:
    memory = f"{g.memory_mib} MiB" if g.memory_mib is not None else "memory ?"
    minor = g.minor if g.minor is not None else "?"
    return f"GPU {g.index}: minor {minor}, {g.uuid}, {g.pci_bus_id}, {g.pci_id} {g.name}, {memory}"


def check_gpu_inventory(f: Facts) -> CheckResult:
    name = "gpu-inventory"
    w = f.worker_gpus
    if not f.gpu_nodes:
        return skipped(name, _NO_GPUS)
    if w is None:
        return skipped(name, "the inventory was not gathered")
    models = Counter(f"{g.pci_id} {g.name}" for g in w.gpus)
    seen = ", ".join(f"{n} x {m}" for m, n in sorted(models.items())) or "no GPU facts"
    summary = f"{len(w.gpus)} GPU(s): {seen}; driver {w.driver_version or 'unknown'}"
    listing = tuple(_gpu_line(g) for g in w.gpus)
    trouble = (*(c.describe() for c in w.conflicts), *w.problems)
    if trouble or not w.gpus:
        nvidia_smi = f.config.nvidia_smi or os.path.join(f.config.node.driver_bin_dir, "nvidia-smi")
        return CheckResult(
            name, Status.WARN,
            f"{summary}; {len(trouble)} problem(s): GPU checkpoints cannot record or check "
            f"what is unknown",
            fix=f"the facts come from {f.config.gpu.proc_root}/driver/nvidia and {nvidia_smi}: "
            "make nvidia-smi runnable in the worker (from the same driver as the kernel "
            "module, mounted by the device plugin) and check the Pod was given the GPUs "
            "the driver lists",
            details=(*trouble, *listing, *w.sources),
        )
    return passed(name, summary, (*listing, *w.sources))


def _placement(f: Facts) -> PlacementSettings | CheckResult:
    try:
        return parse_placement(f.config.gpu.placement)
    except AteomError as exc:
        return CheckResult(
            "gpu-placement", Status.FAIL, f"{exc}: ateom serve refuses to start with it",
            fix="set ATEOM_GPU_PLACEMENT/--gpu-placement to exclusive, shared or shared:N")


def check_gpu_placement(f: Facts) -> CheckResult:
    name = "gpu-placement"
    settings = _placement(f)
    if isinstance(settings, CheckResult):
        return settings
    if not f.gpu_nodes:
        return skipped(name, f"{_NO_GPUS}; policy {settings}")
    gpus, actors = len(f.gpu_nodes), f.config.max_actors
    summary = f"{settings}: {gpus} GPU(s), --max-actors {actors}"
    exclusive = settings.policy is PlacementPolicy.EXCLUSIVE
    if exclusive and gpus < actors:
        return CheckResult(
            name, Status.WARN,
            f"{summary}: at most {gpus} GPU actor(s) run at once (each holds a whole GPU); "
            f"more are refused RESOURCE_EXHAUSTED (too_few_free)",
            fix=f"lower --max-actors to {gpus}, give the Pod more GPUs, or use shared[:N]")
    if settings.cap > actors:
        return CheckResult(
            name, Status.WARN,
            f"{summary}: the cap of {settings.cap} actors per GPU never binds (at most "
            f"{actors} actor(s) are hosted)",
            fix=f"use shared:N with N <= {actors}, or plain shared")
    details: tuple[str, ...] = ()
    if exclusive and actors > 1:
        # The default request is every GPU of the Pod: it takes them all.
        details = ("an actor that asks for no GPU count gets all of them and holds them "
                   "alone: give actors a count or names to share the Pod",)
    return passed(name, summary, details)


def check_cuda_checkpoint(f: Facts) -> CheckResult:
    name = "cuda-checkpoint"
    facts = f.cuda_checkpoint
    if facts is None:
        return skipped(name, "cuda-checkpoint was not probed")
    verdict = judge_binary(facts)
    where = tuple(f"looked in: {p}" for p in facts.searched)
    if verdict.status == "pass":
        return passed(name, verdict.reason)
    return CheckResult(
        name, _missing(f), (_REFUSED if not facts.configured else "") + verdict.reason,
        fix="GPU checkpoints need NVIDIA's cuda-checkpoint (NVIDIA/cuda-checkpoint; runsc "
        "runs it inside the sandbox, ateom mounts it there): install it in the driver "
        f"root's bin/ or the toolkit dir, or name it with ATEOM_CUDA_CHECKPOINT/{CONFIG_FLAG}",
        details=where)


def check_cuda_checkpoint_driver(f: Facts) -> CheckResult:
    name = "cuda-checkpoint-driver"
    if not f.gpu_nodes:
        return skipped(name, _NO_GPUS)
    help_ = f.cuda_checkpoint.help if f.cuda_checkpoint is not None else None
    judged = judge_driver(f.driver_version, gpu_count=len(f.gpu_nodes), help=help_,
                          runsc_sequential=f.runsc.cuda_checkpoint_sequential)
    failing = [j for j in judged if j.status == "fail"]
    # A multi-GPU actor on R610+ checkpoints only as one job: even when the tool
    # and runsc can, that is worth a WARN, since the workload must have been
    # started under the launcher (see ateom.gpuinfo.cuda_checkpoint).
    warning = [j for j in judged
               if j.status == "warn" or (j.check != name and j.status == "pass")]
    if not failing and not warning:
        return passed(name, judged[0].reason)
    worst = failing or warning
    status = _missing(f) if failing else Status.WARN
    return CheckResult(
        name, status, (_REFUSED if failing else "") + worst[0].reason,
        fix="upgrade the node's NVIDIA driver (R550+ for GPU checkpoints, R580+ to restore "
        "onto other GPUs); multi-GPU actors on R610+ need cuda-checkpoint 590.44.01+ "
        f"(--launch-job) and runsc {SEQUENTIAL_RUNSC}+ (--cuda-checkpoint-sequential)",
        details=tuple(j.reason for j in (*failing, *warning)))


def check_runsc_gpu_checkpoint(f: Facts) -> CheckResult:
    name = "runsc-gpu-checkpoint"
    r = f.runsc
    if not r.found or not r.supports_nvproxy:
        return skipped(name, "runsc without nvproxy (runsc-nvproxy)")
    remaps = runsc_remaps_gpus(RunscBuild(r.version))
    remap = {True: "yes", False: "no", None: "unknown (no release date in its version)"}[remaps]
    details = (
        f"checkpoint --cuda-checkpoint-sequential (multi-GPU on R610+, {SEQUENTIAL_RUNSC}+): "
        + ("yes" if r.cuda_checkpoint_sequential else "no"),
        f"remaps GPUs on restore ({REMAP_RUNSC}+): {remap}",
    )
    if not r.cuda_checkpoint_path:
        return CheckResult(
            name, _missing(f),
            f"{_REFUSED}runsc {r.version} has no `checkpoint --cuda-checkpoint-path` "
            f"(added in {CUDA_CHECKPOINT_RUNSC})",
            fix=f"use runsc {CUDA_CHECKPOINT_RUNSC} or later (build the image with "
            "--build-arg RUNSC_BINARY=<a gVisor release>, or put it at deploy/runsc)",
            details=details)
    return passed(name, f"runsc {r.version} offers checkpoint --cuda-checkpoint-path "
                        f"({CUDA_CHECKPOINT_RUNSC}+)", details)
