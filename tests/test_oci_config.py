"""The one shape checker for a bundle's config.json (ateom.oci_config)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ateom.errors import ErrorCode
from ateom.oci_config import SHAPES, ConfigError, check_shape, dump_config, parse_config

PATH = "/actors/a/app/config.json"

# A value of some other JSON type for each kind the table asks for.
_WRONG = {"an object": [], "an array": {}, "a string": 7, "an integer": "7"}


def _config_with(field: str, value: Any) -> dict[str, Any]:
    """The smallest config whose `field` (a SHAPES path) holds `value`."""
    parts: list[str] = []
    for part in field.split("."):
        name, brackets, _ = part.partition("[]")
        parts.append(name)
        if brackets:
            parts.append("[]")
    node: Any = value
    for step in reversed(parts):
        node = [node] if step == "[]" else {"k" if step == "*" else step: node}
    assert isinstance(node, dict)
    return node


def _error(raw: bytes | str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        parse_config(raw.encode() if isinstance(raw, str) else raw, PATH)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert str(err.value).startswith(f"{PATH}: ")
    return err.value


@pytest.mark.parametrize("field,kind", SHAPES)
def test_every_rule_of_the_table_names_the_field_and_the_type(field: str, kind: str) -> None:
    name = field.replace("[]", "[0]").replace("*", "k")
    config = _config_with(field, _WRONG[kind])
    message = str(_error(json.dumps(config)))
    assert f": {name}: is " in message and message.endswith(f", not {kind}")


@pytest.mark.parametrize("field,kind", SHAPES)
def test_every_rule_accepts_its_own_type(field: str, kind: str) -> None:
    good = {"an object": {}, "an array": [], "a string": "s", "an integer": 7}[kind]
    config = _config_with(field, good)
    assert parse_config(json.dumps(config).encode(), PATH) == config


def test_a_real_config_parses_to_the_same_object_json_gives() -> None:
    config = {
        "ociVersion": "1.0.0", "process": {"user": {"uid": 1000, "gid": 1000,
                                                    "additionalGids": [44]},
                                           "args": ["sh"], "env": ["PATH=/bin"]},
        "root": {"path": "rootfs", "readonly": True},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "hooks": {"createContainer": [{"path": "/h"}], "poststop": None},
        "linux": {"devices": [{"path": "/dev/x"}], "resources": {"devices": [{"allow": False}]},
                  "netDevices": {"eth0": {"name": "n"}}},
        "annotations": {"a": "b"}, "x-unknown": [1.5, None, {"deep": [[]]}],
    }
    raw = json.dumps(config).encode()
    assert parse_config(raw, PATH) == json.loads(raw)


@pytest.mark.parametrize("config", [
    {"process": None, "root": None, "mounts": None, "linux": None, "annotations": None},
    {"process": {"env": None, "user": {"uid": None, "additionalGids": None}}},
    {"hooks": {"prestart": None}},  # a hook kind with no hooks
])
def test_null_named_fields_are_absent(config: dict[str, Any]) -> None:
    assert parse_config(json.dumps(config).encode(), PATH) == config


@pytest.mark.parametrize("config,field", [
    ({"mounts": [None]}, "mounts[0]: is null, not an object"),
    ({"process": {"env": ["A=1", None]}}, "process.env[1]: is null, not a string"),
    ({"annotations": {"k": None}}, "annotations.k: is null, not a string"),
    ({"hooks": {"prestart": [None]}}, "hooks.prestart[0]: is null, not an object"),
    ({"process": {"user": {"uid": True}}}, "process.user.uid: is a boolean, not an integer"),
    ({"process": {"user": {"gid": 1.0}}}, "process.user.gid: is a number, not an integer"),
])
def test_null_elements_booleans_and_floats_are_not_what_the_table_asks(
        config: dict[str, Any], field: str) -> None:
    assert str(_error(json.dumps(config))) == f"{PATH}: {field}"


def test_the_outermost_wrong_field_is_reported() -> None:
    # process.env is checked before its entries, process before process.env.
    assert "process: is an array" in str(_error('{"process": [{"env": 5}]}'))
    assert "process.env: is an integer" in str(_error('{"process": {"env": 5}}'))


def test_env_entry_with_a_nul_byte_is_refused() -> None:
    # The kernel would see a shorter string than the config says.
    message = str(_error('{"process": {"env": ["A=1", "B=x\\u0000y"]}}'))
    assert message == f"{PATH}: process.env[1]: contains a NUL byte"


@pytest.mark.parametrize("raw,why", [
    (b'{"process": ', "not valid JSON: Expecting value"),
    (b"", "not valid JSON"),
    (b'{"a": NaN}', "not valid JSON: NaN is not JSON"),
    (b'{"a": -Infinity}', "not valid JSON: -Infinity is not JSON"),
    (b'{"a": "\xff"}', "not valid UTF-8"),
    (b'{"a": "\xed\xa0\x80"}', "not valid UTF-8"),  # an encoded surrogate
    ('{"a": 1}'.encode("utf-16"), "not valid UTF-8"),
    (b"[1, 2]", "top level is an array, not an object"),
    (b'"config"', "top level is a string, not an object"),
    (b"null", "top level is null, not an object"),
])
def test_not_a_json_object_is_a_config_error(raw: bytes, why: str) -> None:
    assert why in str(_error(raw))


@pytest.mark.parametrize("depth", [100_000, 5_000, 201])
def test_deep_nesting_is_a_config_error_not_a_recursion_error(depth: int) -> None:
    raw = '{"x-deep": ' + "[" * depth + "]" * depth + "}"
    assert "nested too deeply" in str(_error(raw))


def test_nesting_up_to_the_limit_is_accepted() -> None:
    depth = 199  # the object itself is the first level
    raw = ('{"x-deep": ' + "[" * depth + "]" * depth + "}").encode()
    assert parse_config(raw, PATH)["x-deep"] == _nested(depth)


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_errors_echo_at_most_a_few_hundred_characters_of_the_input() -> None:
    key = "k" * 100_000
    message = str(_error(json.dumps({"annotations": {key: 1}})))
    assert len(message) < len(PATH) + 300 and "… (100012 chars)" in message
    message = str(_error(b'{"a": "' + b"x" * 1_000_000 + b'" junk}'))
    assert len(message) < len(PATH) + 300
    message = str(_error(json.dumps({"hooks": {key: [1]}})))
    assert len(message) < len(PATH) + 300


def test_duplicate_keys_keep_the_last_as_runsc_does() -> None:
    assert parse_config(b'{"root": {"path": "a"}, "root": {"path": "b"}}', PATH) == {
        "root": {"path": "b"}}


def test_check_shape_is_the_same_rules_on_a_parsed_object() -> None:
    check_shape({"process": {"env": ["A=1"]}}, PATH)
    with pytest.raises(ConfigError, match=r"mounts\[1\]: is a string"):
        check_shape({"mounts": [{}, "x"]}, PATH)


def test_dump_config_is_compact_deterministic_and_round_trips() -> None:
    config = {"b": [1, {"c": "é\ud800"}], "a": None}
    data = dump_config(config, PATH)
    assert data == b'{"b":[1,{"c":"\\u00e9\\ud800"}],"a":null}'
    assert dump_config(json.loads(data), PATH) == data


def test_dump_config_of_a_config_too_deep_to_write_is_a_config_error() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ConfigError, match="nested too deeply to write"):
        dump_config({"x": deep}, PATH)
