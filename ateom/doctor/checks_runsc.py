"""Checks of runsc: found and runnable, has nvproxy and the configured nvproxy flags,
supports the host driver (pure over `Facts`)."""

from __future__ import annotations

from ateom.doctor.facts import Facts
from ateom.doctor.verdict import CheckResult, Status, passed, skipped
from ateom.runsc.commands import global_flag, ignores_cgroups


def check_runsc(f: Facts) -> CheckResult:
    name = "runsc"
    r = f.runsc
    if not r.found:
        return CheckResult(
            name,
            Status.FAIL,
            f"runsc {r.path}: {r.error or 'not found'}",
            fix="install runsc in the image (Dockerfile: RUNSC_BINARY or deploy/runsc) or set "
            "ATEOM_RUNSC/--runsc",
        )
    return passed(name, f"{r.path}: version {r.version}")


def check_runsc_global_flags(f: Facts) -> CheckResult:
    """FAIL when a --runsc-global-flag names a flag this runsc does not have: runsc
    refuses every call then ("flag provided but not defined"), and the daemon
    serves NOT_SERVING until it is mended."""
    name = "runsc-global-flags"
    r = f.runsc
    if not r.found:
        return skipped(name, "runsc not usable (runsc)")
    if r.unknown_global_flags:
        return CheckResult(
            name, Status.FAIL,
            f"runsc {r.version} has no flag {', '.join(r.unknown_global_flags)}: every runsc"
            " call would fail, and ateom serve says NOT_SERVING",
            fix="correct or remove it in ATEOM_RUNSC_GLOBAL_FLAGS / --runsc-global-flag"
            " (`runsc flags` lists the ones this runsc has)")
    given = f.config.runsc_global_flags
    return passed(name, f"runsc knows {' '.join(given)}" if given else "none given")


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
            "build: build the image on Debian 13 or with --build-arg RUNSC_BINARY=<release>",
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
    known = f"runsc {r.version} knows drivers {r.supported_drivers[0]} to {r.supported_drivers[-1]}"
    pinned = f.config.gpu.nvproxy.driver_version
    if pinned and pinned not in r.supported_drivers:
        # A boot FATAL in the sentry, which the CLI shows only as "EOF"; ateom
        # refuses GPU actors up front for it.
        return CheckResult(
            name,
            Status.FAIL,
            f"--nvproxy-driver-version={pinned} is not a driver runsc knows ({known}): "
            "GPU actors will be refused",
            fix="pin one of the listed versions (the ABI closest to the host driver) or "
            "upgrade runsc",
            details=("supported: " + ", ".join(r.supported_drivers[-10:]),),
        )
    if host in r.supported_drivers:
        return passed(name, f"host driver {host} is supported ({known})")
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
        f"host driver {host} is not supported ({known}): GPU actors will be refused",
        fix="upgrade runsc, or pin a compatible ABI with --nvproxy-driver-version",
        details=("supported: " + ", ".join(r.supported_drivers[-10:]),),
    )


# What writing a root mapping into a new user namespace takes (capability bits).
_MAP_CAPS = ((7, "CAP_SETUID"), (6, "CAP_SETGID"), (31, "CAP_SETFCAP"))


