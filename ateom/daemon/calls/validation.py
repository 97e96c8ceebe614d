"""Pure checks of a request, run before anything touches the disk or runsc.

Each check raises `AteomError` with the gRPC code the node agent should see
and a message naming the field; an input echoed in a message goes through
`quote`, so a 1 MiB field still gets its short reason back (an unbounded one
overflows gRPC's status metadata and the caller only sees "metadata size
exceeds hard limit"). Nothing here stats a file: the one check
that must (symlinks escaping --actors-root) is `check_dirs_on_disk`, an I/O
function kept next to its pure sibling.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence

from ateom.cdi.names import parse_qualified_name
from ateom.daemon.calls.requests import (
    CPU_PERIOD_USEC,
    ActorDirs,
    ActorRef,
    CheckpointRequest,
    ContainerRequest,
    DevicePolicy,
    GpuWish,
    RestoreRequest,
    RunRequest,
    TerminateRequest,
)
from ateom.errors import QUOTE_LIMIT, AteomError, ErrorCode, QualifiedNameError, quote
from ateom.network.wakeup import check_probe

# actor_uid becomes a directory name (runsc -root, logs): letters, digits and
# ._- only, so it can never be "..", contain "/" or start with "-".
_SAFE_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Container names are Kubernetes container names (DNS-1123 labels). They also
# become runsc container ids and bundle sub-directories; a leading "_" is
# impossible, so no app container can be mistaken for the pause container.
_CONTAINER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Linux's PATH_MAX, NUL included: a longer path cannot be opened, and
# messages later in a call echo paths that passed these checks.
_PATH_MAX = 4096


def invalid(message: str) -> AteomError:
    return AteomError(message, code=ErrorCode.INVALID_ARGUMENT)


def unimplemented(field: str, why: str = "not supported by ateom") -> AteomError:
    return AteomError(f"{field} is set but {why}", code=ErrorCode.UNIMPLEMENTED)


def check_no_nul(field: str, value: str) -> None:
    """No NUL character: every request string ends up in a path, an argv, a log
    line or a message, and the OS refuses a NUL in the first two (Python then
    raises ValueError "embedded null byte", which would read as INTERNAL)."""
    if "\0" in value:
        raise invalid(f"{field} {quote(value)}: must not contain a NUL character")


def check_actor_uid(uid: str) -> None:
    if not uid:
        raise invalid("actor_uid: required")
    if not _SAFE_UID.match(uid) or ".." in uid:
        raise invalid(
            f"actor_uid {quote(uid)}: must be 1-128 letters, digits, '.', '_' or '-',"
            " starting with a letter or digit"
        )


def check_actor(actor: ActorRef) -> None:
    check_actor_uid(actor.actor_uid)
    for name in ("atespace", "actor_name", "actor_template_atespace", "actor_template_name"):
        check_no_nul(name, getattr(actor, name))


def check_device_name(field: str, name: str) -> None:
    try:
        parse_qualified_name(name)
    except QualifiedNameError as exc:
        if len(name) > QUOTE_LIMIT:  # the parser's own message quotes all of it
            raise invalid(f"{field} {quote(name)}: not a qualified CDI device name"
                          " (vendor.com/class=name)") from None
        raise invalid(f"{field}: {exc}") from None


def check_containers(containers: Sequence[ContainerRequest], *, pause: str = "_pause") -> None:
    seen: set[str] = set()
    for i, c in enumerate(containers):
        where = f"spec.containers[{i}]"
        if not _CONTAINER_NAME.match(c.name):
            raise invalid(
                f"{where}.name {quote(c.name)}: must be a DNS-1123 label"
                " (lowercase letters, digits, '-', at most 63)"
            )
        if c.name == pause:
            raise invalid(
                f"{where}.name {quote(c.name)}: is the sandbox root's (--pause-container)")
        if c.name in seen:
            raise invalid(f"{where}.name {quote(c.name)}: duplicate container name")
        seen.add(c.name)
        choice = c.devices
        if choice.policy is DevicePolicy.EXPLICIT:
            if not choice.names:
                raise invalid(f"{where}.devices: explicit policy needs at least one name")
            for j, name in enumerate(choice.names):
                check_device_name(f"{where}.devices.names[{j}]", name)
        elif choice.names:
            raise invalid(
                f"{where}.devices.names: given with policy {choice.policy.value};"
                " names need the explicit policy"
            )
        # Volume mounts are checked where they are planned (`ateom.volumes.plan_mounts`,
        # from the planner): names, paths, roots, each host dir on disk.
        if c.wakeup_probe is not None:
            probe = c.wakeup_probe
            check_probe(f"{where}.wakeup_probe", probe.path, probe.port, probe.timeout_seconds)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_path(field: str, path: str, actors_root: str) -> None:
    """`path` (the request's `field`) is absolute, normalized and strictly under `actors_root`."""
    root = os.path.normpath(actors_root)
    check_no_nul(field, path)
    if len(os.fsencode(path)) >= _PATH_MAX:
        raise invalid(f"{field} {quote(path)}: longer than PATH_MAX ({_PATH_MAX} bytes)")
    if not os.path.isabs(path):
        raise invalid(f"{field} {quote(path)}: must be an absolute path")
    if os.path.normpath(path) != path or "//" in path:
        raise invalid(f"{field} {quote(path)}: must be normalized (no '.', '..', '//')")
    if not _under(path, root) or path == root:
        raise invalid(f"{field} {quote(path)}: must be under --actors-root {root}")


def check_path_on_disk(field: str, path: str, actors_root: str) -> None:
    """Stat: `path` may neither leave `actors_root` through a symlink nor land on it.

    The root itself is refused as in `check_path`: a restore_dir that
    resolves to it would be removed whole after a restore.
    """
    check_no_nul(field, path)
    root = os.path.realpath(actors_root)
    resolved = os.path.realpath(path)
    if not _under(resolved, root) or resolved == root:
        raise invalid(
            f"{field} {quote(path)}: resolves to {quote(resolved)}, which is not under"
            f" --actors-root {root}"
        )


def check_dirs(dirs: ActorDirs, actors_root: str, required: Iterable[str]) -> None:
    """Every given path is absolute, normalized and under `actors_root`; `required` are set."""
    for name in required:
        if not getattr(dirs, name):
            raise invalid(f"actor_dirs.{name}: required")
    for name, path in dirs.items():
        if path:
            check_path(f"actor_dirs.{name}", path, actors_root)


def check_dirs_on_disk(dirs: ActorDirs, actors_root: str) -> None:
    """Stat: no given path may leave `actors_root` through a symlink, or land on it."""
    for name, path in dirs.items():
        if path:
            check_path_on_disk(f"actor_dirs.{name}", path, actors_root)


def check_runsc_path(requested: str, configured: str, runsc_dir: str, *,
                     resolved: str = "") -> str:
    """The binary to execute: the configured one, or one under --runsc-dir.

    `resolved` is where the configured runsc was found on PATH (when
    configured as a bare name): the request may name that path too. The
    request must not choose an arbitrary binary: anything else is
    PERMISSION_DENIED, whatever the file is.
    """
    check_no_nul("runsc_path", requested)
    if not requested or requested == configured:
        return configured
    if resolved and requested == resolved:
        return requested
    if (
        runsc_dir
        and os.path.isabs(requested)
        and os.path.normpath(requested) == requested
        and _under(requested, os.path.normpath(runsc_dir))
        and requested != os.path.normpath(runsc_dir)
    ):
        return requested
    allowed = f"{configured!r}" + (f" or a binary under {runsc_dir}" if runsc_dir else "")
    raise AteomError(
        f"runsc_path {quote(requested)}: not allowed; ateom only runs {allowed}",
        code=ErrorCode.PERMISSION_DENIED,
    )


# A gateway's DNS name or IP and its port, as `host:port` (`[v6]:port` for IPv6).
_GATEWAY = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,252}))"
                      r":([1-9][0-9]{0,4})$")


