"""The doctor's verdicts: pure functions from `Facts` to one `CheckResult` each.

The order of `CHECKS` is the seeds' verification chain, from the node up to
the sandbox: device nodes, driver files, toolkit, CDI spec, runsc, and finally
a dry-run injection. A check whose input could not be gathered because an
earlier link failed says SKIP and names that link, so one root cause gives one
FAIL, not a cascade.

Severity is decided per check and written down where it is decided: FAIL
when an actor that asks for a GPU would fail or run without it, WARN when it
would run but something is fragile or unverifiable.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from ateom.doctor.config import CORE_LIBRARY_SONAMES
from ateom.doctor.facts import Facts, NodeFact


class Status(enum.Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"  # not checked: an earlier check it depends on failed


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str  # stable id, e.g. "control-nodes"
    status: Status
    summary: str  # one line: what was found
    fix: str = ""  # what to do about it (empty on PASS)
    details: tuple[str, ...] = ()  # one line per offending item


@dataclass(frozen=True, slots=True)
class Report:
    results: tuple[CheckResult, ...]

    @property
    def ok(self) -> bool:
        """True when nothing FAILed (WARN and SKIP-after-WARN do not fail a node)."""
        return not any(r.status is Status.FAIL for r in self.results)

    def result(self, name: str) -> CheckResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)


def _pass(name: str, summary: str, details: tuple[str, ...] = ()) -> CheckResult:
    return CheckResult(name, Status.PASS, summary, details=details)


def _skip(name: str, because: str) -> CheckResult:
    return CheckResult(name, Status.SKIP, f"not checked: {because}")


_INDEX = re.compile(r"(\d+)$")


def check_gpu_nodes(f: Facts) -> CheckResult:
    name = "gpu-nodes"
    glob = f.config.gpu_glob
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
    return _pass(name, f"{len(f.gpu_nodes)} GPU(s), indices {','.join(indices)}: {paths}")


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
    return _pass(name, "present: " + ", ".join(n.path for n in f.control_nodes))


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
    return _pass(name, f"{root} with lib64/ and bin/{version}")


def check_toolkit(f: Facts) -> CheckResult:
    name = "toolkit"
    tk = f.config.toolkit_dir
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
    return _pass(name, f"{tk}: nvidia-cdi-hook and nvidia-ctk executable", details)


def check_cdi_spec(f: Facts) -> CheckResult:
    name = "cdi-spec"
    spec = f.spec
    dirs = ":".join(f.config.spec_dirs)
    if not spec.files:
        kind = f.config.devices[0].partition("=")[0] if f.config.devices else "nvidia.com/gpu"
        # An invalid file is most likely the kind's own spec, which then
        # defines nothing: say so, or the operator looks for a missing file.
        invalid = f" ({len(spec.errors)} unreadable or invalid)" if spec.errors else ""
        why = f"; generating one failed: {spec.generate_error}" if spec.generate_error else ""
        return CheckResult(
            name,
            Status.FAIL,
            f"no valid CDI spec for {kind} in {dirs}{invalid}{why}",
            fix="put the node's spec in a spec dir (nvidia-ctk cdi generate --format=json "
            "--output=/var/run/cdi/nvidia.json) or mount a working toolkit so ateom generates it"
            + ("; fix or remove the invalid files (ateom cdi validate DIR)" if spec.errors else ""),
            details=spec.errors,
        )
    source = f"generated by {spec.generated_by}" if spec.generated_by else ", ".join(spec.files)
    if spec.errors:
        # The kind's own spec loaded; others are broken. Their devices are
        # unusable, ours are not, so a warning.
        return CheckResult(
            name,
            Status.WARN,
            f"spec found ({source}) but {len(spec.errors)} spec file(s) are invalid",
            fix="fix or remove the invalid spec files (ateom cdi validate DIR names the field)",
            details=spec.errors,
        )
    return _pass(name, f"{source} ({len(spec.devices)} devices)")


def check_cdi_resolve(f: Facts) -> CheckResult:
    name = "cdi-resolve"
    wanted = ", ".join(f.config.devices)
    if not f.spec.files:
        return _skip(name, "no CDI spec (cdi-spec)")
    if f.spec.resolution is None:
        return CheckResult(
            name,
            Status.FAIL,
            f"the default devices do not resolve: {wanted}",
            fix="regenerate the spec on this node so it defines the devices the Pod was given",
            details=tuple(f.spec.resolve_error.splitlines()),
        )
    steps = len(f.spec.resolution.steps)
    return _pass(name, f"{wanted} resolves to {steps} edit step(s)")


def _node_mismatch(declared_type: str | None, major: int | None, minor: int | None,
                   host: NodeFact) -> str:
    if not host.exists:
        return f"missing on the host ({host.error or 'no such file'})"
    if host.kind not in ("c", "b"):
        return "host path is not a device node"
    if declared_type and declared_type in ("c", "b", "u") and host.kind != (
        "c" if declared_type == "u" else declared_type
    ):
        return f"spec says type {declared_type}, host has {host.kind}"
    if major is not None and (major, minor) != (host.major, host.minor):
        return f"spec says {major}:{minor}, host has {host.major}:{host.minor}"
    return ""


def check_spec_device_nodes(f: Facts) -> CheckResult:
    name = "spec-device-nodes"
    if f.spec.resolution is None:
        return _skip(name, "the default devices did not resolve (cdi-resolve)")
    stale = []
    for n in f.spec_nodes:
        d = n.declared
        why = _node_mismatch(d.type, d.major, d.minor, n.host)
        if why:
            stale.append(f"{n.origin}: {d.path} (host {d.host}): {why}")
    if stale:
        return CheckResult(
            name,
            Status.FAIL,
            f"{len(stale)} device node(s) in the spec do not match this host",
            fix="the spec is stale (generated on another node or before a driver change): "
            "regenerate it with nvidia-ctk cdi generate on this node",
            details=tuple(stale),
        )
    return _pass(name, f"{len(f.spec_nodes)} device node(s) exist with matching type/numbers")


def check_spec_libraries(f: Facts) -> CheckResult:
    name = "spec-libraries"
    if f.spec.resolution is None:
        return _skip(name, "the default devices did not resolve (cdi-resolve)")
    missing = [lib for lib in f.libraries if not lib.exists]
    unreadable = [lib for lib in f.libraries if lib.exists and not lib.soname]

    def core(lib_name: str) -> bool:
        stem = lib_name.split(".so")[0]
        return any(s.split(".so")[0] == stem for s in CORE_LIBRARY_SONAMES)

    if missing:
        return CheckResult(
            name,
            Status.FAIL,
            f"{len(missing)} library mount source(s) missing or not regular files",
            fix="the spec names driver files this worker does not have: check "
            "ATEOM_NVIDIA_DRIVER_ROOT and regenerate the spec against it",
            details=tuple(
                f"{lib.host_path} (for {lib.container_path})"
                + (f": {lib.error}" if lib.error else "")
                for lib in missing
            ),
        )
    details = tuple(
        f"{lib.host_path}: {lib.error or 'no DT_SONAME'}" for lib in unreadable
    )
    # Without its SONAME link the loader cannot find libcuda.so.1 /
    # libnvidia-ml.so.1 at all; another library without one is skipped by the
    # injector and only costs that library.
    if any(core(os.path.basename(lib.container_path)) for lib in unreadable):
        return CheckResult(
            name,
            Status.FAIL,
            "a core driver library has no readable SONAME: workloads will not find it",
            fix="the file is not the driver's library (truncated, replaced or a stub): "
            "reinstall the driver on the node or fix ATEOM_NVIDIA_DRIVER_ROOT",
            details=details,
        )
    if unreadable:
        return CheckResult(
            name,
            Status.WARN,
            f"{len(unreadable)} library(ies) have no readable SONAME; their links are skipped",
            fix="harmless unless a workload needs them; otherwise reinstall the driver",
            details=details,
        )
    return _pass(name, f"{len(f.libraries)} libraries exist with readable SONAMEs")


def check_runsc(f: Facts) -> CheckResult:
    name = "runsc"
    r = f.runsc
    if not r.found:
        return CheckResult(
            name,
            Status.FAIL,
            f"runsc {r.path}: {r.error or 'not found'}",
            fix="install runsc in the image (Dockerfile RUNSC_FROM) or set ATEOM_RUNSC/--runsc",
        )
    return _pass(name, f"{r.path}: version {r.version}")


def check_runsc_nvproxy(f: Facts) -> CheckResult:
    name = "runsc-nvproxy"
    r = f.runsc
    if not r.found:
        return _skip(name, "runsc not usable (runsc)")
    if not r.supports_nvproxy:
        return CheckResult(
            name,
            Status.FAIL,
            f"runsc {r.version} has no --nvproxy: GPU actors will be refused",
            fix="use a gVisor release with nvproxy (2023+); Debian bookworm's runsc is a 2022 "
            "build: build the image with --build-arg RUNSC_FROM=binary",
        )
    unsupported = [flag for flag, ok in r.flags if not ok]
    if unsupported:
        return CheckResult(
            name,
            Status.FAIL,
            f"runsc {r.version} lacks configured flag(s): {', '.join(unsupported)}",
            fix="unset --nvproxy-driver-version/--nvproxy-capabilities or use a newer runsc",
        )
    extra = f" and {', '.join(flag for flag, _ in r.flags)}" if r.flags else ""
    return _pass(name, f"runsc {r.version} supports --nvproxy{extra}")


def check_runsc_driver(f: Facts) -> CheckResult:
    name = "runsc-driver"
    r = f.runsc
    if not r.found or not r.supports_nvproxy:
        return _skip(name, "runsc without nvproxy (runsc-nvproxy)")
    if r.supported_drivers is None:
        return CheckResult(
            name,
            Status.WARN,
            f"runsc {r.version} cannot list its supported drivers; compatibility unverified",
            fix="use a runsc with `nvproxy list-supported-drivers` to verify the host driver",
        )
    host = f.host_driver_version
    if not host:
        return CheckResult(
            name,
            Status.WARN,
            "host driver version unknown (no /proc/driver/nvidia/version, no libcuda.so.<v>)",
            fix="check the driver is loaded on the node and its libraries are in the driver root",
        )
    if host in r.supported_drivers:
        return _pass(name, f"host driver {host} is supported by runsc {r.version}")
    pinned = f.config.nvproxy_driver_version
    if pinned:
        # The operator chose an ABI to emulate; runsc cannot confirm it fits.
        return CheckResult(
            name,
            Status.WARN,
            f"host driver {host} not in runsc's list; --nvproxy-driver-version={pinned} overrides",
            fix="make sure the pinned version's ABI matches the host driver",
        )
    return CheckResult(
        name,
        Status.FAIL,
        f"host driver {host} is not supported by runsc {r.version}",
        fix="upgrade runsc, or pin a compatible ABI with --nvproxy-driver-version",
        details=("supported: " + ", ".join(r.supported_drivers[-10:]),),
    )


def check_dry_run_injection(f: Facts) -> CheckResult:
    name = "dry-run-injection"
    inj = f.injection
    if inj is None:
        return _skip(name, "nothing to inject (cdi-resolve)")
    if inj.skipped:
        return _skip(name, inj.skipped)
    if inj.error:
        return CheckResult(
            name,
            Status.FAIL,
            "injecting the default devices into a scratch bundle fails",
            fix="fix the cause quoted below; `ateom inject --dry-run` reproduces it",
            details=tuple(inj.error.splitlines()),
        )
    problems = []
    keys = {e.partition("=")[0] for e in inj.env}
    if "NVIDIA_VISIBLE_DEVICES" in keys:
        problems.append(
            "NVIDIA_VISIBLE_DEVICES survives injection: nvproxy would run nvidia-container-cli "
            "and the actor sees 0 GPUs"
        )
    linked = {os.path.basename(link) for link, _ in inj.symlinks}
    for soname in CORE_LIBRARY_SONAMES:
        if soname not in linked:
            problems.append(f"no {soname} SONAME link staged: workloads cannot load it")
    if problems:
        return CheckResult(
            name,
            Status.FAIL,
            "the injected bundle would not give a workload a working GPU",
            fix="check the injector's options (drop-env, library dirs) and the spec's "
            "library mounts; `ateom inject --dry-run` shows the diff",
            details=tuple(problems),
        )
    links = ", ".join(sorted(linked & set(CORE_LIBRARY_SONAMES)))
    return _pass(
        name,
        f"NVIDIA_VISIBLE_DEVICES stripped; {links} staged ({len(inj.symlinks)} links)",
    )


CHECKS: tuple[Callable[[Facts], CheckResult], ...] = (
    check_gpu_nodes,
    check_control_nodes,
    check_driver_root,
    check_toolkit,
    check_cdi_spec,
    check_cdi_resolve,
    check_spec_device_nodes,
    check_spec_libraries,
    check_runsc,
    check_runsc_nvproxy,
    check_runsc_driver,
    check_dry_run_injection,
)

CHECK_NAMES = (
    "gpu-nodes",
    "control-nodes",
    "driver-root",
    "toolkit",
    "cdi-spec",
    "cdi-resolve",
    "spec-device-nodes",
    "spec-libraries",
    "runsc",
    "runsc-nvproxy",
    "runsc-driver",
    "dry-run-injection",
)


def judge(facts: Facts) -> Report:
    """Run every check over `facts`, in chain order (pure)."""
    return Report(tuple(check(facts) for check in CHECKS))
