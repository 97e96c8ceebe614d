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

import json
import re
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

import jsonschema

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


SCHEMA: dict[str, Any] = _load_schema()
# Draft 7 (declared in the file): the same checks as 2020-12 for this schema,
# and about a fifth faster in jsonschema, which matters at ~5 ms per spec.
_VALIDATOR_CLASS = jsonschema.validators.validator_for(SCHEMA)
_VALIDATOR_CLASS.check_schema(SCHEMA)
_VALIDATOR = _VALIDATOR_CLASS(inline_refs(SCHEMA))


def json_path(parts: Iterable[str | int]) -> str:
    """``("devices", 2, "containerEdits")`` -> ``devices[2].containerEdits``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
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
            SpecError(path, "unknown field", json_path([*where, key]))
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
        return [
            SpecError(path, f"{error.instance} is out of range for {kind} ({low}..{high})", field)
        ]
    return [SpecError(path, error.message, field)]


def _sort_key(error: SpecError) -> tuple[str, str]:
    # Natural order, so devices[2] comes before devices[10].
    return (re.sub(r"\d+", lambda m: m.group().zfill(12), error.field), error.reason)


def schema_problems(doc: Any, path: str) -> list[SpecError]:
    """Every way `doc` breaks the CDI JSON Schema, as SpecErrors; pure.

    Empty when the document's shape is valid. Sorted by JSON path so the
    same document always gives the same report.
    """
    if _VALIDATOR.is_valid(doc):
        return []
    problems: list[SpecError] = []
    for error in _VALIDATOR.iter_errors(doc):
        problems.extend(_problems(error, path))
    return sorted(problems, key=_sort_key)
