"""The merge: CDI edits + facts about the host -> a new OCI config. Pure.

Nothing here touches the filesystem: the host's device numbers arrive as
`HostNode` facts gathered by the shell (`ateom.inject.injector`), and every
vendor choice (hook allowlist, trusted hook binary, env to drop, library dirs)
arrives in `InjectOptions`. The semantics follow the CDI reference library's
``ContainerEdits.Apply``; where this module differs it says why.

The input config is never mutated: every container on a path that changes is
copied, untouched subtrees are shared with the input.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ateom.cdi.model import DeviceNode, EditStep, Hook, IntelRdt, Mount, Resolution
from ateom.errors import InjectionError
from ateom.inject.options import InjectOptions

# Records which CDI devices ateom injected, so a second run is a no-op and the
# daemon can tell the hooks it added from ones the image brought.
ANNOTATION_KEY = "cdi.k8s.io/ateom"

LD_LIBRARY_PATH = "LD_LIBRARY_PATH"


@dataclass(frozen=True, slots=True)
class HostNode:
    """What stat said about a host device node.

    `type` is "c", "b" or "p", or "" when the path is not a device node at all.
    `file_mode` is the permission bits.
    """

    type: str
    major: int
    minor: int
    file_mode: int


@dataclass(frozen=True, slots=True)
class HostFacts:
    """Host facts the merge needs: stat results keyed by host node path.

    A host path that needed a stat and is absent from `nodes` did not exist.
    """

    nodes: Mapping[str, HostNode]


@dataclass(frozen=True, slots=True)
class DroppedHook:
    """A CDI hook the merge refused, and why (the shell logs each one)."""

    origin: str
    spec_path: str
    hook_name: str
    path: str
    args: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class MergeResult:
    """The new config, the hooks refused, and the CDI mounts as applied.

    `mounts` are the (destination, source, type) of the CDI mounts that ended
    up in the config, in config order: the SONAME planner reads them.
    """

    config: dict[str, Any]
    dropped_hooks: tuple[DroppedHook, ...]
    mounts: tuple[tuple[str, str, str], ...] = ()


def node_needs_stat(node: DeviceNode) -> bool:
    """True when `node` lacks what the runtime needs and the host must be stat'ed.

    Generators omit type and numbers for char devices; runsc needs them. A
    node with a type and a non-zero major (or type "p", which has no numbers)
    is used as given: zero is not a real GPU major, it means "not filled in".
    """
    return not (node.type and (node.major or node.type == "p"))


def _where(step: EditStep) -> str:
    return f"{step.spec_path}: {step.origin}"


def check_path(value: str, field: str, step: EditStep) -> None:
    """Refuse a path with a NUL byte: the kernel would act on a shorter path
    than the spec names (and Python's os calls raise ValueError on it)."""
    if "\0" in value:
        raise InjectionError(f"{_where(step)}: {field} {value!r} contains a NUL byte")


def complete_device_node(
    node: DeviceNode, host: HostNode | None, step: EditStep, process_ids: tuple[int, int]
) -> dict[str, Any]:
    """The OCI ``linux.devices`` entry for `node`, filled from `host` when needed.

    `process_ids` is the container process's (uid, gid): like the CDI
    reference, a node without uid/gid gets the process user's when that user
    is not root, so a non-root workload can open its GPU.
    """
    check_path(node.path, "device node path", step)
    check_path(node.host, "device node hostPath", step)
    dev_type = node.type or ""
    major, minor, file_mode = node.major, node.minor, node.file_mode
    if node_needs_stat(node):
        if host is None:
            raise InjectionError(
                f"{_where(step)}: device node {node.path}: host node {node.host} does not exist"
            )
        if not host.type:
            raise InjectionError(
                f"{_where(step)}: device node {node.path}: host path {node.host} "
                "is not a device node"
            )
        # "u" (unbuffered char) is how some generators spell a char device.
        if dev_type and dev_type != host.type and not (dev_type == "u" and host.type == "c"):
            raise InjectionError(
                f"{_where(step)}: device node {node.path}: type {dev_type!r} does not match "
                f"host node {node.host} (type {host.type!r})"
            )
        dev_type = dev_type or host.type
        if dev_type != "p" and not major:
            major, minor = host.major, host.minor
        if file_mode is None:
            file_mode = host.file_mode
    entry: dict[str, Any] = {"path": node.path, "type": dev_type}
    if dev_type != "p":
        entry["major"] = major or 0
        entry["minor"] = minor or 0
    if file_mode is not None:
        entry["fileMode"] = file_mode
    uid = node.uid if node.uid is not None else (process_ids[0] or None)
    gid = node.gid if node.gid is not None else (process_ids[1] or None)
    if uid is not None:
        entry["uid"] = uid
    if gid is not None:
        entry["gid"] = gid
    return entry


def _cgroup_rule(device: Mapping[str, Any], node: DeviceNode) -> dict[str, Any] | None:
    """The device-cgroup allow rule for an OCI device entry; None for FIFOs."""
    dev_type = device["type"]
    if dev_type == "p":
        return None
    return {
        "allow": True,
        # The cgroup knows only b and c; an unbuffered char device is a c.
        "type": "c" if dev_type == "u" else dev_type,
        "major": device["major"],
        "minor": device["minor"],
        "access": node.permissions or "rwm",
    }


def check_destination(mount: Mount, step: EditStep) -> str:
    """The mount's container path, normalised; a ``..`` component (or a NUL) is an error.

    Lexically normalising would silently turn ``/usr/../../etc`` into
    ``/etc``; a spec that says ``..`` is broken or hostile, so refuse it.
    """
    dest = mount.container_path
    check_path(dest, "mount containerPath", step)
    check_path(mount.host_path, "mount hostPath", step)
    if ".." in dest.split("/"):
        raise InjectionError(
            f"{_where(step)}: mount containerPath {dest!r} climbs out of the rootfs ('..')"
        )
    return clean_destination(dest)


def clean_destination(destination: str) -> str:
    """`destination` as an absolute, normalised container path."""
    return posixpath.normpath("/" + destination.lstrip("/"))


def mount_depth(destination: str) -> int:
    """How deep a clean absolute `destination` is: ``/`` 0, ``/a`` 1, ``/a/b`` 2.

    The CDI reference counts separators, which puts ``/`` level with ``/a``
    and lets a mount over the root land after its children; ``/`` is the
    parent of everything, so it counts 0.
    """
    return 0 if destination == "/" else destination.count("/")


def oci_mount(mount: Mount, destination: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "destination": destination,
        # CDI mounts without a type are bind mounts of host files.
        "type": mount.type or "bind",
        "source": mount.host_path,
    }
    if mount.options:
        entry["options"] = list(mount.options)
    return entry


def _env_key(entry: str) -> str:
    return entry.partition("=")[0]


def merge_env(
    env: Sequence[str], edits: Sequence[str]
) -> list[str]:
    """Apply CDI env: same key replaced in place, new keys appended in order.

    An image env that repeats a key the edits set keeps one entry for it (at
    the first's place): leaving the others would let them win or lose
    depending on the reader, and a second run would see a different env.
    """
    keys = {_env_key(e) for e in edits}
    out: list[str] = []
    index: dict[str, int] = {}
    for entry in env:
        key = _env_key(entry)
        if key in keys:
            if key in index:
                continue
            index[key] = len(out)
        out.append(entry)
    for entry in edits:
        key = _env_key(entry)
        if key in index:
            out[index[key]] = entry
        else:
            index[key] = len(out)
            out.append(entry)
    return out


def prepend_library_dirs(env: Sequence[str], library_dirs: Sequence[str]) -> list[str]:
    """Put `library_dirs` first on LD_LIBRARY_PATH; exactly one entry afterwards.

    The image's own directories stay, after ours; no directory appears twice
    (so a second run changes nothing); empty elements, which the loader would
    read as the current directory, are dropped. The entry takes the place of
    the image's first LD_LIBRARY_PATH, or is appended.
    """
    if not library_dirs:
        return list(env)
    dirs: list[str] = []
    position = None
    out: list[str] = []
    for entry in env:
        key, _, value = entry.partition("=")
        if key == LD_LIBRARY_PATH:
            if position is None:
                position = len(out)
            dirs.extend(value.split(":"))
            continue
        out.append(entry)
    merged: list[str] = []
    seen: set[str] = set()
    for d in (*library_dirs, *dirs):
        # Compared normalised: ``/usr/lib64/`` is ``/usr/lib64``, and listing
        # it twice would only make the loader search it twice.
        key = posixpath.normpath(d) if d else d
        if d and key not in seen:
            seen.add(key)
            merged.append(d)
    entry = f"{LD_LIBRARY_PATH}={':'.join(merged)}"
    out.insert(len(out) if position is None else position, entry)
    return out


def rewrite_hook(
    hook: Hook, step: EditStep, options: InjectOptions
) -> tuple[dict[str, Any] | None, DroppedHook | None]:
    """The OCI hook to keep for a CDI hook, or why it is dropped.

    Only ``createContainer`` hooks whose subcommand (``args[1]``) is
    allowlisted survive, and they run from the trusted binary, not the path
    the spec names: the spec is generated on the node by a tool whose
    version is not ours to choose, and the trusted binary is.
    """

    def dropped(reason: str) -> tuple[None, DroppedHook]:
        return None, DroppedHook(step.origin, step.spec_path, hook.hook_name, hook.path,
                                 hook.args, reason)

    if hook.hook_name != "createContainer":
        return dropped(f"hook kind {hook.hook_name} is not createContainer")
    if len(hook.args) < 2:
        return dropped("hook has no subcommand (args[1])")
    subcommand = hook.args[1]
    if subcommand not in options.allowed_hooks:
        return dropped(f"subcommand {subcommand!r} is not allowlisted")
    if options.hook_binary is None:
        return dropped("no trusted hook binary configured")
    entry: dict[str, Any] = {
        "path": options.hook_binary,
        "args": [options.hook_binary, *hook.args[1:]],
    }
    if hook.env:
        entry["env"] = list(hook.env)
    if hook.timeout is not None:
        entry["timeout"] = hook.timeout
    return entry, None


def _intel_rdt(rdt: IntelRdt) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rdt.clos_id is not None:
        out["closID"] = rdt.clos_id
    if rdt.l3_cache_schema is not None:
        out["l3CacheSchema"] = rdt.l3_cache_schema
    if rdt.mem_bw_schema is not None:
        out["memBwSchema"] = rdt.mem_bw_schema
    if rdt.schemata:
        out["schemata"] = list(rdt.schemata)
    if rdt.enable_monitoring:
        out["enableMonitoring"] = True
    return out


def _dict_at(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """A copy of ``parent[key]`` (or a new dict), stored back into `parent`."""
    value = parent.get(key)
    copied = dict(value) if isinstance(value, Mapping) else {}
    parent[key] = copied
    return copied


def _process_ids(config: Mapping[str, Any]) -> tuple[int, int]:
    user = (config.get("process") or {}).get("user") or {}
    return int(user.get("uid") or 0), int(user.get("gid") or 0)


def merge_edits(
    config: Mapping[str, Any],
    resolution: Resolution,
    host: HostFacts,
    options: InjectOptions,
) -> MergeResult:
    """Apply `resolution`'s edits to OCI `config`; returns a new config. Pure.

    Steps apply in order; within the whole merge: device nodes replace same
    path in place (one cgroup allow rule each, no duplicates, none for
    FIFOs); mounts replace same destination and end stably sorted by depth;
    env replaces same key in place; hooks are filtered and rewritten
    (`rewrite_hook`) without duplicates; additionalGids are added once
    (gid 0 skipped, as the CDI reference does: everyone has it); the last
    intelRdt wins; netDevices map host interface -> name. Then
    `options.drop_env` keys go, `options.library_dirs` lead LD_LIBRARY_PATH,
    and the device names are recorded under `ANNOTATION_KEY`.
    """
    out: dict[str, Any] = dict(config)
    process_ids = _process_ids(config)

    devices: list[dict[str, Any]] | None = None
    device_index: dict[str, int] = {}
    rules: list[Any] | None = None
    cdi_mounts: dict[str, dict[str, Any]] = {}
    env: list[str] | None = None
    hooks: dict[str, list[Any]] = {}
    gids: list[int] | None = None
    dropped: list[DroppedHook] = []
    linux: dict[str, Any] | None = None

    def linux_section() -> dict[str, Any]:
        nonlocal linux
        if linux is None:
            linux = _dict_at(out, "linux")
        return linux

    for step in resolution.steps:
        edits = step.edits
        if edits.device_nodes:
            if devices is None:
                lx = linux_section()
                devices = list(lx.get("devices") or [])
                lx["devices"] = devices
                device_index = {str(d.get("path")): i for i, d in enumerate(devices)}
                resources = _dict_at(lx, "resources")
                rules = list(resources.get("devices") or [])
                resources["devices"] = rules
            assert rules is not None
            for node in edits.device_nodes:
                facts = host.nodes.get(node.host)
                device = complete_device_node(node, facts, step, process_ids)
                if node.path in device_index:
                    devices[device_index[node.path]] = device
                else:
                    device_index[node.path] = len(devices)
                    devices.append(device)
                rule = _cgroup_rule(device, node)
                if rule is not None and rule not in rules:
                    rules.append(rule)
        for m in edits.mounts:
            dest = check_destination(m, step)
            # Remove-then-append, as the CDI reference does: a later edit for
            # the same destination replaces an earlier one and moves last.
            cdi_mounts.pop(dest, None)
            cdi_mounts[dest] = oci_mount(m, dest)
        if edits.env:
            if env is None:
                env = list((out.get("process") or {}).get("env") or [])
            env = merge_env(env, edits.env)
        for hook in edits.hooks:
            entry, why = rewrite_hook(hook, step, options)
            if why is not None:
                dropped.append(why)
                continue
            if hook.hook_name not in hooks:
                hooks[hook.hook_name] = list((out.get("hooks") or {}).get(hook.hook_name) or [])
            if entry not in hooks[hook.hook_name]:
                hooks[hook.hook_name].append(entry)
        if edits.additional_gids:
            if gids is None:
                user = (out.get("process") or {}).get("user") or {}
                gids = list(user.get("additionalGids") or [])
            for gid in edits.additional_gids:
                if gid != 0 and gid not in gids:
                    gids.append(gid)
        if edits.intel_rdt is not None:
            linux_section()["intelRdt"] = _intel_rdt(edits.intel_rdt)
        if edits.net_devices:
            net = _dict_at(linux_section(), "netDevices")
            for nd in edits.net_devices:
                net[nd.host_interface_name] = {"name": nd.name}

    if cdi_mounts:
        keyed: list[tuple[int, dict[str, Any]]] = []
        for m in out.get("mounts") or []:
            dest = clean_destination(str(m.get("destination", "")))
            if dest not in cdi_mounts:
                keyed.append((mount_depth(dest), m))
        keyed += [(mount_depth(dest), m) for dest, m in cdi_mounts.items()]
        # Stable, so equal depths keep their order and a second run is a no-op.
        keyed.sort(key=lambda pair: pair[0])
        out["mounts"] = [m for _, m in keyed]
    if hooks:
        hooks_section = _dict_at(out, "hooks")
        hooks_section.update(hooks)

    if resolution.devices:
        if env is None:
            env = list((out.get("process") or {}).get("env") or [])
        drop = set(options.drop_env)
        env = [e for e in env if _env_key(e) not in drop]
        env = prepend_library_dirs(env, options.library_dirs)
    if env is not None or gids is not None:
        process = _dict_at(out, "process")
        if env is not None:
            process["env"] = env
        if gids is not None:
            user = _dict_at(process, "user")
            user["additionalGids"] = gids

    if resolution.devices:
        annotations = _dict_at(out, "annotations")
        recorded = [n for n in str(annotations.get(ANNOTATION_KEY, "")).split(",") if n]
        recorded += [n for n in resolution.devices if n not in recorded]
        annotations[ANNOTATION_KEY] = ",".join(recorded)
    return MergeResult(
        config=out,
        dropped_hooks=tuple(dropped),
        mounts=tuple((d, m["source"], m["type"]) for d, m in cdi_mounts.items()),
    )
