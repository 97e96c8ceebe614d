"""Text to data: decode a CDI spec file's JSON or YAML, and build the model.

Two pure steps, both used by `ateom.cdi.spec_file`:

- `decode_document` turns the file's text into plain Python data (dicts,
  lists, scalars), rejecting what the formats allow but a spec must not have:
  duplicate keys, an empty file, several YAML documents, cyclic or
  alias-bombed YAML. YAML is read as the CDI reference reads it
  (`ateom.cdi.yaml_loader`), JSON as JSON.
- `spec_from_document` turns a document that passed the JSON Schema into the
  frozen `ateom.cdi.model` dataclasses. The CDI JSON field names live here.

Scalars where a string belongs are read the way the CDI reference reads them
(`ateom.cdi.go_scalars`): ``name: 0`` is the string "0", ``true`` is "true".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

from ateom.cdi.go_scalars import go_json_integer, scalar_text
from ateom.cdi.model import (
    EMPTY_ANNOTATIONS,
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    IntelRdt,
    Mount,
    NetDevice,
    Spec,
)
from ateom.cdi.yaml_loader import decode_yaml
from ateom.errors import SpecError

SpecFormat = Literal["json", "yaml"]

# A document with more nodes than this is refused before any traversal that
# could follow YAML aliases: a few hundred bytes of anchors can otherwise
# expand to billions of nodes. Real specs (8 GPUs with MIG, ~40 libraries)
# have a few thousand.
MAX_DOCUMENT_NODES = 1_000_000


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def decode_document(text: str | bytes, path: str, fmt: SpecFormat) -> Any:
    """Decode a spec file's text as JSON or YAML into plain data; pure.

    Raises SpecError naming `path` (and the line, where the decoder knows it)
    for bad encoding, syntax errors, duplicate keys, an empty file, more than
    one YAML document, and documents too large or cyclic to walk.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise SpecError(
                path, f"not valid UTF-8 text: {exc.reason} at byte {exc.start}"
            ) from None
    if not text.strip():
        raise SpecError(path, "file is empty")
    doc = _decode_json(text, path) if fmt == "json" else decode_yaml(text, path)
    if doc is None:
        raise SpecError(path, "file is empty (no document)")
    if fmt == "yaml":
        # Only YAML has aliases; JSON text is a tree by construction.
        _check_walkable(doc, path)
    return doc


def _decode_json(text: str, path: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_json_object, parse_constant=_reject_constant)
    except _DuplicateKey as exc:
        raise SpecError(path, f"duplicate key {exc.key!r} in JSON object") from None
    except json.JSONDecodeError as exc:
        raise SpecError(
            path, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:  # NaN/Infinity, or an integer too long to convert
        raise SpecError(path, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise SpecError(path, "document is nested too deeply") from None


def _check_walkable(doc: Any, path: str) -> None:
    """Refuse cyclic documents and ones whose aliases expand past the budget.

    Counts nodes as every later traversal will see them (aliases expanded),
    iteratively so depth cannot exhaust the stack.
    """
    budget = MAX_DOCUMENT_NODES
    # Stack of (node, ids of containers on the path to it) for cycle checks.
    stack: list[tuple[Any, frozenset[int]]] = [(doc, frozenset())]
    while stack:
        node, ancestors = stack.pop()
        budget -= 1
        if budget < 0:
            raise SpecError(
                path, f"document has more than {MAX_DOCUMENT_NODES} nodes (YAML aliases expanded)"
            )
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if id(node) in ancestors:
            raise SpecError(path, "document refers to itself (recursive YAML alias)")
        inner = ancestors | {id(node)}
        stack.extend((child, inner) for child in children)


# -- building the model from a schema-valid document --------------------------


def _opt_text(value: Any) -> str | None:
    return None if value is None else scalar_text(value)


def _texts(values: Any) -> tuple[str, ...]:
    if not values:
        return ()
    return tuple(v if v.__class__ is str else scalar_text(v) for v in values)


def _int(value: int | float) -> int:
    # The schema let a float through only if its Go JSON text is an integer.
    return value if isinstance(value, int) else int(go_json_integer(value))  # type: ignore[arg-type]


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _annotations(raw: Any) -> Mapping[str, str]:
    if not raw:
        return EMPTY_ANNOTATIONS
    return MappingProxyType({k: scalar_text(v) for k, v in raw.items()})


def _device_node(raw: dict[str, Any]) -> DeviceNode:
    get = raw.get
    return DeviceNode(
        path=scalar_text(raw["path"]),
        host_path=_opt_text(get("hostPath")),
        type=_opt_text(get("type")),
        major=_opt_int(get("major")),
        minor=_opt_int(get("minor")),
        file_mode=_opt_int(get("fileMode")),
        permissions=_opt_text(get("permissions")),
        uid=_opt_int(get("uid")),
        gid=_opt_int(get("gid")),
    )


def _mount(raw: dict[str, Any]) -> Mount:
    return Mount(
        host_path=scalar_text(raw["hostPath"]),
        container_path=scalar_text(raw["containerPath"]),
        type=_opt_text(raw.get("type")),
        options=_texts(raw.get("options")),
    )


def _hook(raw: dict[str, Any]) -> Hook:
    return Hook(
        hook_name=scalar_text(raw["hookName"]),
        path=scalar_text(raw["path"]),
        args=_texts(raw.get("args")),
        env=_texts(raw.get("env")),
        timeout=_opt_int(raw.get("timeout")),
    )


def _intel_rdt(raw: dict[str, Any] | None) -> IntelRdt | None:
    if raw is None:
        return None
    return IntelRdt(
        clos_id=_opt_text(raw.get("closID")),
        l3_cache_schema=_opt_text(raw.get("l3CacheSchema")),
        mem_bw_schema=_opt_text(raw.get("memBwSchema")),
        # None and [] differ: the reference's 1.1.0 gate is Schemata != nil.
        schemata=None if raw.get("schemata") is None else _texts(raw["schemata"]),
        enable_monitoring=bool(raw.get("enableMonitoring")),
    )


def _net_device(raw: dict[str, Any]) -> NetDevice:
    return NetDevice(
        host_interface_name=scalar_text(raw["hostInterfaceName"]),
        name=scalar_text(raw["name"]),
    )


_NO_EDITS = ContainerEdits()


def _container_edits(raw: dict[str, Any] | None) -> ContainerEdits:
    if not raw:
        return _NO_EDITS
    get = raw.get
    return ContainerEdits(
        env=_texts(get("env")),
        device_nodes=tuple(_device_node(n) for n in get("deviceNodes") or ()),
        mounts=tuple(_mount(m) for m in get("mounts") or ()),
        hooks=tuple(_hook(h) for h in get("hooks") or ()),
        intel_rdt=_intel_rdt(get("intelRdt")),
        additional_gids=tuple(_int(g) for g in get("additionalGids") or ()),
        net_devices=tuple(_net_device(d) for d in get("netDevices") or ()),
    )


def spec_from_document(doc: dict[str, Any], path: str) -> Spec:
    """Build a `Spec` from a document that passed the JSON Schema; pure.

    Only valid after the schema pass: it trusts types and required fields.
    """
    return Spec(
        version=scalar_text(doc["cdiVersion"]),
        kind=scalar_text(doc["kind"]),
        devices=tuple(
            Device(
                name=scalar_text(d["name"]),
                container_edits=_container_edits(d.get("containerEdits")),
                annotations=_annotations(d.get("annotations")),
            )
            for d in doc["devices"]
        ),
        container_edits=_container_edits(doc.get("containerEdits")),
        annotations=_annotations(doc.get("annotations")),
        path=path,
    )
