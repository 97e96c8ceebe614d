"""An OCI bundle's config.json: parsed once, its shape checked once. Pure.

The node agent writes the bundle; ateom merges CDI edits into it (`ateom.inject`)
and makes its own edits (`ateom.daemon`). Both read the same fields, so the
JSON types those fields must have are one table here (`SHAPES`), checked once
right after the parse: a wrong type is the bundle's fault, reported as such
with the field named, not a TypeError from deep inside a merge, nor a hook
list built from a string's characters, nor a spec runsc refuses after ateom
has written it. Vendor-free: nothing here knows CDI or a GPU.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ateom.errors import AteomError, ErrorCode, bounded


class ConfigError(AteomError):
    """config.json is not JSON, or a field ateom relies on has the wrong type.

    INVALID_ARGUMENT: the bundle is the caller's input. str() names the file
    and the field (``/b/config.json: process.env[2]: is a number, not a string``).
    """

    code = ErrorCode.INVALID_ARGUMENT


def _is_object(v: Any) -> bool:
    return isinstance(v, dict)


def _is_array(v: Any) -> bool:
    return isinstance(v, list)


def _is_string(v: Any) -> bool:
    return isinstance(v, str)


def _is_integer(v: Any) -> bool:
    # JSON's true is not an integer, whatever Python's bool says.
    return isinstance(v, int) and not isinstance(v, bool)


_KINDS: dict[str, Callable[[Any], bool]] = {
    "an object": _is_object, "an array": _is_array,
    "a string": _is_string, "an integer": _is_integer,
}

# The parts of an OCI config ateom reads or extends, and the JSON type each
# must have. A named field that is absent or null is left alone (the merge
# treats null as absent, as Go's decoder does); "[]" is every element of an
# array and "*" every member of an object, and those may not be null. Parents
# come before their children, so the outermost wrong type is the one reported.
SHAPES: tuple[tuple[str, str], ...] = (
    ("process", "an object"),
    ("process.env", "an array"),
    ("process.env[]", "a string"),
    ("process.user", "an object"),
    ("process.user.uid", "an integer"),
    ("process.user.gid", "an integer"),
    ("process.user.additionalGids", "an array"),
    ("process.user.additionalGids[]", "an integer"),
    ("root", "an object"),
    ("root.path", "a string"),
    ("mounts", "an array"),
    ("mounts[]", "an object"),
    ("hooks", "an object"),
    ("hooks.*", "an array"),  # null too: a hook kind listed with no hooks
    ("hooks.*[]", "an object"),
    ("linux", "an object"),
    ("linux.devices", "an array"),
    ("linux.devices[]", "an object"),
    ("linux.resources", "an object"),
    ("linux.resources.devices", "an array"),
    ("linux.resources.devices[]", "an object"),
    ("linux.netDevices", "an object"),
    ("annotations", "an object"),
    # runsc refuses the whole spec for a non-string annotation, after ateom wrote it.
    ("annotations.*", "a string"),
)

Step = str  # a member name, "[]" (each element) or "*" (each member's value)
# step -> (kind, its test, null allowed, the rules below it)
_Tree = dict[Step, tuple[str, Callable[[Any], bool], bool, "_Tree"]]

# Rules whose values may be null: a hook kind listed with no hooks.
_NULL_OK = frozenset({"hooks.*"})


def _steps(field: str) -> list[Step]:
    """``hooks.*[]`` -> ``["hooks", "*", "[]"]`` (pure)."""
    steps: list[Step] = []
    for part in field.split("."):
        name, brackets, _ = part.partition("[]")
        steps.append(name)
        if brackets:
            steps.append("[]")
    return steps


def _tree(shapes: tuple[tuple[str, str], ...]) -> _Tree:
    """`SHAPES` as a tree, so a shared parent is looked up once per check."""
    root: _Tree = {}
    for field, kind in shapes:
        *parents, last = _steps(field)
        tree = root
        for step in parents:
            tree = tree[step][3]  # parents come first in the table
        tree[last] = (kind, _KINDS[kind], field in _NULL_OK, {})
    return root


_SHAPE_TREE = _tree(SHAPES)


def _json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words ("a string", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a number"
    for kind, test in _KINDS.items():
        if test(value):
            return kind
    return type(value).__name__


_Wrong = tuple[list[str | int], Any, str]  # field path (innermost first), value, kind wanted


def _first_wrong(node: Any, tree: _Tree) -> _Wrong | None:
    """The first value below `node` that breaks `tree`. Absent and null named
    fields are skipped with what lies below them; the field path is built only
    for the one wrong value (this runs on every container's cold start)."""
    for step, (kind, test, null_ok, below) in tree.items():
        members: Any
        if step == "[]":
            members = enumerate(node)
        elif step == "*":
            members = node.items()
        else:
            value = node.get(step)
            if value is None:
                continue
            members = ((step, value),)
        for key, value in members:
            if not test(value):
                if null_ok and value is None:
                    continue
                return [key], value, kind
            if below:
                found = _first_wrong(value, below)
                if found is not None:
                    found[0].append(key)
                    return found
    return None


def _field_name(path: list[str | int]) -> str:
    """``["uid", "user", "process"]`` -> ``process.user.uid``; ints are indexes."""
    name = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in reversed(path))
    return name[1:]


