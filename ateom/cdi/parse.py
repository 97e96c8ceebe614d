"""Text to data: decode a CDI spec file's JSON or YAML, and build the model.

Two pure steps, both used by `ateom.cdi.spec_file`:

- `decode_document` turns the file's text into plain Python data (dicts,
  lists, scalars), rejecting what the formats allow but a spec must not have:
  duplicate keys, an empty file, several YAML documents, cyclic or
  alias-bombed YAML.
- `spec_from_document` turns a document that passed the JSON Schema into the
  frozen `ateom.cdi.model` dataclasses. The CDI JSON field names live here.

Scalars where a string belongs are read the way the CDI reference reads them
(its YAML decoder converts by target type): ``name: 0`` is the string "0",
``true`` is "true".
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

import yaml

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
from ateom.errors import SpecError

SpecFormat = Literal["json", "yaml"]

# A document with more nodes than this is refused before any traversal that
# could follow YAML aliases: a few hundred bytes of anchors can otherwise
# expand to billions of nodes. Real specs (8 GPUs with MIG, ~40 libraries)
# have a few thousand.
MAX_DOCUMENT_NODES = 1_000_000

_YAML_BASE: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[str, Any]:
    # Check the keys written in this mapping before merge keys ('<<') are
    # flattened in: overriding a merged key is YAML's intent, not a duplicate.
    seen: dict[str, yaml.Node] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        if not isinstance(key_node, yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(
                None,
                None,
                "non-scalar mapping key (CDI specs only have string keys)",
                key_node.start_mark,
            )
        key = _key_text(loader.construct_object(key_node))
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first defined at line "
                f"{seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    loader.flatten_mapping(node)
    result: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = _key_text(loader.construct_object(key_node))
        result[key] = loader.construct_object(value_node, deep=True)
    return result


def _key_text(key: object) -> str:
    # Like the reference's YAML-to-JSON step: scalar keys become strings.
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, int | float):  # bool is an int
        return scalar_text(key)
    raise yaml.constructor.ConstructorError(
        None, None, f"mapping key of type {type(key).__name__} (CDI keys are strings)"
    )


# Plain scalars are typed the way go-yaml v2 types them (the CDI reference
# reads specs through sigs.k8s.io/yaml, which uses it), not the way YAML 1.1
# does in PyYAML: no base-60 numbers (the MIG device name `1:0` is not the
# integer 60), no timestamps (a date-like env value or annotation is text),
# `y` and `n` are booleans, and numbers follow Go's strconv: `1e3` and `08`
# are floats, `0o17` is an octal integer.
BOOL_TAG = "tag:yaml.org,2002:bool"
GO_NUMBER_TAG = "tag:ateom,2024:go-number"
_GO_BOOLS = {
    **dict.fromkeys("y Y yes Yes YES true True TRUE on On ON".split(), True),
    **dict.fromkeys("n N no No NO false False FALSE off Off OFF".split(), False),
}
_GO_SPECIAL_FLOATS = {
    **dict.fromkeys([".nan", ".NaN", ".NAN"], math.nan),
    **dict.fromkeys([".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"], math.inf),
    **dict.fromkeys(["-.inf", "-.Inf", "-.INF"], -math.inf),
}
_GO_BOOL = re.compile("^(?:" + "|".join(_GO_BOOLS) + ")$")
# What go-yaml might read as a number: it tries plain scalars starting with a
# sign, a digit or '.'; ':' is left out, so `1:0` is never one.
_GO_NUMBER_LIKE = re.compile(r"^[-+.0-9][-+._0-9A-Za-z]*$")
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_GO_DOT_FLOAT = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")
# (tag, pattern, first characters) of the implicit types above.
GO_SCALAR_RESOLVERS = (
    (BOOL_TAG, _GO_BOOL, "yYnNtTfFoO"),
    (GO_NUMBER_TAG, _GO_NUMBER_LIKE, "+-.0123456789"),
)
_PYYAML_TYPED_TAGS = {BOOL_TAG, *(f"tag:yaml.org,2002:{t}" for t in ("int", "float", "timestamp"))}


def _go_int(plain: str) -> int | None:
    """Go's ParseInt(plain, 0, 64), else ParseUint(plain, 0, 64); None if neither."""
    signed = plain[:1] in ("+", "-")
    digits = plain[1:] if signed else plain
    if not (digits.isascii() and digits.isalnum()):
        return None
    try:
        if len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXbBoO":
            value = int(digits, 8)  # Go: a leading 0 means octal
        else:
            value = int(digits, 0)
    except ValueError:
        return None
    if plain[0] == "-":
        value = -value
    if -(2**63) <= value < 2**63 or (not signed and value < 2**64):
        return value
    return None


