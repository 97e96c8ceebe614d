"""Checks of runsc: found and runnable, has nvproxy and the configured nvproxy flags,
supports the host driver (pure over `Facts`)."""

from __future__ import annotations

from ateom.doctor.facts import Facts
from ateom.doctor.verdict import CheckResult, Status, passed, skipped


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
    return passed(name, f"{r.path}: version {r.version}")


def check_runsc_nvproxy(f: Facts) -> CheckResult:
    name = "runsc-nvproxy"
    r = f.runsc
    if not r.found:
        return skipped(name, "runsc not usable (runsc)")
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
    return passed(name, f"runsc {r.version} supports --nvproxy{extra}")


def check_runsc_driver(f: Facts) -> CheckResult:
    name = "runsc-driver"
    r = f.runsc
    if not r.found or not r.supports_nvproxy:
        return skipped(name, "runsc without nvproxy (runsc-nvproxy)")
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
        return passed(name, f"host driver {host} is supported by runsc {r.version}")
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
