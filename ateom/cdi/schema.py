"""First validation pass: the CDI spec's shape, checked against a JSON Schema.

The schema (``cdi-spec.schema.json`` next to this file) says which fields
exist, their types and which are required; with ``additionalProperties:
false`` a misspelt field (``majr``) is an error naming its JSON path instead
of being silently dropped. Rules about content (name characters, version
gates, env syntax) are the second pass, `ateom.cdi.validate`, which may then
trust every field's type.

The validator is compiled once at import: building it costs far more than
validating one spec.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from typing import Any

import jsonschema

from ateom.cdi.go_scalars import go_json_integer
from ateom.errors import SpecError

SCHEMA_RESOURCE = "cdi-spec.schema.json"


def _load_schema() -> dict[str, Any]:
    text = resources.files("ateom.cdi").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every local ``#/definitions/NAME`` $ref replaced by its target.

    The CDI schema has no recursion, so this terminates; it halves validation
    time, since jsonschema resolves a $ref on every visit.
    """
    definitions = schema.get("definitions", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/definitions/"):
                return walk(definitions[ref.removeprefix("#/definitions/")])
            return {k: walk(v) for k, v in node.items() if k != "definitions"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    inlined: dict[str, Any] = walk(schema)
    return inlined


# -- a fast path for leaf values ------------------------------------------------
#
# jsonschema spends most of its time descending into each of a spec's ~700
# values (a new validator object per descent), though nearly all of them are
# scalars checked only for type and range. For subschemas that hold nothing
# but "type", "minimum" and "maximum", the keywords below check a *valid*
# value inline and skip the descent; anything else, and every invalid value,
# takes jsonschema's own path, so the errors are exactly jsonschema's.

_LEAF_KEYWORDS = frozenset({"type", "minimum", "maximum"})


def go_number(value: int | float) -> int | float:
    """The number the reference compares with an integer field's range.

    A float reaches an integer field of the reference as encoding/json's
    text of it (`go_json_integer`): -2^63 written as a float
    (`-9.223372036854775808e18`) is -9223372036854776000 there and overflows
    int64. An int is itself (a YAML integer literal beyond int64 and uint64
    stays the exact int, `go_scalars.go_yaml_number`).
    """
    if isinstance(value, float):
        whole = go_json_integer(value)
        if whole is not None:
            return whole
    return value


def _minimum(validator: Any, minimum: Any, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "number") and go_number(instance) < minimum:
        yield jsonschema.ValidationError(f"{instance!r} is less than the minimum of {minimum!r}")


def _maximum(validator: Any, maximum: Any, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "number") and go_number(instance) > maximum:
        yield jsonschema.ValidationError(f"{instance!r} is greater than the maximum of {maximum!r}")


# Range checks as the reference makes them (see go_number), for both the
# fast path below and jsonschema's own descent.
GO_RANGE_KEYWORDS = {"minimum": _minimum, "maximum": _maximum}
_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _leaf_test(subschema: Any) -> Callable[[Any], bool] | None:
    """A predicate true exactly when `subschema` accepts a value, or None
    when the subschema is more than a type/range check."""
    if not isinstance(subschema, dict) or not subschema.keys() <= _LEAF_KEYWORDS:
        return None
    declared = subschema.get("type")
    names = [declared] if isinstance(declared, str) else list(declared or ())
    if not names or any(n not in _TYPE_TESTS for n in names):
        return None
    tests = [_TYPE_TESTS[n] for n in names]
    low, high = subschema.get("minimum"), subschema.get("maximum")

    def accepts(value: Any) -> bool:
        if not any(test(value) for test in tests):
            return False
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = go_number(value)
            if low is not None and number < low:
                return False
            if high is not None and number > high:
                return False
        return True

    return accepts


# id(subschema) -> (subschema, its test). Holding the subschema keeps its id
# from being reused by another dict while the entry exists.
_LEAF_TESTS: dict[int, tuple[Any, Callable[[Any], bool] | None]] = {}


def _leaf_accepts(subschema: Any, value: Any) -> bool:
    entry = _LEAF_TESTS.get(id(subschema))
    if entry is None or entry[0] is not subschema:
        entry = _LEAF_TESTS[id(subschema)] = (subschema, _leaf_test(subschema))
    test = entry[1]
    return test is not None and test(value)


def _properties(validator: Any, properties: Any, instance: Any, schema: Any) -> Any:
    if not isinstance(instance, dict):
        return
    for name, subschema in properties.items():
        if name in instance and not _leaf_accepts(subschema, instance[name]):
            yield from validator.descend(instance[name], subschema, path=name, schema_path=name)


def _make_items(original: Callable[..., Any]) -> Callable[..., Any]:
    def items(validator: Any, items: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, list) and all(_leaf_accepts(items, v) for v in instance):
            return
        yield from original(validator, items, instance, schema)

    return items


SCHEMA: dict[str, Any] = _load_schema()
# Draft 7 (declared in the file): the same checks as 2020-12 for this schema,
# and faster in jsonschema (docs/performance.md, "Figures behind the code").
_BASE_CLASS = jsonschema.validators.validator_for(SCHEMA)
_BASE_CLASS.check_schema(SCHEMA)
_VALIDATOR_CLASS = jsonschema.validators.extend(
    _BASE_CLASS,
    {
        "properties": _properties,
        "items": _make_items(_BASE_CLASS.VALIDATORS["items"]),
        **GO_RANGE_KEYWORDS,
    },
)
# Compiled once (with $refs inlined): building a validator costs more than
# validating a spec. The schema dicts stay alive with it, so the id()-keyed
# leaf tests above stay valid.
_VALIDATOR = _VALIDATOR_CLASS(inline_refs(SCHEMA))


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def json_path(parts: Iterable[str | int]) -> str:
    """``("devices", 2, "containerEdits")`` -> ``devices[2].containerEdits``.

    A key that is not a plain name (an annotation key, a misspelt field
    holding '.' or a newline) is quoted, ``annotations['vendor.com/x']``, so
    the path stays unambiguous and each problem stays on one line.
    """
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            out += f"[{part!r}]"
        else:
            out += f".{part}" if out else part
    return out


_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def _type_name(value: object) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _expected_types(expected: str | Sequence[str]) -> str:
    names = [expected] if isinstance(expected, str) else list(expected)
    # A string field also takes numbers and booleans (read as text); say "string".
    if "string" in names:
        names = [n for n in names if n not in ("number", "boolean")]
    names = [n for n in names if n != "null"] or names
    return " or ".join(names)


def _did_you_mean(key: str, known: Sequence[str]) -> str:
    """`` (did you mean deviceNodes?)`` for a near miss of a known field (a case
    slip, a letter dropped); empty when nothing is close."""
    by_fold = {k.casefold(): k for k in known}
    match = by_fold.get(key.casefold()) or next(
        iter(difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)), None)
    return f" (did you mean {match}?)" if match else ""


def _problems(error: jsonschema.ValidationError, path: str) -> list[SpecError]:
    """Translate one jsonschema error into SpecErrors with our wording."""
    where = list(error.absolute_path)
    keyword = error.validator
    # jsonschema types these as possibly unset; for an error from our schema
    # they are always the subschema (a dict) and the keyword's value.
    schema: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
    value: Any = error.validator_value
    if keyword == "additionalProperties" and isinstance(error.instance, dict):
        known = schema.get("properties", {})
        return [
            SpecError(path, "unknown field" + _did_you_mean(str(key), known),
                      json_path([*where, key]))
            for key in error.instance
            if key not in known
        ]
    if keyword == "required":
        missing = str(value)
        for name in value:
            if isinstance(error.instance, dict) and name not in error.instance:
                missing = name
                break
        return [SpecError(path, "required field is missing", json_path([*where, missing]))]
    field = json_path(where) or "(document)"
    if keyword == "type":
        expected = _expected_types(value)
        return [SpecError(path, f"must be {expected}, not {_type_name(error.instance)}", field)]
    if keyword in ("minimum", "maximum"):
        low, high = schema.get("minimum"), schema.get("maximum")
        kind = "uint32" if (low, high) == (0, 4294967295) else "int64"
        instance: Any = error.instance
        shown = go_number(instance)  # a float as the reference reads it
        return [SpecError(path, f"{shown} is out of range for {kind} ({low}..{high})", field)]
    return [SpecError(path, error.message, field)]


def _sort_key(error: SpecError) -> tuple[str, str]:
    # Natural order, so devices[2] comes before devices[10].
    return (re.sub(r"\d+", lambda m: m.group().zfill(12), error.field), error.reason)


def schema_problems(doc: Any, path: str) -> list[SpecError]:
    """Every way `doc` breaks the CDI JSON Schema, as SpecErrors; pure.

    Empty when the document's shape is valid. Sorted by JSON path so the
    same document always gives the same report.
    """
    problems: list[SpecError] = []
    try:
        if _VALIDATOR.is_valid(doc):
            return []
        for error in _VALIDATOR.iter_errors(doc):
            problems.extend(_problems(error, path))
    except RecursionError:
        # jsonschema words a type error with repr() of the value, which a
        # value nested ~1,000 deep (still decodable) exhausts.
        return [SpecError(path, "document is nested too deeply")]
    return sorted(problems, key=_sort_key)