def go_yaml_number(text: str) -> int | float | str:
    """A plain scalar that starts like a number, typed as go-yaml v2 types it:
    an integer (base from its prefix, '_' ignored), else a float if it has
    Go's float shape and is in range, else the text itself."""
    if text in _GO_SPECIAL_FLOATS:
        return _GO_SPECIAL_FLOATS[text]
    if text.startswith("."):
        plain, shape = text, _GO_DOT_FLOAT  # parsed as written, '_' and all
    else:
        plain, shape = text.replace("_", ""), _GO_FLOAT
        whole = _go_int(plain)
        if whole is not None:
            return whole
    if shape.fullmatch(plain):
        value = float(plain)
        if not math.isinf(value):  # out of range: Go's ParseFloat fails
            return value
    return text


def _construct_go_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | float | str:
    return go_yaml_number(loader.construct_scalar(node))


def _construct_go_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    text = loader.construct_scalar(node)
    if text not in _GO_BOOLS:  # only for an explicit `!!bool` tag
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not a boolean", node.start_mark
        )
    return _GO_BOOLS[text]


def _spec_resolvers(base: type[yaml.SafeLoader]) -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {
        first: [(tag, rx) for tag, rx in entries if tag not in _PYYAML_TYPED_TAGS]
        for first, entries in base.yaml_implicit_resolvers.items()
    }
    for tag, rx, firsts in GO_SCALAR_RESOLVERS:
        for first in firsts:
            resolvers.setdefault(first, []).append((tag, rx))
    return resolvers