def _check_egress(egress_gateway: str | None) -> None:
    """`egress_gateway.address` is `host:port` (pure); whether this worker can carry
    egress at all is the service's to say (it depends on its network and flags)."""
    if egress_gateway is None:
        return
    found = _GATEWAY.match(egress_gateway)
    if found is None or int(found.group(3)) > 65535:
        raise invalid(f"egress_gateway.address {quote(egress_gateway)}: must be HOST:PORT"
                      " (a DNS name or an IP address, and a port in 1..65535)")


# Runtime assets the node agent fetches for its micro-VM runtime, never for gVisor.
_MICROVM_ASSET_PREFIXES = ("cloud-hypervisor", "virtiofsd", "kata-")


def check_runtime_assets(assets: Mapping[str, str], runsc: str, requested: str) -> None:
    """The node agent's runtime assets for a gVisor call (pure): the newest sends none;
    older ones send ``{"runsc": <runsc_path>}``, accepted when it names the runsc this
    call runs (`runsc`, as `check_runsc_path` chose it from `requested`). A micro-VM
    asset means the call was meant for another runtime: FAILED_PRECONDITION naming it."""
    for name, path in sorted(assets.items()):
        field = f"runtime_asset_paths[{quote(name)}]"
        if name == "runsc":
            if path not in (runsc, requested):
                raise invalid(f"{field} {quote(path)}: differs from the runsc this call runs"
                              f" ({quote(runsc)}, from runsc_path {quote(requested)})")
        elif name.startswith(_MICROVM_ASSET_PREFIXES):
            raise AteomError(f"{field} {quote(path)}: a micro-VM runtime asset; this worker"
                             " runs actors under gVisor (runsc) and uses none",
                             code=ErrorCode.FAILED_PRECONDITION)
        else:
            raise invalid(f"{field} {quote(path)}: not an asset the gVisor runtime uses"
                          " (only \"runsc\", the same path as runsc_path)")


