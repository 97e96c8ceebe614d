"""What each CDI edit becomes in an OCI config, one entry at a time. Pure.

A device node becomes a ``linux.devices`` entry (completed from the host's
stat) and a device-cgroup rule, a mount an OCI mount with a clean
destination, a hook the trusted binary's hook or a `DroppedHook`, env edits a
new env list. `ateom.inject.merge` puts these entries into the config; the
semantics follow the CDI reference library, and where they differ it says why.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ateom.cdi.model import DeviceNode, EditStep, Hook, IntelRdt, Mount
from ateom.errors import InjectionError, bounded
from ateom.inject.options import InjectOptions

# The mode of a device node the spec gives none for (see `complete_device_node`).
DEFAULT_DEVICE_FILE_MODE = 0o666
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
class DroppedHook:
    """A CDI hook the merge refused, and why (the shell logs each one)."""

    origin: str
    spec_path: str
    hook_name: str
    path: str
    args: tuple[str, ...]
    reason: str


def node_needs_stat(node: DeviceNode) -> bool:
    """True when `node` lacks what the runtime needs and the host must be stat'ed.

    Generators omit type and numbers for char devices; runsc needs them. A
    node with a type and a non-zero major (or type "p", which has no numbers)
    is used as given: zero is not a real GPU major, it means "not filled in".
    """
    return not (node.type and (node.major or node.type == "p"))


def cut(text: str) -> str:
    """`text` as an error message may echo it (`ateom.errors.bounded`, length said)."""
    return bounded(text, say_length=True)


def _where(step: EditStep) -> str:
    return f"{cut(step.spec_path)}: {cut(step.origin)}"


def check_path(value: str, field: str, step: EditStep) -> None:
    """Refuse a path with a NUL byte: the kernel would act on a shorter path
    than the spec names (and Python's os calls raise ValueError on it)."""
    if "\0" in value:
        raise InjectionError(f"{_where(step)}: {field} {cut(repr(value))} contains a NUL byte")


def _node_error(step: EditStep, node: DeviceNode, why: str) -> InjectionError:
    return InjectionError(f"{_where(step)}: device node {cut(node.path)}: {why}")


def complete_device_node(
    node: DeviceNode, host: HostNode | None, step: EditStep, process_ids: tuple[int, int]
) -> dict[str, Any]:
    """The OCI ``linux.devices`` entry for `node`, filled from `host` when needed.

    `process_ids` is the container process's (uid, gid): like the CDI
    reference, a node without uid/gid gets the process user's when that user
    is not root, so a non-root workload can open its GPU.
    """
    if "\0" in node.path or (node.host_path and "\0" in node.host_path):
        check_path(node.path, "device node path", step)
        check_path(node.host, "device node hostPath", step)
    dev_type = node.type or ""
    major, minor, file_mode = node.major, node.minor, node.file_mode
    if node_needs_stat(node):
        if host is None:
            raise _node_error(step, node, f"host node {cut(node.host)} does not exist")
        if not host.type:
            raise _node_error(step, node, f"host path {cut(node.host)} is not a device node")
        # "u" (unbuffered char) is how some generators spell a char device.
        if dev_type and dev_type != host.type and not (dev_type == "u" and host.type == "c"):
            raise _node_error(step, node, f"type {cut(repr(dev_type))} does not match host "
                              f"node {cut(node.host)} (type {host.type!r})")
        dev_type = dev_type or host.type
        if dev_type != "p" and not major:
            major, minor = host.major, host.minor
        if file_mode is None:
            file_mode = host.file_mode
    entry: dict[str, Any] = {"path": node.path, "type": dev_type}
    if dev_type != "p":
        entry["major"] = major or 0
        entry["minor"] = minor or 0
    if file_mode is None and dev_type != "p":
        # Always written: runsc 0.0~20240729 dereferences it when it creates the
        # node inside the sandbox (a nil-pointer panic in boot's createDeviceFile
        # kills the sandbox at start). 0666 is what the NVIDIA driver gives its
        # nodes and what runc assumes for a device without one.
        file_mode = DEFAULT_DEVICE_FILE_MODE
    if file_mode is not None:
        entry["fileMode"] = file_mode
    uid = node.uid if node.uid is not None else (process_ids[0] or None)
    gid = node.gid if node.gid is not None else (process_ids[1] or None)
    if uid is not None:
        entry["uid"] = uid
    if gid is not None:
        entry["gid"] = gid
    return entry


def cgroup_rule(device: Mapping[str, Any], node: DeviceNode) -> dict[str, Any] | None:
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
        "access": node.cgroup_access,  # "none" is empty access, not the word
    }


def check_destination(mount: Mount, step: EditStep) -> str:
    """The mount's container path, normalised; a ``..`` component (or a NUL) is an error.

    Lexically normalising would silently turn ``/usr/../../etc`` into
    ``/etc``; a spec that says ``..`` is broken or hostile, so refuse it.
    """
    dest = mount.container_path
    if "\0" in dest or "\0" in mount.host_path:
        check_path(dest, "mount containerPath", step)
        check_path(mount.host_path, "mount hostPath", step)
    if ".." in dest and ".." in dest.split("/"):
        raise InjectionError(
            f"{_where(step)}: mount containerPath {cut(repr(dest))} climbs out of the rootfs "
            "('..')"
        )
    return clean_destination(dest)


def clean_destination(destination: str) -> str:
    """`destination` as an absolute, normalised container path."""
    # Most destinations are clean already (generators write them so): no
    # empty, "." or ".." component, no trailing slash. normpath would return
    # them unchanged, at several times the cost, for every mount of every
    # container.
    if (destination[:1] == "/" and "//" not in destination and "/." not in destination
            and destination[-1] != "/"):
        return destination
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


def env_key(entry: str) -> str:
    return entry.partition("=")[0]


def merge_env(
    env: Sequence[str], edits: Sequence[str]
) -> list[str]:
    """Apply CDI env: same key replaced in place, new keys appended in order.

    An image env that repeats a key the edits set keeps one entry for it (at
    the first's place): leaving the others would let them win or lose
    depending on the reader, and a second run would see a different env.
    """
    keys = {env_key(e) for e in edits}
    out: list[str] = []
    index: dict[str, int] = {}
    for entry in env:
        key = env_key(entry)
        if key in keys:
            if key in index:
                continue
            index[key] = len(out)
        out.append(entry)
    for entry in edits:
        key = env_key(entry)
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

    if not options.serves(step.vendor):
        return dropped(f"a {cut(step.vendor)} device's hook: the trusted hook binary is "
                       f"for {options.vendor} devices")
    if hook.hook_name != "createContainer":
        return dropped(f"hook kind {cut(hook.hook_name)} is not createContainer")
    if len(hook.args) < 2:
        return dropped("hook has no subcommand (args[1])")
    subcommand = hook.args[1]
    if subcommand not in options.allowed_hooks:
        return dropped(f"subcommand {cut(repr(subcommand))} is not allowlisted")
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


def intel_rdt_entry(rdt: IntelRdt) -> dict[str, Any]:
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