def make_spec_loader(base: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """A safe YAML loader class on `base` that rejects duplicate keys, reads
    keys as strings, and reads numbers and dates like the Go decoder.

    Duplicate keys are errors because the reference rejects them and because
    "last one wins" silently drops a device node or mount.
    """
    loader: type[yaml.SafeLoader] = type("SpecYamlLoader", (base,), {})
    loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
    loader.add_constructor(BOOL_TAG, _construct_go_bool)
    loader.add_constructor(GO_NUMBER_TAG, _construct_go_number)
    loader.yaml_implicit_resolvers = _spec_resolvers(base)
    return loader


# libyaml's parser when PyYAML was built with it (several times faster).
_SpecYamlLoader = make_spec_loader(_YAML_BASE)


class _PythonComposer(_YAML_BASE):  # type: ignore[valid-type,misc]
    """libyaml's parser with PyYAML's Python composer.

    libyaml's composer recurses in C once per nesting level and overflows the
    C stack past ~20,000 levels (`- - - ...` is 2 bytes a level), which kills
    the process instead of raising. The Python composer raises RecursionError,
    which `decode_document` reports; it is ~30% slower on a real spec.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        yaml.composer.Composer.__init__(self)

    get_single_node = yaml.composer.Composer.get_single_node
    compose_document = yaml.composer.Composer.compose_document
    compose_node = yaml.composer.Composer.compose_node
    compose_scalar_node = yaml.composer.Composer.compose_scalar_node
    compose_sequence_node = yaml.composer.Composer.compose_sequence_node
    compose_mapping_node = yaml.composer.Composer.compose_mapping_node


_DeepYamlLoader = make_spec_loader(_PythonComposer)
# Each nesting level needs a collection indicator ('[', '{', or '-', '?',
# ':' before whitespace), so text with at most this many of those characters
# cannot nest deeper: 8,000 levels is ~2.8 MiB of C stack, well inside a
# Linux thread's 8 MiB. An 8-GPU nvidia-ctk spec has ~2,100 of them.
MAX_C_COMPOSED_INDICATORS = 8000


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
    doc = _decode_json(text, path) if fmt == "json" else _decode_yaml(text, path)
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


def _decode_yaml(text: str, path: str) -> Any:
    try:
        deep = sum(map(text.count, "-:?[{")) > MAX_C_COMPOSED_INDICATORS
        loader = _DeepYamlLoader if deep else _SpecYamlLoader
        return yaml.load(text, Loader=loader)  # noqa: S506 - safe loader subclasses
    except yaml.MarkedYAMLError as exc:
        if "maximum nesting depth" in (exc.problem or ""):
            # PyYAML >= 6.0.4 caps nesting in its parser; one message for
            # "too deep" whichever layer noticed it.
            raise SpecError(path, "document is nested too deeply") from None
        raise SpecError(path, f"invalid YAML: {_yaml_problem(exc)}") from None
    except yaml.reader.ReaderError as exc:
        # A character YAML forbids; PyYAML's own text spans two lines.
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        raise SpecError(
            path,
            f"invalid YAML: line {line} column {column}: "
            f"character #x{exc.character:04x}: {exc.reason}",
        ) from None
    except RecursionError:
        raise SpecError(path, "document is nested too deeply") from None
    except Exception as exc:  # noqa: BLE001
        # PyYAML's constructors let ValueError, TypeError and friends escape
        # for explicitly tagged scalars (`!!int abc`, `!!float x`); any
        # failure to decode untrusted text is the spec's fault, not ateom's.
        # Whitespace is folded so the problem stays one line.
        raise SpecError(path, f"invalid YAML: {' '.join(str(exc).split())}") from None


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
    what = " ".join(p for p in (exc.context, exc.problem) if p)
    return where + (what or str(exc))


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


def scalar_text(value: str | int | float | bool) -> str:
    """A scalar as the CDI reference reads it into a string field.

    The reference decodes YAML (and JSON, as YAML) with sigs.k8s.io/yaml,
    which, for a string target, formats ints in decimal, bools as
    "true"/"false", and floats with Go's FormatFloat(f, 'g', -1, 32).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if -(2**63) <= value < 2**64:
            return str(value)
        value = float(value)  # beyond int64/uint64 the Go decoder has a float64
    return go_float32_text(value)


_FLOAT32 = struct.Struct("<f")


def _as_float32(value: float) -> float:
    """`value` rounded to float32, like Go's float32(value): too large is Inf."""
    try:
        return float(_FLOAT32.unpack(_FLOAT32.pack(value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def go_float32_text(value: float) -> str:
    """Go's ``strconv.FormatFloat(value, 'g', -1, 32)``: the shortest text
    that reads back as the same float32, in %e form for exponents < -4 or
    >= 6."""
    if math.isnan(value):
        return "NaN"
    f32 = _as_float32(value)
    if math.isinf(f32):
        return "+Inf" if f32 > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, f32) < 0 else ""
    if f32 == 0:
        return sign + "0"
    for precision in range(1, 10):
        text = f"{abs(f32):.{precision - 1}e}"
        if _as_float32(float(text)) == abs(f32):
            break
    mantissa, _, exponent = text.partition("e")
    digits = mantissa.replace(".", "").rstrip("0") or "0"
    exp = int(exponent)
    if exp < -4 or exp >= 6:
        frac = "." + digits[1:] if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{frac}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    point = exp + 1  # digits before the decimal point
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _opt_text(value: Any) -> str | None:
    return None if value is None else scalar_text(value)


def _texts(values: Any) -> tuple[str, ...]:
    if not values:
        return ()
    return tuple(v if v.__class__ is str else scalar_text(v) for v in values)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


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
        schemata=_texts(raw.get("schemata")),
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
        additional_gids=tuple(int(g) for g in get("additionalGids") or ()),
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
