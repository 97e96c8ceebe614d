"""Container edits as data out: merged across steps, and written as CDI JSON.

`merge_edits` folds a resolution's steps into one `ContainerEdits` in
application order (lists concatenate; a later intelRdt replaces an earlier
one, as the reference's merge does). `edits_to_json` and
`resolution_to_json` write the model back with CDI's JSON field names,
leaving out absent fields, for `ateom cdi resolve` and for logs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ateom.cdi.model import ContainerEdits, EditStep, Resolution


def merge_edits(steps: Iterable[EditStep]) -> ContainerEdits:
    """One ContainerEdits holding every step's edits, in step order; pure."""
    env: list[str] = []
    nodes: list[Any] = []
    mounts: list[Any] = []
    hooks: list[Any] = []
    gids: list[int] = []
    nets: list[Any] = []
    rdt = None
    for step in steps:
        e = step.edits
        env.extend(e.env)
        nodes.extend(e.device_nodes)
        mounts.extend(e.mounts)
        hooks.extend(e.hooks)
        gids.extend(e.additional_gids)
        nets.extend(e.net_devices)
        if e.intel_rdt is not None:
            rdt = e.intel_rdt
    return ContainerEdits(
        env=tuple(env),
        device_nodes=tuple(nodes),
        mounts=tuple(mounts),
        hooks=tuple(hooks),
        intel_rdt=rdt,
        additional_gids=tuple(gids),
        net_devices=tuple(nets),
    )


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    # None and () are "absent"; "" was written in the spec and is kept, so
    # parsing the output gives back the same model.
    if value is not None and value != ():
        out[key] = list(value) if isinstance(value, tuple) else value


def edits_to_json(edits: ContainerEdits) -> dict[str, Any]:
    """CDI-shaped JSON data for `edits` (absent fields left out); pure."""
    out: dict[str, Any] = {}
    _put(out, "env", edits.env)
    if edits.device_nodes:
        nodes = []
        for n in edits.device_nodes:
            node: dict[str, Any] = {"path": n.path}
            _put(node, "hostPath", n.host_path)
            _put(node, "type", n.type)
            _put(node, "major", n.major)
            _put(node, "minor", n.minor)
            _put(node, "fileMode", n.file_mode)
            _put(node, "permissions", n.permissions)
            _put(node, "uid", n.uid)
            _put(node, "gid", n.gid)
            nodes.append(node)
        out["deviceNodes"] = nodes
    if edits.mounts:
        mounts = []
        for m in edits.mounts:
            mount: dict[str, Any] = {"hostPath": m.host_path, "containerPath": m.container_path}
            _put(mount, "type", m.type)
            _put(mount, "options", m.options)
            mounts.append(mount)
        out["mounts"] = mounts
    if edits.hooks:
        hooks = []
        for h in edits.hooks:
            hook: dict[str, Any] = {"hookName": h.hook_name, "path": h.path}
            _put(hook, "args", h.args)
            _put(hook, "env", h.env)
            _put(hook, "timeout", h.timeout)
            hooks.append(hook)
        out["hooks"] = hooks
    if edits.intel_rdt is not None:
        r = edits.intel_rdt
        rdt: dict[str, Any] = {}
        _put(rdt, "closID", r.clos_id)
        _put(rdt, "l3CacheSchema", r.l3_cache_schema)
        _put(rdt, "memBwSchema", r.mem_bw_schema)
        if r.schemata is not None:  # [] is written: it differs from absent
            rdt["schemata"] = list(r.schemata)
        if r.enable_monitoring:
            rdt["enableMonitoring"] = True
        out["intelRdt"] = rdt
    _put(out, "additionalGids", edits.additional_gids)
    if edits.net_devices:
        out["netDevices"] = [
            {"hostInterfaceName": d.host_interface_name, "name": d.name} for d in edits.net_devices
        ]
    return out


def resolution_to_json(resolution: Resolution) -> dict[str, Any]:
    """The resolution as JSON data: devices, the merged edits, and each step."""
    return {
        "devices": list(resolution.devices),
        "containerEdits": edits_to_json(merge_edits(resolution.steps)),
        "steps": [
            {
                "origin": step.origin,
                "specPath": step.spec_path,
                "containerEdits": edits_to_json(step.edits),
            }
            for step in resolution.steps
        ],
    }
