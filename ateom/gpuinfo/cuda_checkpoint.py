"""NVIDIA's cuda-checkpoint: find it, probe it, judge the driver it must work with.

Finding and probing touch the machine (`locate`, `probe`); parsing and every
verdict are pure functions over the gathered facts (`parse_help`, `judge_*`,
`checkpoint_mode`), each reason naming the fix.

How runsc uses the tool (gVisor runsc/boot and pkg/sentry/control, release-
20260608.0+ for ``runsc checkpoint --cuda-checkpoint-path``): the sandbox
*execs it inside the container* of every process holding an NVIDIA device
(the container's mount namespace and environment), so the path runsc is
given is a path in the container: the binary found here on the worker must
be bind-mounted read-only into each GPU container at that path, and it
loads ``libcuda.so.1`` there (which CDI injection provides). Per process it
runs ``--get-state --pid P`` (R555+; on R550-R554 runsc picks CUDA
processes by their ``cudaXXXXXXXXXXX`` thread instead), ``--toggle --pid P``
to suspend before the save and to resume after the restore, and, when the
restore remapped GPUs onto other cards, ``--action restore --device-map
old=new,... --pid P`` then ``--action unlock`` (``--device-map``: R580+).

The tool's CLI (NVIDIA/cuda-checkpoint README, ``cuda-checkpoint --help`` of
570.86.10): ``--get-state``, ``--action lock|checkpoint|restore|unlock``
with ``--timeout <ms>`` for lock, ``--toggle``, ``--get-restore-tid``, all
with ``--pid|-p <pid>``; 590.44.01 added ``--launch-job|-j <program>
[args]``: "Initialize a memfd to become a job file, set
CUDA_CHECKPOINT_JOB_FILE to point to that memfd and launch the specified
command".

Driver requirements: R550 is the first driver with checkpoint support
(older ones answer "Insufficient driver"). From R610, processes that share
GPU memory through CUDA IPC (multi-GPU inference and training: vLLM, SGLang,
PyTorch worker pools) are checkpointed coherently only as one job: the
workload must have been started under ``cuda-checkpoint --launch-job`` (its
processes then share the job file) and runsc must act on them one at a time
(``runsc checkpoint --cuda-checkpoint-sequential``, release-20260615.0+;
google/gvisor#13400, #13987, NVIDIA/cuda-checkpoint "610 Features"). The
launcher cannot be added at checkpoint time, so for a multi-GPU actor on
R610+ ateom must prefix the GPU containers' command with it at Run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from ateom.errors import quote
from ateom.gpuinfo.inventory import driver_major
from ateom.process.runner import NOT_RUN, TIMED_OUT, Runner, subprocess_runner

TOOL = "cuda-checkpoint"
PROBE_TIMEOUT = 10.0  # --help prints and exits; a tool that hangs must not stall a check
MIN_DRIVER = 550  # first driver with checkpoint support
GET_STATE_DRIVER = 555  # --get-state
DEVICE_MAP_DRIVER = 580  # --device-map: restore onto other GPUs
JOB_DRIVER = 610  # CUDA IPC checkpoints need --launch-job and sequential mode
CONFIG_FLAG = "--cuda-checkpoint"  # where an operator names the binary

Status = Literal["pass", "warn", "fail"]


@dataclass(frozen=True, slots=True)
class CudaCheckpointHelp:
    """What ``cuda-checkpoint --help`` says about itself."""

    version: str  # "570.86.10"; "" when the banner has none
    options: frozenset[str]  # long option names without dashes: "toggle", "launch-job", ...
    actions: frozenset[str]  # the --action values: "lock", "checkpoint", ...


@dataclass(frozen=True, slots=True)
class CudaCheckpointFacts:
    searched: tuple[str, ...]  # where it was looked for, in order
    path: str = ""  # the binary found; "" when none
    configured: bool = False  # `path` is the operator's, not found by searching
    executable: bool = False
    help: CudaCheckpointHelp | None = None  # None when --help could not be run or read
    error: str = ""  # why probing failed


@dataclass(frozen=True, slots=True)
class CheckpointMode:
    """How runsc must run cuda-checkpoint for an actor, and why."""

    sequential: bool  # runsc checkpoint --cuda-checkpoint-sequential
    launch_job: bool  # the GPU containers' command runs under cuda-checkpoint --launch-job
    reason: str


@dataclass(frozen=True, slots=True)
class Judgement:
    check: str
    status: Status
    reason: str


def search_dirs(driver_root: str, toolkit_dir: str, path_env: str) -> tuple[str, ...]:
    """Where cuda-checkpoint is looked for, first match wins (pure).

    ``<driver root>/bin`` first: it is a driver tool (it only exposes what the
    driver implements), and the driver's own copy matches the loaded module;
    then the NVIDIA toolkit dir the operator mounted; then the image's $PATH.
    """
    dirs = [os.path.join(driver_root, "bin") if driver_root else "", toolkit_dir,
            *path_env.split(os.pathsep)]
    return tuple(dict.fromkeys(d for d in dirs if d))


def locate(configured: str, *, driver_root: str, toolkit_dir: str,
           path_env: str) -> tuple[str, tuple[str, ...]]:
    """(path or "", where it was looked for) (stats files). The places are the
    named dirs then ``$PATH``, as a person would say them. A configured path
    is taken as it is, without falling back: the operator chose that binary."""
    if configured:
        return (configured if os.path.lexists(configured) else ""), (configured,)
    named = search_dirs(driver_root, toolkit_dir, "")
    said = named + (("$PATH",) if path_env else ())
    for directory in search_dirs(driver_root, toolkit_dir, path_env):
        candidate = os.path.join(directory, TOOL)
        if os.path.isfile(candidate):
            return candidate, said
    return "", said


_BANNER_RE = re.compile(r"\bVersion\s+(\d+(?:\.\d+){1,2})\b")
_OPTION_RE = re.compile(r"^\s*--([a-z][a-z-]*)", re.MULTILINE)
_ACTIONS_RE = re.compile(r"--action\s+((?:[a-z]+\s*\|\s*)+[a-z]+)")


def parse_help(text: str) -> CudaCheckpointHelp:
    """``cuda-checkpoint --help`` -> version, options, actions (pure)."""
    banner = _BANNER_RE.search(text)
    actions = _ACTIONS_RE.search(text)
    return CudaCheckpointHelp(
        version=banner.group(1) if banner else "",
        options=frozenset(_OPTION_RE.findall(text)),
        actions=frozenset(a.strip() for a in actions.group(1).split("|")) if actions
        else frozenset())


def probe(configured: str = "", *, driver_root: str, toolkit_dir: str, path_env: str,
          runner: Runner = subprocess_runner, timeout: float = PROBE_TIMEOUT
          ) -> CudaCheckpointFacts:
    """Find cuda-checkpoint and run its ``--help`` once (stats files, runs it)."""
    path, searched = locate(configured, driver_root=driver_root, toolkit_dir=toolkit_dir,
                            path_env=path_env)
    base = CudaCheckpointFacts(searched, path, configured=bool(configured))
    if not path:
        return base
    if not os.access(path, os.X_OK) or not os.path.isfile(path):
        return CudaCheckpointFacts(searched, path, bool(configured), False,
                                   error="not an executable file")
    code, out = runner([path, "--help"], timeout=timeout)
    if code in (TIMED_OUT, NOT_RUN):
        return CudaCheckpointFacts(searched, path, bool(configured), True,
                                   error=out.strip()[:200])
    parsed = parse_help(out)
    if "toggle" not in parsed.options:
        return CudaCheckpointFacts(searched, path, bool(configured), True, parsed,
                                   error=f"--help (exit {code}) lists no --toggle: "
                                         f"{quote(out.strip())}")
    return CudaCheckpointFacts(searched, path, bool(configured), True, parsed)


def judge_binary(facts: CudaCheckpointFacts) -> Judgement:
    """Is there a cuda-checkpoint runsc can be pointed at? (pure)"""
    check = "cuda-checkpoint"
    if not facts.path:
        if facts.configured:
            return Judgement(check, "fail", f"{facts.searched[0]} does not exist: fix "
                                            f"{CONFIG_FLAG} or install cuda-checkpoint there")
        places = list(facts.searched) or ["no directory"]
        where = places[0] if len(places) == 1 else f"{', '.join(places[:-1])} or {places[-1]}"
        return Judgement(check, "fail", f"{TOOL} not found in {where}: install it on the node "
                                        f"(NVIDIA/cuda-checkpoint) or pass {CONFIG_FLAG}")
    if not facts.executable:
        return Judgement(check, "fail", f"{facts.path}: {facts.error or 'not executable'}: "
                                        f"chmod 0755 it or pass {CONFIG_FLAG}")
    if facts.error or facts.help is None:
        return Judgement(check, "fail", f"{facts.path} --help: {facts.error}: it does not "
                                        f"behave like NVIDIA's cuda-checkpoint; replace it")
    version = f" {facts.help.version}" if facts.help.version else ""
    return Judgement(check, "pass", f"{facts.path}{version} "
                                    f"(options: {', '.join(sorted(facts.help.options))})")


def checkpoint_mode(driver_version: str, gpu_count: int) -> CheckpointMode:
    """How an actor holding `gpu_count` GPUs must be checkpointed on this driver (pure)."""
    major = driver_major(driver_version)
    if gpu_count > 1 and major is not None and major >= JOB_DRIVER:
        return CheckpointMode(True, True, (
            f"{gpu_count} GPUs on driver R{major}: processes sharing GPU memory through CUDA "
            f"IPC checkpoint coherently only as one job, so the GPU containers must start "
            f"under `{TOOL} --launch-job` and runsc must checkpoint with "
            f"--cuda-checkpoint-sequential"))
    return CheckpointMode(False, False, f"{gpu_count} GPU(s) on driver {driver_version or '?'}"
                                        f": no job checkpoint needed")


def judge_driver(driver_version: str, *, gpu_count: int, help: CudaCheckpointHelp | None,
                 runsc_sequential: bool) -> tuple[Judgement, ...]:
    """Can this driver checkpoint this worker's actors with this tool? (pure)

    `runsc_sequential`: the runsc has ``checkpoint --cuda-checkpoint-sequential``.
    """
    check = "cuda-checkpoint-driver"
    major = driver_major(driver_version)
    if major is None:
        return (Judgement(check, "fail", "driver version unknown (no /proc/driver/nvidia/"
                                         "version): is the NVIDIA kernel module loaded?"),)
    if major < MIN_DRIVER:
        return (Judgement(check, "fail", (
            f"driver {driver_version} < R{MIN_DRIVER}: cuda-checkpoint needs R{MIN_DRIVER}+ "
            f"(it answers 'Insufficient driver'): upgrade the node's NVIDIA driver")),)
    out = [Judgement(check, "pass", f"driver {driver_version} supports cuda-checkpoint")]
    if major < GET_STATE_DRIVER:
        out.append(Judgement(check, "warn", (
            f"driver {driver_version} < R{GET_STATE_DRIVER}: no --get-state, so runsc finds "
            f"CUDA processes by thread name; R{GET_STATE_DRIVER}+ is more robust")))
    if major < DEVICE_MAP_DRIVER:
        out.append(Judgement(check, "warn", (
            f"driver {driver_version} < R{DEVICE_MAP_DRIVER}: checkpoints restore only onto "
            f"the same GPU cards (no --device-map); upgrade to move actors between GPUs")))
    mode = checkpoint_mode(driver_version, gpu_count)
    if mode.launch_job:
        out.append(_judge_job(mode, help, runsc_sequential))
    return tuple(out)


def _judge_job(mode: CheckpointMode, help: CudaCheckpointHelp | None,
               runsc_sequential: bool) -> Judgement:
    check = "cuda-checkpoint-multi-gpu"
    if help is not None and "launch-job" not in help.options:
        return Judgement(check, "fail", (
            f"{mode.reason}; this {TOOL} {help.version} has no --launch-job: install "
            f"{TOOL} 590.44.01 or newer (NVIDIA/cuda-checkpoint)"))
    if not runsc_sequential:
        return Judgement(check, "fail", (
            f"{mode.reason}; this runsc has no checkpoint --cuda-checkpoint-sequential: "
            f"upgrade runsc to release-20260615.0 or later"))
    return Judgement(check, "pass", mode.reason)
