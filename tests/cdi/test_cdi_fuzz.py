"""Fuzzing: no input makes parsing or validation raise anything but SpecError.

Arbitrary JSON/YAML documents, arbitrary text, and mutations of the real
bundled specs (the mutations keep most of the shape, so they reach the
semantic pass rather than stopping at the schema).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ateom.cdi import schema
from ateom.cdi.edits import edits_to_json
from ateom.cdi.parse import decode_document
from ateom.cdi.spec_file import LoadedSpec, parse_spec_text, spec_problems
from ateom.cdi.testing import dump_yaml
from ateom.errors import SpecError

REPO = Path(__file__).resolve().parents[2]
SEEDS = [
    decode_document((REPO / "cdi_specs" / "valid" / name).read_bytes(), name, fmt)  # type: ignore[arg-type]
    for name, fmt in [("amd.yaml", "yaml"), ("intel.json", "json"), ("example-nic.yaml", "yaml")]
]
FIELD_NAMES = [
    "cdiVersion", "kind", "devices", "name", "containerEdits", "annotations", "env",
    "deviceNodes", "mounts", "hooks", "intelRdt", "additionalGids", "netDevices", "path",
    "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid",
    "containerPath", "options", "hookName", "args", "timeout", "closID", "schemata",
    "enableMonitoring", "hostInterfaceName", "majr",
]  # fmt: skip

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["0.3.0", "0.5.0", "v1.1.0", "vendor.com/gpu", "/dev/x", "A=1", "c", "rwm"]),
)
KEYS = st.one_of(st.sampled_from([*FIELD_NAMES, "x\ny", "a.b/c"]), st.text(max_size=8))
DOCUMENTS = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=5)
    ),
    max_leaves=30,
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(text: str | bytes, fmt: str) -> LoadedSpec | None:
    """Parse+validate; SpecError (with a message naming the file) is the only failure."""
    try:
        return parse_spec_text(text, "fuzz." + fmt, fmt)  # type: ignore[arg-type]
    except SpecError as exc:
        assert str(exc).startswith("fuzz." + fmt + ": ")
        assert exc.reason
        # `ateom cdi validate` prints one line per problem.
        assert all("\n" not in str(p) for p in spec_problems(exc)), str(exc)
        return None


@FUZZ
@given(DOCUMENTS)
def test_arbitrary_json_documents(doc: Any) -> None:
    check(json.dumps(doc), "json")


@FUZZ
@given(DOCUMENTS)
def test_arbitrary_yaml_documents(doc: Any) -> None:
    check(dump_yaml(doc), "yaml")


@FUZZ
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_arbitrary_text(text: str | bytes) -> None:
    check(text, "json")
    check(text, "yaml")


@FUZZ
@given(
    st.lists(
        st.sampled_from(
            [
                "!!int abc",
                "!!float x",
                "!!binary ###",
                "!!timestamp nope",
                "!!set {a: 1}",
                "!!omap [a: 1]",
                "!!python/object:os.system x",
                "&a [*a]",
                "? [a]\n: b",
                "{",
                "*x",
                "'",
                '"\\x"',
                "0b12",
                "1:0",
                ".nan",
                "~",
                "- - -",
                "a: b: c",
                "\t",
                "%YAML 1.1\n---",
                # Where go-yaml v2 and PyYAML part ways (docs/cdi.md).
                '"\\/"',
                '"\\uD800"',
                "!foo x",
                "!foo {a: 1}",
                "!!binary aGk=",
                "!!binary 'QT0x==='",
                "!!null [1]",
                "!!timestamp 2001-02-30",
                "!!int 99999999999999999999",
                "-9223372036854775809",
                "{<<: {a: 1}, a: 2}",
                "&m {a: 1}",
                "{<<: [*m, *m]}",
                "{<<: *m}",
                "? ~\n: x",
                "<<",
                "=",
            ]
        ),  # fmt: skip
        min_size=1,
        max_size=4,
    )
)
def test_yaml_oddities(pieces: list[str]) -> None:
    check("\n".join(f"k{i}: {p}" for i, p in enumerate(pieces)), "yaml")
    check("\n".join(pieces), "yaml")


def _containers(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _containers(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _containers(value, (*path, i))
    return found


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


MUTATION = st.sampled_from(["replace", "delete", "insert", "duplicate", "stringify", "empty"])


@st.composite
def mutated_specs(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _containers(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent, last = _at(doc, path[:-1]), path[-1]
        kind = draw(MUTATION)
        if kind == "replace":
            parent[last] = draw(DOCUMENTS)
        elif kind == "delete":
            del parent[last]
        elif kind == "insert" and isinstance(parent, dict):
            parent[draw(KEYS)] = draw(DOCUMENTS)
        elif kind == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[last]))
        elif kind == "stringify":
            parent[last] = json.dumps(parent[last])
        elif kind == "empty":
            parent[last] = type(parent[last])() if isinstance(parent[last], dict | list) else ""
    return doc


@FUZZ
@given(mutated_specs())
def test_mutated_real_specs(doc: Any) -> None:
    check(json.dumps(doc), "json")
    check(dump_yaml(doc), "yaml")


@settings(max_examples=60, deadline=None)
@given(mutated_specs())
def test_json_and_yaml_agree(doc: Any) -> None:
    """The same document gives the same verdict in either format."""
    as_json, as_yaml = check(json.dumps(doc), "json"), check(dump_yaml(doc), "yaml")
    assert (as_json is None) == (as_yaml is None)
    if as_json is not None and as_yaml is not None:
        assert as_json.spec.devices == as_yaml.spec.devices


@settings(max_examples=60, deadline=None)
@given(mutated_specs())
def test_valid_edits_survive_a_json_round_trip(doc: Any) -> None:
    """edits_to_json writes what the parser reads back: nothing lost or invented."""
    loaded = check(json.dumps(doc), "json")
    assume(loaded is not None)
    assert loaded is not None
    spec = loaded.spec
    rewritten = {
        "cdiVersion": spec.version,
        "kind": spec.kind,
        "devices": [
            {"name": d.name, "containerEdits": edits_to_json(d.container_edits)}
            | ({"annotations": dict(d.annotations)} if d.annotations else {})
            for d in spec.devices
        ],
        "containerEdits": edits_to_json(spec.container_edits),
    } | ({"annotations": dict(spec.annotations)} if spec.annotations else {})
    again = parse_spec_text(json.dumps(rewritten), "fuzz.json", "json").spec
    assert again.devices == spec.devices
    assert again.container_edits == spec.container_edits


TEXT = st.one_of(
    st.text(max_size=10),
    st.sampled_from(
        ["", "/dev/x", "dev/x", "A=", "=b", "0", "0:1", "a.b/c", "rwm", "c", "..", "x/y"]
    ),
)
SCALAR_TEXT = st.one_of(
    TEXT, st.integers(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False)
)
UINT32 = st.integers(min_value=0, max_value=2**32 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


def _drop_nones(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


EDITS = st.builds(
    lambda **kw: _drop_nones(kw),
    env=_optional(st.lists(SCALAR_TEXT, max_size=3)),
    deviceNodes=_optional(
        st.lists(
            st.builds(
                lambda **kw: _drop_nones(kw),
                path=SCALAR_TEXT,
                hostPath=_optional(TEXT),
                type=_optional(TEXT),
                major=_optional(INT64),
                minor=_optional(INT64),
                fileMode=_optional(UINT32),
                permissions=_optional(TEXT),
                uid=_optional(UINT32),
                gid=_optional(UINT32),
            ),
            max_size=2,
        )
    ),
    mounts=_optional(
        st.lists(
            st.builds(
                lambda **kw: _drop_nones(kw),
                hostPath=TEXT,
                containerPath=TEXT,
                type=_optional(TEXT),
                options=_optional(st.lists(TEXT, max_size=3)),
            ),
            max_size=2,
        )
    ),
    hooks=_optional(
        st.lists(
            st.builds(
                lambda **kw: _drop_nones(kw),
                hookName=st.one_of(TEXT, st.sampled_from(["prestart", "createContainer"])),
                path=TEXT,
                args=_optional(st.lists(TEXT, max_size=3)),
                env=_optional(st.lists(TEXT, max_size=2)),
                timeout=_optional(INT64),
            ),
            max_size=2,
        )
    ),
    intelRdt=_optional(
        st.builds(
            lambda **kw: _drop_nones(kw),
            closID=_optional(TEXT),
            l3CacheSchema=_optional(TEXT),
            memBwSchema=_optional(TEXT),
            schemata=_optional(st.lists(TEXT, max_size=2)),
            enableMonitoring=_optional(st.booleans()),
        )
    ),
    additionalGids=_optional(st.lists(UINT32, max_size=2)),
    netDevices=_optional(st.lists(st.builds(dict, hostInterfaceName=TEXT, name=TEXT), max_size=2)),
)
ANNOTATIONS = st.dictionaries(TEXT, TEXT, max_size=3)
SPEC_SHAPED = st.builds(
    lambda **kw: _drop_nones(kw),
    cdiVersion=st.one_of(st.sampled_from(["0.3.0", "0.5.0", "v0.6.0", "0.7.0", "1.1.0"]), TEXT),
    kind=st.one_of(st.sampled_from(["vendor.com/gpu", "v/c.d"]), TEXT),
    annotations=_optional(ANNOTATIONS),
    containerEdits=_optional(EDITS),
    devices=st.lists(
        st.builds(
            lambda **kw: _drop_nones(kw),
            name=SCALAR_TEXT,
            annotations=_optional(ANNOTATIONS),
            containerEdits=_optional(EDITS),
        ),
        max_size=3,
    ),
)


@FUZZ
@given(SPEC_SHAPED)
def test_spec_shaped_documents_reach_the_semantic_pass_safely(doc: Any) -> None:
    """Schema-valid shapes with arbitrary content: only SpecError, and the same
    verdict and model whether written as JSON or YAML."""
    as_json = check(json.dumps(doc), "json")
    as_yaml = check(dump_yaml(doc), "yaml")
    assert (as_json is None) == (as_yaml is None)
    if as_json is not None and as_yaml is not None:
        assert as_json.spec.devices == as_yaml.spec.devices
        assert as_json.spec.container_edits == as_yaml.spec.container_edits


def _errors(validator: Any, doc: Any) -> list[tuple[str, str, str]]:
    return sorted(
        (json.dumps(list(e.absolute_path)), str(e.validator), e.message)
        for e in validator.iter_errors(doc)
    )


# jsonschema's own descent, with only the reference's range rule (schema.go_number) added.
PLAIN_VALIDATOR = jsonschema.validators.extend(schema._BASE_CLASS, schema.GO_RANGE_KEYWORDS)(
    schema.inline_refs(schema.SCHEMA)
)


@FUZZ
@given(st.one_of(SPEC_SHAPED, mutated_specs(), DOCUMENTS))
def test_fast_leaf_checks_match_plain_jsonschema(doc: Any) -> None:
    """The validator's leaf fast path accepts and reports exactly what jsonschema does."""
    assert schema._VALIDATOR.is_valid(doc) == PLAIN_VALIDATOR.is_valid(doc)
    assert _errors(schema._VALIDATOR, doc) == _errors(PLAIN_VALIDATOR, doc)
