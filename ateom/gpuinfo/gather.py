"""Gather this worker's GPU facts (shell: globs /dev, reads /proc, runs nvidia-smi).

Every root is a parameter, so tests and the simulated node
(`tests.support.gpu_node`) point it at a fixture tree and a stand-in
nvidia-smi. Nothing here raises for a missing or broken source: each failure
becomes a line in `WorkerGpus.problems`, and the facts that remain are still
returned, because the doctor must show what it could learn and the daemon
decides per use whether an incomplete inventory is enough (a restore needs
the PCI ids; a plain GPU Run does not).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import stat
from collections.abc import Sequence

from ateom.gpuinfo.inventory import (
    COMPUTE_APPS_ARGS,
    SMI_ARGS,
    GpuInfoError,
    ProcGpu,
    SmiGpu,
    WorkerGpus,
    combine,
    parse_compute_apps,
    parse_driver_version,
    parse_gpu_information,
    parse_smi_query,
    quote,
)
from ateom.process.runner import NOT_RUN, TIMED_OUT, Runner, subprocess_runner
from ateom.settings import DEFAULT_GPU_GLOB, DEFAULT_PROC_ROOT

# nvidia-smi answers in well under a second; one that hangs (a wedged GPU, a
# driver/library mismatch retrying) must not stall a checkpoint or the doctor.
SMI_TIMEOUT = 10.0
_MAX_READ = 64 * 1024  # a /proc file of the NVIDIA module is a few hundred bytes
_NODE_RE = re.compile(r"^nvidia(\d+)$")
_NVIDIA_MAJOR = 195  # the NVIDIA character device major on Linux


def _read_text(path: str) -> str:
    """At most 64 KiB of `path` (reads a file; never waits on a FIFO)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        return os.read(fd, _MAX_READ).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def device_minors(pattern: str) -> tuple[frozenset[int], list[str]]:
    """The minors of the GPU device nodes matching `pattern` (globs and stats /dev).

    The minor is the N of ``nvidiaN``, the name the device plugin and the CDI
    spec use. A character device whose own minor differs from its name is
    reported and left out rather than trusted either way.
    """
    minors: set[int] = set()
    problems: list[str] = []
    for path in sorted(glob.glob(pattern)):
        m = _NODE_RE.match(os.path.basename(path))
        if not m:
            continue  # nvidia-caps and such match a loose glob; not a GPU
        minor = int(m.group(1))
        try:
            st = os.stat(path)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}; GPU left out")
            continue
        if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == _NVIDIA_MAJOR \
                and os.minor(st.st_rdev) != minor:
            problems.append(f"{path}: character device {_NVIDIA_MAJOR}:{os.minor(st.st_rdev)} "
                            f"does not match its name; GPU left out")
            continue
        minors.add(minor)
    return frozenset(minors), problems


def read_proc(proc_root: str) -> tuple[str, list[ProcGpu] | None, list[str]]:
    """The driver version and every GPU the kernel module lists (reads files).

    Returns (driver version or "", GPUs or None when the gpus dir is absent, problems).
    """
    base = os.path.join(proc_root, "driver", "nvidia")
    problems: list[str] = []
    driver = ""
    version_path = os.path.join(base, "version")
    try:
        driver = parse_driver_version(_read_text(version_path), source=version_path)
    except OSError as exc:
        problems.append(f"{version_path}: {exc.strerror or exc}")
    except GpuInfoError as exc:
        problems.append(str(exc))
    gpus_dir = os.path.join(base, "gpus")
    try:
        entries = sorted(os.listdir(gpus_dir))
    except OSError as exc:
        problems.append(f"{gpus_dir}: {exc.strerror or exc}")
        return driver, None, problems
    gpus = []
    for entry in entries:
        path = os.path.join(gpus_dir, entry, "information")
        try:
            gpus.append(parse_gpu_information(_read_text(path), source=path))
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
        except GpuInfoError as exc:
            problems.append(str(exc))
    return driver, gpus, problems


def find_nvidia_smi(driver_root: str, path_env: str) -> str | None:
    """``<driver root>/bin/nvidia-smi``, else the first on $PATH (stats files).

    The driver root first: the device plugin mounts the host driver's own
    tools there, and an image's nvidia-smi may come from another release.
    """
    search = os.pathsep.join(d for d in (os.path.join(driver_root, "bin"), path_env) if d)
    return shutil.which("nvidia-smi", path=search)


def device_memory_by_pid(path: str, runner: Runner, timeout: float = SMI_TIMEOUT
                         ) -> tuple[dict[int, int] | None, str]:
    """pid -> MiB of device memory each process holds (runs nvidia-smi). Returns
    (that or None, why not)."""
    code, out = runner([path, *COMPUTE_APPS_ARGS], timeout=timeout)
    if code != 0:
        why = "timed out" if code == TIMED_OUT else f"exit {code}"
        return None, f"{path} {COMPUTE_APPS_ARGS[0]}: {why}: {quote(out.strip()[-200:])}"
    try:
        return parse_compute_apps(out, source=path), ""
    except GpuInfoError as exc:
        return None, str(exc)


def run_nvidia_smi(path: str, runner: Runner, timeout: float) -> tuple[list[SmiGpu] | None,
                                                                        str]:
    """ateom's query through `runner` (runs nvidia-smi). Returns (rows or None, problem)."""
    code, out = runner([path, *SMI_ARGS], timeout=timeout)
    if code == TIMED_OUT:
        return None, f"{path}: timed out after {timeout:g}s; PCI ids and memory unknown"
    if code == NOT_RUN:
        return None, f"{path}: not run ({out.strip()[:200]}); PCI ids and memory unknown"
    if code != 0:
        return None, f"{path}: exit {code}: {quote(out.strip()[-400:])}"
    try:
        return list(parse_smi_query(out, source=path)), ""
    except GpuInfoError as exc:
        return None, str(exc)


def gather_worker_gpus(
    *, proc_root: str = DEFAULT_PROC_ROOT, gpu_glob: str | None = DEFAULT_GPU_GLOB,
    nvidia_smi: str | None = None, runner: Runner = subprocess_runner,
    smi_timeout: float = SMI_TIMEOUT,
) -> WorkerGpus:
    """This Pod's GPUs (globs /dev, reads /proc, runs nvidia-smi once).

    `gpu_glob` None gathers every GPU the module lists (the host's view, for
    tools run outside a Pod); `nvidia_smi` None skips it (facts from /proc only).
    """
    problems: list[str] = []
    sources: list[str] = []
    minors = None
    if gpu_glob is not None:
        minors, node_problems = device_minors(gpu_glob)
        problems += node_problems
        sources.append(f"this Pod's GPUs: minors of {gpu_glob} ({len(minors)})")
    driver, proc_gpus, proc_problems = read_proc(proc_root)
    problems += proc_problems
    if driver or proc_gpus is not None:
        sources.append(f"driver version, names, UUIDs, minors: "
                       f"{os.path.join(proc_root, 'driver', 'nvidia')}")
    smi: Sequence[SmiGpu] | None = None
    if nvidia_smi is not None:
        rows, problem = run_nvidia_smi(nvidia_smi, runner, smi_timeout)
        if problem:
            problems.append(problem)
        else:
            smi = rows
            sources.append(f"PCI ids, memory, NVML index: {nvidia_smi}")
    return combine(proc_driver=driver, proc_gpus=proc_gpus, smi=smi, minors=minors,
                   sources=sources, problems=problems)