# runsc reads the sandbox's CPU quota (derived from cpu_milli) as an int64.
_MAX_CPU_MILLI = (2**63 - 1) * 1000 // CPU_PERIOD_USEC


def _check_resources(cpu_milli: int, memory_bytes: int) -> None:
    if cpu_milli < 0:
        raise invalid(f"cpu_milli {cpu_milli}: must be >= 0")
    if cpu_milli > _MAX_CPU_MILLI:
        raise invalid(f"cpu_milli {cpu_milli}: must be at most {_MAX_CPU_MILLI}")
    if memory_bytes < 0:
        raise invalid(f"memory_bytes {memory_bytes}: must be >= 0")


# A snapshot's object-storage name is only a name to ateom (the node agent moves the
# files), recorded in logs; longer than this it is not one.
_SNAPSHOT_URI_MAX = 4096


def _check_snapshot_uri(uri: str) -> None:
    if len(uri.encode()) >= _SNAPSHOT_URI_MAX:
        raise invalid(f"snapshot_uri {quote(uri)}: longer than {_SNAPSHOT_URI_MAX} bytes")


def check_gpus(gpus: GpuWish | None) -> None:
    """A GPU request names a count or devices, not both, not neither (pure)."""
    if gpus is None:
        return
    if gpus.count and gpus.names:
        raise invalid("gpus: give count or names, not both")
    if not gpus.count and not gpus.names:
        raise invalid("gpus: give count > 0 or names (omit gpus for every GPU of the Pod)")
    if len(set(gpus.names)) != len(gpus.names):
        raise invalid("gpus.names: a device is named twice")
    for i, name in enumerate(gpus.names):
        check_device_name(f"gpus.names[{i}]", name)


def check_run(req: RunRequest, actors_root: str, *, pause: str = "_pause") -> None:
    check_actor(req.actor)
    check_gpus(req.gpus)
    check_dirs(req.dirs, actors_root, ("oci_bundle_dir",))
    check_containers(req.containers, pause=pause)
    _check_egress(req.egress_gateway)
    _check_resources(req.cpu_milli, req.memory_bytes)


def check_checkpoint(req: CheckpointRequest, actors_root: str, *, pause: str = "_pause") -> None:
    check_actor(req.actor)
    check_dirs(req.dirs, actors_root, ("checkpoint_dir",))
    check_containers(req.containers, pause=pause)
    _check_snapshot_uri(req.snapshot_uri)


def check_restore(req: RestoreRequest, actors_root: str, *, pause: str = "_pause") -> None:
    check_actor(req.actor)
    check_gpus(req.gpus)
    check_dirs(req.dirs, actors_root, ("oci_bundle_dir", "restore_dir"))
    check_containers(req.containers, pause=pause)
    _check_egress(req.egress_gateway)
    _check_resources(req.cpu_milli, req.memory_bytes)
    _check_snapshot_uri(req.snapshot_uri)
    if not req.preserve_restore_dir:
        # restore_dir is removed after the restore: not with the actor's other dirs.
        for name, path in req.dirs.items():
            if name != "restore_dir" and path and _under(path, req.dirs.restore_dir):
                raise invalid(
                    f"actor_dirs.restore_dir {quote(req.dirs.restore_dir)}: holds"
                    f" actor_dirs.{name} {quote(path)}, which would be removed with it after"
                    " the restore (or set preserve_restore_dir)")


def check_terminate(req: TerminateRequest, actors_root: str, *, pause: str = "_pause") -> None:
    check_actor(req.actor)
    check_dirs(req.dirs, actors_root, ())
    check_containers(req.containers, pause=pause)
