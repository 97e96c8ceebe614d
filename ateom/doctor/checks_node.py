"""Checks of the node's GPU pieces as the Pod has them: device nodes, driver root, toolkit.

Each is a pure function of `Facts`; FAIL when a GPU actor would fail or run
without its GPU, WARN when it would run but something is fragile.
"""

from __future__ import annotations

import os
import re

from ateom.doctor.facts import Facts
from ateom.doctor.verdict import CheckResult, Status, passed, skipped

_INDEX = re.compile(r"(\d+)$")


def check_gpu_nodes(f: Facts) -> CheckResult:
    name = "gpu-nodes"
    glob = f.config.node.gpu_glob
    if not f.gpu_nodes:
        return CheckResult(
            name,
            Status.FAIL,
            f"no GPU device node matches {glob}",
            fix="request nvidia.com/gpu in the Pod's resources.limits (and requests) and check "
            "that the NVIDIA device plugin runs on this node; or set ATEOM_GPU_GLOB/--gpu-glob",
        )
    bad = [n for n in f.gpu_nodes if n.kind != "c"]
    if bad:
        return CheckResult(
            name,
            Status.FAIL,
            f"{len(bad)} of the nodes matching {glob} are not character devices",
            fix="the device plugin mounts real char devices; remove whatever file shadows them",
            details=tuple(f"{n.path}: {n.kind or n.error}" for n in bad),
        )
    indices = []
    for n in f.gpu_nodes:
        m = _INDEX.search(n.path)
        indices.append(m.group(1) if m else os.path.basename(n.path))
    paths = ", ".join(n.path for n in f.gpu_nodes)
    return passed(name, f"{len(f.gpu_nodes)} GPU(s), indices {','.join(indices)}: {paths}")


def check_control_nodes(f: Facts) -> CheckResult:
    name = "control-nodes"
    bad = [n for n in f.control_nodes if n.kind != "c"]
    if bad:
        what = ", ".join(n.path for n in bad)
        return CheckResult(
            name,
            Status.FAIL,
            f"control node(s) missing or not char devices: {what}",
            fix="nvproxy needs /dev/nvidiactl and /dev/nvidia-uvm: load nvidia-uvm on the node "
            "(nvidia-modprobe -u -c=0) and make sure the device plugin passes control nodes "
            "to GPU containers",
            details=tuple(f"{n.path}: {n.error or n.kind or 'missing'}" for n in bad),
        )
    return passed(name, "present: " + ", ".join(n.path for n in f.control_nodes))


def check_daemon_dirs(f: Facts) -> CheckResult:
    """FAIL when --actors-root or --run-dir cannot serve: ateom serve says
    NOT_SERVING (and refuses every Run) until it is mended."""
    name = "daemon-dirs"
    if not f.daemon_dirs:
        return skipped(name, "not looked at")
    bad = [(flag, path, why) for flag, path, why in f.daemon_dirs if why]
    if bad:
        return CheckResult(
            name, Status.FAIL,
            "; ".join(f"{flag} {path}: {why}" for flag, path, why in bad),
            fix="mount the node agent's actors volume at --actors-root, and give --run-dir a"
            " writable directory (an emptyDir or /run in the worker)")
    return passed(name, ", ".join(f"{flag} {path}" for flag, path, _ in f.daemon_dirs))


def check_worker(f: Facts) -> CheckResult:
    """How Substrate's controller started this worker. WARN, never FAIL: an actor runs
    without a known capacity, and a flag taken but not served yet (the trace relay,
    a broker's identity) costs the actor that feature, not its run."""
    name = "worker"
    config = f.config
    if not config.pod_uid:
        # A standalone daemon is a configuration of its own, not a fault.
        return passed(name, "standalone: not started as a Substrate worker (no --pod-uid"
                      " or $POD_UID)")
    capacity = f.capacity
    known = ("capacity not read" if capacity is None else
             f"cpu {capacity.cpu_milli}m, memory {capacity.memory_bytes} bytes")
    problems = [*(capacity.problems if capacity is not None else ()),
                *(f"accepted, not served yet: {flag}" for flag in config.accepted_not_served)]
    summary = f"pod {config.pod_uid}: {known}"
    if problems:
        return CheckResult(
            name, Status.WARN, f"{summary}; {len(problems)} thing(s) to know",
            fix="mount the controller's downward-API volume (limits.cpu in millicores as"
            " cpu_milli, limits.memory as memory_bytes) at --capacity-dir; the flags taken"
            " but not served are listed in docs/operations.md",
            details=tuple(problems))
    return passed(name, summary)


def check_driver_root(f: Facts) -> CheckResult:
    name = "driver-root"
    root = f.driver_root.path
    fix = (
        "set ATEOM_NVIDIA_DRIVER_ROOT to where the driver's files are mounted in the worker "
        "(the device plugin's /usr/local/nvidia, with lib64/ and bin/)"
    )
    if not f.driver_root.is_dir:
        return CheckResult(name, Status.FAIL, f"driver root {root} is not a directory", fix=fix)
    if not f.driver_lib_dir.is_dir:
        return CheckResult(
            name, Status.FAIL, f"{f.driver_lib_dir.path} is missing: no driver libraries", fix=fix
        )
    if not f.driver_bin_dir.is_dir:
        # Only spec generation and nvidia-smi use bin/; injection works without it.
        return CheckResult(
            name,
            Status.WARN,
            f"{f.driver_bin_dir.path} is missing (nvidia-smi; used when generating a spec)",
            fix=fix,
        )
    version = f" (driver {f.host_driver_version})" if f.host_driver_version else ""
    return passed(name, f"{root} with lib64/ and bin/{version}")


def check_toolkit(f: Facts) -> CheckResult:
    name = "toolkit"
    tk = f.config.node.toolkit_dir
    fix = (
        f"mount the host's NVIDIA container toolkit read-only at {tk} (hostPath of the GPU "
        "operator's /usr/local/nvidia/toolkit), or set ATEOM_NVIDIA_TOOLKIT_DIR"
    )
    if not f.toolkit_dir.is_dir:
        return CheckResult(name, Status.FAIL, f"toolkit dir {tk} does not exist", fix=fix)
    tools = {t.name: t for t in f.tools}
    hook = tools.get("nvidia-cdi-hook")
    # The hook binary is what every kept CDI hook is rewritten to run; without
    # it create-symlinks and enable-cuda-compat cannot run.
    if hook is None or not hook.exists or not hook.executable:
        state = "missing" if hook is None or not hook.exists else "not executable"
        path = hook.path if hook else os.path.join(tk, "nvidia-cdi-hook")
        return CheckResult(name, Status.FAIL, f"nvidia-cdi-hook {state}: {path}", fix=fix)
    details = tuple(
        f"{t.name}: {t.path}" + (" (shell wrapper)" if t.is_script else "")
        for t in f.tools
        if t.exists
    )
    warnings = []
    ctk = tools.get("nvidia-ctk")
    if ctk is None or not ctk.exists or not ctk.executable:
        warnings.append("nvidia-ctk unusable: a missing CDI spec cannot be generated")
    wrappers = [t.name for t in f.tools if t.exists and t.is_script and not t.is_real]
    if wrappers:
        warnings.append(
            f"{', '.join(wrappers)} is a shell wrapper and no .real binary sits next to it"
        )
    if warnings:
        return CheckResult(
            name,
            Status.WARN,
            "; ".join(warnings),
            fix="mount the toolkit directory that holds the .real binaries and nvidia-ctk",
            details=details,
        )
    return passed(name, f"{tk}: nvidia-cdi-hook and nvidia-ctk executable", details)