def check_shape(config: dict[str, Any], path: str) -> None:
    """Raise ConfigError naming `path` and the field when `config` breaks `SHAPES`,
    or when a process.env entry holds a NUL byte (the kernel would read a
    shorter string than the config says). Pure."""
    wrong = _first_wrong(config, _SHAPE_TREE)
    if wrong is not None:
        field, value, kind = wrong
        name = bounded(_field_name(field), say_length=True)
        raise ConfigError(f"{path}: {name}: is {_json_kind(value)}, not {kind}")
    for i, entry in enumerate(_env(config)):
        if "\0" in entry:
            raise ConfigError(f"{path}: process.env[{i}]: contains a NUL byte")


def _env(config: dict[str, Any]) -> list[str]:
    process = config.get("process") or {}
    return process.get("env") or []


def _reject_constant(name: str) -> Any:
    # Python's json reads NaN and Infinity; JSON (and runsc's Go decoder) does not.
    raise ValueError(f"{name} is not JSON")


# No OCI config nests past a dozen levels; ateom refuses documents deeper than this.
MAX_DEPTH = 200


def _depth(value: Any) -> int:
    """How deeply `value`'s arrays and objects nest (iterative: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(
            item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse_config(raw: bytes, path: str) -> dict[str, Any]:
    """config.json bytes -> the config object, its shape checked (`SHAPES`). Pure.

    Raises ConfigError naming `path` for invalid UTF-8, invalid JSON (NaN and
    Infinity included), a document nested too deeply to decode, a top level
    that is not an object, and any field of the wrong type. Duplicate keys
    are not refused: the last wins, as in runsc's Go decoder.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not valid UTF-8: {e.reason} at byte {e.start}") from None
    try:
        config = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ConfigError(f"{path}: not valid JSON: nested too deeply") from None
    except ValueError as e:
        raise ConfigError(f"{path}: not valid JSON: {bounded(str(e), say_length=True)}") from None
    # One limit on every Python: 3.11's decoder gives up near 1000 levels, 3.13's
    # goes far deeper, and what ateom decodes it must also be able to write.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(config) > MAX_DEPTH:
        raise ConfigError(f"{path}: not valid JSON: nested too deeply (over {MAX_DEPTH} levels)")
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: top level is {_json_kind(config)}, not an object")
    check_shape(config, path)
    return config


def dump_config(config: dict[str, Any], path: str) -> bytes:
    """config.json bytes as ateom writes them: compact, like Go's json.Marshal. Pure.

    Compact because json's C encoder only runs without indent (the indenting
    pure-Python one costs more than a whole merge); no circular-reference
    check, because a config decoded from JSON and edited by ateom has no
    cycles, and the check's bookkeeping is a good part of the encoding. Deterministic
    for a given dict, which is what makes a second injection byte-identical.
    ConfigError when the config is nested deeper than the encoder can go.
    """
    try:
        return _ENCODER.encode(config).encode()
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to write") from None


_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)