def check_user_namespaces(f: Facts) -> CheckResult:
    """runsc starts its sandbox and gofers in new user namespaces: FAIL where the
    kernel refuses them, with the real cause (runsc's hint always blames the sysctl)."""
    name = "user-namespaces"
    u = f.userns
    if u is None:
        return skipped(name, "not probed")
    if not u.probed:
        return CheckResult(name, Status.WARN, f"could not test user namespaces: {u.error}",
                           fix="check that the image's python3 runs")
    if not u.error and u.map_error:
        missing = [cap for bit, cap in _MAP_CAPS
                   if u.capabilities is not None and not u.capabilities >> bit & 1]
        lacks = f": this process lacks {', '.join(missing)}" if missing else ""
        return CheckResult(
            name, Status.FAIL,
            f"runsc cannot map root into its user namespaces ({u.map_error}){lacks}; every "
            "Run fails with \"fork/exec /proc/self/exe: operation not permitted\"",
            fix="add SETUID, SETGID and SETFCAP to the container's capabilities (mapping "
            "uid 0 needs CAP_SETFCAP since Linux 5.12; deploy/gpu-worker-pod.yaml has them)")
    if not u.error:
        return passed(name, "a child process can create and map a user namespace, as runsc does")
    if u.chroot:
        return CheckResult(
            name, Status.FAIL,
            f"runsc cannot create user namespaces ({u.error}): this process is inside a "
            "chroot, where the kernel refuses CLONE_NEWUSER; runsc's own hint about "
            "max_user_namespaces is wrong here",
            fix="run the worker in a container, or enter the root filesystem with "
            "`unshare --mount` and pivot_root instead of chroot")
    if u.max_user_namespaces == 0:
        return CheckResult(
            name, Status.FAIL,
            f"runsc cannot create user namespaces ({u.error}): user.max_user_namespaces is 0",
            fix="sysctl -w user.max_user_namespaces=15000 on the node")
    return CheckResult(
        name, Status.FAIL, f"runsc cannot create user namespaces ({u.error})",
        fix="allow user namespaces for the worker (seccomp/AppArmor profile, "
        "kernel.unprivileged_userns_clone, the container runtime's settings)")


def check_runsc_cgroups(f: Facts) -> CheckResult:
    """FAIL where runsc would have to make a cgroup per sandbox on a read-only cgroupfs
    (every container that is not privileged gets one): every Run fails at create."""
    name = "runsc-cgroups"
    flags = f.config.runsc_global_flags
    if ignores_cgroups(flags):
        return passed(name, "runsc runs with --ignore-cgroups: every actor in the worker's "
                            "own cgroup, its cpu/memory limits written but not enforced")
    if f.cgroups is None:
        return CheckResult(name, Status.WARN, "could not read /proc/self/mountinfo to see "
                           "whether runsc can make a cgroup per sandbox")
    readonly = [m.path for m in f.cgroups if m.readonly]
    if readonly or not f.cgroups:
        where = ("read-only here: " + ", ".join(readonly[:4])) if readonly else "not mounted"
        return CheckResult(
            name, Status.FAIL,
            f"cgroupfs is {where}; runsc makes a cgroup per sandbox, so every Run fails "
            "(\"mkdir /sys/fs/cgroup/...: read-only file system\")",
            fix="add --ignore-cgroups to ATEOM_RUNSC_GLOBAL_FLAGS (deploy/gpu-worker-pod.yaml "
            "has it; actors then share the Pod's cgroup)")
    return passed(name, "cgroupfs is writable: runsc makes a cgroup per sandbox")


def check_runsc_network(f: Facts) -> CheckResult:
    """Whether actors get a network of their own (`ateom.network`): what the ingress,
    wakeup probes and egress need. PASS with --network=none too (the operator's
    choice: loopback only); WARN where the runsc cannot take a namespace here (its
    actors run with --network=none) or with --network=host."""
    name = "runsc-network"
    network = global_flag(f.config.runsc_global_flags, "network")
    if network == "none":
        return passed(name, "actors get a loopback interface only (--network=none): no"
                      " ingress, wakeup probes or egress")
    if network == "host":
        return CheckResult(name, Status.WARN, "runsc runs with --network=host: every actor "
                           "shares the worker's network namespace and its addresses",
                           fix="drop --network=host: each actor then gets a network of its"
                           " own, or use --network=none for none")
    if f.runsc.netns_problem:
        return CheckResult(
            name, Status.WARN, "actors run with --network=none (no ingress, wakeup probes or"
            " egress): this runsc cannot take their network namespaces here",
            fix="run a runsc of release-20240731 or newer (--runsc / $ATEOM_RUNSC), or add"
            " --network=none to $ATEOM_RUNSC_GLOBAL_FLAGS to say so",
            details=(f.runsc.netns_problem,))
    return passed(name, f"each actor gets a network namespace of its own (runsc network "
                  f"{network or 'sandbox, its default'}): ingress, wakeup probes, egress")
