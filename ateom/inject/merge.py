"""The merge: CDI edits + facts about the host -> a new OCI config. Pure.

Nothing here touches the filesystem: the host's device numbers arrive as
`HostNode` facts gathered by the shell (`ateom.inject.injector`), and every
vendor choice (hook allowlist, trusted hook binary, env to drop, library dirs)
arrives in `InjectOptions`. The semantics follow the CDI reference library's
``ContainerEdits.Apply``: one small function per edit kind below, each
writing its section of the config through a `ConfigEditor`, so the input
config is never mutated and untouched subtrees are shared with it. What each
CDI value becomes (a device entry, a mount, a hook) is `ateom.inject.entries`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from ateom.cdi.model import EditStep, IntelRdt, NetDevice, Resolution
from ateom.inject.editor import ConfigEditor
from ateom.inject.entries import (
    DroppedHook,
    HostNode,
    cgroup_rule,
    check_destination,
    clean_destination,
    complete_device_node,
    env_key,
    intel_rdt_entry,
    merge_env,
    mount_depth,
    node_needs_stat,
    oci_mount,
    prepend_library_dirs,
    rewrite_hook,
)
from ateom.inject.options import InjectOptions

__all__ = [
    "ANNOTATION_KEY", "DroppedHook", "HostFacts", "HostNode", "MergeResult", "merge_edits",
    "node_needs_stat", "prepend_library_dirs",
]

# Records which CDI devices ateom injected, so a second run is a no-op and the
# daemon can tell the hooks it added from ones the image brought.
ANNOTATION_KEY = "cdi.k8s.io/ateom"


@dataclass(frozen=True, slots=True)
class HostFacts:
    """Host facts the merge needs: stat results keyed by host node path.

    A host path that needed a stat and is absent from `nodes` did not exist.
    """

    nodes: Mapping[str, HostNode]


@dataclass(frozen=True)
class MergeResult:
    """The new config, the hooks refused, and the CDI mounts as applied.

    `config` shares untouched subtrees with the input (mutate neither in
    place). `mounts` are the (destination, source, type) of the CDI mounts
    that ended up in the config, in the order the edits gave them (an edit
    that replaced an earlier one's destination comes where the later edit
    put it): the SONAME planner reads them.
    """

    config: dict[str, Any]
    dropped_hooks: tuple[DroppedHook, ...]
    mounts: tuple[tuple[str, str, str], ...] = ()


def _process_ids(config: Mapping[str, Any]) -> tuple[int, int]:
    user = (config.get("process") or {}).get("user") or {}
    return int(user.get("uid") or 0), int(user.get("gid") or 0)


_RuleKey = tuple[Any, ...]


def _rule_key(rule: Mapping[str, Any]) -> _RuleKey:
    """A stand-in for a device-cgroup rule, equal for two rules exactly when the
    rules are equal if one of them is a `cgroup_rule` (five keys, none null).
    Hashable unless the rule holds an array or object."""
    return (len(rule), rule.get("allow"), rule.get("type"), rule.get("major"),
            rule.get("minor"), rule.get("access"))


@dataclass
class DeviceTable:
    """``linux.devices`` and ``linux.resources.devices`` as one merge builds them,
    with the indexes that keep both free of duplicates across its steps."""

    devices: list[dict[str, Any]]
    rules: list[Any]
    index: dict[str, int]  # device path -> its place in `devices`
    # A set beside the rules: `rule in rules` compared every pair of dicts,
    # quadratic in a node count that grows with the node's GPUs.
    known: set[_RuleKey]

    @classmethod
    def of(cls, editor: ConfigEditor) -> DeviceTable:
        """The table over `editor`'s config (both arrays become the editor's)."""
        devices = editor.array("linux", "devices")
        rules = editor.array("linux", "resources", "devices")
        known: set[_RuleKey] = set()
        for r in rules:
            try:
                known.add(_rule_key(r))
            except TypeError:
                pass  # a config's rule holding an array or object: no rule of ours equals it
        return cls(devices, rules, {str(d.get("path")): i for i, d in enumerate(devices)},
                   known)


def apply_device_nodes(table: DeviceTable, step: EditStep, host: HostFacts,
                       process_ids: tuple[int, int]) -> None:
    """``linux.devices``: a node with the same path is replaced in place, others
    appended; each gets one device-cgroup allow rule (none for FIFOs), never
    duplicated."""
    devices, index, known = table.devices, table.index, table.known
    for node in step.edits.device_nodes:
        device = complete_device_node(node, host.nodes.get(node.host), step, process_ids)
        at = index.get(node.path)
        if at is None:
            index[node.path] = len(devices)
            devices.append(device)
        else:
            devices[at] = device
        rule = cgroup_rule(device, node)
        if rule is None:
            continue
        # `_rule_key` of a rule of ours, from what varies (five keys, allowed).
        key = (5, True, rule["type"], rule["major"], rule["minor"], rule["access"])
        if key not in known:
            known.add(key)
            table.rules.append(rule)


def collect_mounts(pending: dict[str, dict[str, Any]], step: EditStep) -> None:
    """Add `step`'s mounts to `pending` (clean destination -> OCI mount); they go
    into the config in one place (`place_mounts`), once every step is in."""
    for m in step.edits.mounts:
        dest = check_destination(m, step)
        # Remove-then-append, as the CDI reference does: a later edit for
        # the same destination replaces an earlier one and moves last.
        pending.pop(dest, None)
        pending[dest] = oci_mount(m, dest)


def place_mounts(editor: ConfigEditor, pending: Mapping[str, dict[str, Any]]) -> None:
    """``mounts``: the CDI mounts replace any mount at the same (normalised)
    destination, image mounts included, and all end stably sorted by depth,
    so a parent never lands after its child and a second run is a no-op."""
    if not pending:
        return
    keyed: list[tuple[int, dict[str, Any]]] = []
    for m in editor.get("mounts") or ():
        dest = clean_destination(str(m.get("destination", "")))
        if dest not in pending:
            keyed.append((mount_depth(dest), m))
    keyed += [(mount_depth(dest), m) for dest, m in pending.items()]
    keyed.sort(key=itemgetter(0))  # stable: equal depths keep their order
    editor.put("mounts", value=[m for _, m in keyed])


def apply_env(editor: ConfigEditor, env: Sequence[str]) -> None:
    """``process.env``: same key replaced in place, new keys appended (`merge_env`)."""
    if env:
        editor.put("process", "env", value=merge_env(editor.get("process", "env") or (), env))


def finish_env(editor: ConfigEditor, options: InjectOptions, resolution: Resolution) -> None:
    """``process.env`` once all edits are in: `options.drop_env` keys go and
    `options.library_dirs` lead LD_LIBRARY_PATH when a device of the options'
    vendor was injected (a vendor's library dir means nothing to another's)."""
    drop = set(options.drop_env)
    env = [e for e in editor.get("process", "env") or () if env_key(e) not in drop]
    served = any(options.serves(step.vendor) for step in resolution.steps)
    editor.put("process", "env",
               value=prepend_library_dirs(env, options.library_dirs if served else ()))


def apply_hooks(editor: ConfigEditor, step: EditStep, options: InjectOptions,
                dropped: list[DroppedHook]) -> None:
    """``hooks.<kind>``: allowlisted hooks rewritten to the trusted binary
    (`rewrite_hook`) and appended once; the rest go to `dropped`. Hooks
    already in the config are left alone."""
    for hook in step.edits.hooks:
        entry, why = rewrite_hook(hook, step, options)
        if why is not None:
            dropped.append(why)
            continue
        hooks = editor.array("hooks", hook.hook_name)
        if entry not in hooks:
            hooks.append(entry)


def apply_additional_gids(editor: ConfigEditor, gids: Sequence[int]) -> None:
    """``process.user.additionalGids``: each added once; gid 0 skipped, as the
    CDI reference does (every process has it)."""
    if not gids:
        return
    current = editor.array("process", "user", "additionalGids")
    for gid in gids:
        if gid != 0 and gid not in current:
            current.append(gid)


def apply_intel_rdt(editor: ConfigEditor, rdt: IntelRdt | None) -> None:
    """``linux.intelRdt``: the last edit that sets it wins."""
    if rdt is not None:
        editor.section("linux")["intelRdt"] = intel_rdt_entry(rdt)


def apply_net_devices(editor: ConfigEditor, net_devices: Sequence[NetDevice]) -> None:
    """``linux.netDevices``: host interface -> its name in the container."""
    if net_devices:
        net = editor.section("linux", "netDevices")
        for nd in net_devices:
            net[nd.host_interface_name] = {"name": nd.name}


def record_devices(editor: ConfigEditor, devices: Sequence[str]) -> None:
    """``annotations[ANNOTATION_KEY]``: the device names, comma-separated; names
    already recorded keep their place."""
    annotations = editor.section("annotations")
    recorded = [n for n in str(annotations.get(ANNOTATION_KEY, "")).split(",") if n]
    recorded += [n for n in devices if n not in recorded]
    annotations[ANNOTATION_KEY] = ",".join(recorded)


def merge_edits(
    config: Mapping[str, Any],
    resolution: Resolution,
    host: HostFacts,
    options: InjectOptions,
) -> MergeResult:
    """Apply `resolution`'s edits to OCI `config`; returns a new config. Pure.

    Steps apply in order, each edit kind by its function above (device
    nodes, mounts, env, hooks, additionalGids, intelRdt, netDevices). Then
    mounts are placed, and when devices were requested the env is finished
    (`finish_env`) and the device names are recorded under `ANNOTATION_KEY`.
    Raises InjectionError naming the spec for a device node or mount it
    cannot apply.
    """
    editor = ConfigEditor(config)
    process_ids = _process_ids(config)
    table: DeviceTable | None = None  # made by the first step with device nodes
    mounts: dict[str, dict[str, Any]] = {}
    dropped: list[DroppedHook] = []
    for step in resolution.steps:
        edits = step.edits
        if edits.device_nodes:
            table = table or DeviceTable.of(editor)
            apply_device_nodes(table, step, host, process_ids)
        collect_mounts(mounts, step)
        apply_env(editor, edits.env)
        apply_hooks(editor, step, options, dropped)
        apply_additional_gids(editor, edits.additional_gids)
        apply_intel_rdt(editor, edits.intel_rdt)
        apply_net_devices(editor, edits.net_devices)
    place_mounts(editor, mounts)
    if resolution.devices:
        finish_env(editor, options, resolution)
        record_devices(editor, resolution.devices)
    return MergeResult(
        config=editor.result(),
        dropped_hooks=tuple(dropped),
        mounts=tuple((d, m["source"], m["type"]) for d, m in mounts.items()),
    )
