"""Where ateom's spec reader and the CDI reference's ReadSpec must agree.

Each class here was found by comparing ateom with the reference (Go:
cncf-tags/container-device-interface, which reads YAML and JSON through
sigs.k8s.io/yaml, i.e. go-yaml v2 in strict mode, then encoding/json into its
spec structs). A test per class says what the reference does and checks
that ateom does the same, or documents why not.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml

from ateom.cdi import yaml_loader
from ateom.cdi.model import DeviceNode
from ateom.cdi.parse import decode_document
from ateom.cdi.spec_file import LoadedSpec, parse_spec_text, spec_problems
from ateom.errors import SpecError

HEAD = """\
cdiVersion: {version}
kind: vendor.com/device
"""


def load_yaml(text: str) -> LoadedSpec:
    return parse_spec_text(text, "spec.yaml", "yaml")


def yaml_error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        load_yaml(text)
    found = spec_problems(info.value)
    assert len(found) == 1, found
    assert str(found[0]).startswith("spec.yaml: ")
    return str(found[0])


def device_yaml(edits: str, version: str = "0.5.0") -> str:
    """A spec whose one device has `edits` (YAML, indented 6) as containerEdits."""
    return HEAD.format(version=version) + "devices:\n  - name: dev0\n    containerEdits:\n" + edits


@pytest.fixture(params=["default", "pure-python"])
def yaml_loader_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with libyaml's loader (when built) and with PyYAML's pure-Python one."""
    if request.param == "pure-python":
        monkeypatch.setattr(
            yaml_loader, "_SpecYamlLoader", yaml_loader.make_spec_loader(yaml.SafeLoader)
        )
    return str(request.param)


# -- merge keys: go-yaml v2 strict refuses a key a merge already set ------------

MERGED = """\
cdiVersion: 0.5.0
kind: vendor.com/device
devices:
  - name: dev0
    containerEdits: &a0
      env: [A=1]
      deviceNodes: [{path: /dev/a}]
  - name: dev1
    containerEdits:
{body}
"""


def _merged(body: str) -> str:
    return MERGED.replace("{body}", body)


def test_merge_key_then_override_is_refused(yaml_loader_kind: str) -> None:
    text = _merged("      <<: *a0\n      deviceNodes: [{path: /dev/b}]")
    message = yaml_error(text)
    assert "key 'deviceNodes' already set in map" in message
    assert "line 11" in message  # the overriding key, which the merge at line 10 set


def test_key_then_merge_of_the_same_key_is_refused(yaml_loader_kind: str) -> None:
    text = _merged("      deviceNodes: [{path: /dev/b}]\n      <<: *a0")
    assert "key 'deviceNodes' already set in map" in yaml_error(text)


def test_two_merged_maps_sharing_a_key_are_refused(yaml_loader_kind: str) -> None:
    text = _merged("      <<: [*a0, {env: [B=2]}]")
    assert "key 'env' already set in map" in yaml_error(text)


def test_merge_without_conflicts_reads_like_the_reference(yaml_loader_kind: str) -> None:
    text = _merged("      <<: [*a0, {mounts: [{hostPath: /a, containerPath: /a}]}]")
    devices = load_yaml(text).spec.devices
    assert devices[1].container_edits.device_nodes == devices[0].container_edits.device_nodes
    assert devices[1].container_edits.env == ("A=1",)
    assert devices[1].container_edits.mounts[0].host_path == "/a"


@pytest.mark.parametrize("value", ["x", "[x]", "[*s]"])
def test_merge_of_a_non_mapping_is_refused(value: str, yaml_loader_kind: str) -> None:
    message = str(_decode_error(f"s: &s str\nm:\n  <<: {value}\n"))
    assert "map merge requires map or sequence of maps as the value" in message


def test_quoted_merge_key_is_an_ordinary_key() -> None:
    assert decode_document("m:\n  '<<': {a: 1}\n", "f", "yaml") == {"m": {"<<": {"a": 1}}}


# -- mapping keys: sigs.k8s.io/yaml converts scalar keys to strings -------------


@pytest.mark.parametrize("key", ["~", "null", "NULL"])
def test_null_mapping_key_is_refused(key: str, yaml_loader_kind: str) -> None:
    text = device_yaml("      env: [A=1]\n", "0.6.0") + f"annotations: {{{key}: v}}\n"
    message = yaml_error(text)
    assert "unsupported map key (null)" in message


def test_uint64_mapping_key_is_refused() -> None:
    # go-yaml gives a uint64 for 2^63..2^64-1, which sigs.k8s.io/yaml cannot key.
    assert "unsupported map key" in str(_decode_error("18446744073709551615: v\n"))
    assert decode_document("9223372036854775807: v\n", "f", "yaml") == {"9223372036854775807": "v"}


@pytest.mark.parametrize(
    "key, text",
    [
        ("1", "1"),
        ("0x10", "16"),
        ("yes", "true"),
        ("1.5", "1.5"),
        (".inf", ".inf"),
        ("-.inf", "-.inf"),
        (".nan", ".nan"),
        ("1e40", ".inf"),  # float32 overflow, as FormatFloat(.., 32) then go-yaml's names
        ("99999999999999999999", "1e+20"),  # beyond uint64: a float64 in go-yaml
    ],
)
def test_scalar_keys_read_as_the_reference_formats_them(key: str, text: str) -> None:
    assert decode_document(f"{key}: v\n", "f", "yaml") == {text: "v"}


# -- escapes: go-yaml v2's double-quoted escapes are YAML 1.1's -----------------


def test_escaped_slash_in_yaml_is_refused(yaml_loader_kind: str) -> None:
    message = yaml_error(device_yaml('      env: ["A=x\\/y"]\n'))
    assert "found unknown escape character '/'" in message
    assert "line 6 column" in message


@pytest.mark.parametrize(
    "written, read",
    [
        ('"a\\\\/b"', "a\\/b"),  # an escaped backslash, then '/'
        ("'a\\/b'", "a\\/b"),  # single-quoted: no escapes
        ("a\\/b", "a\\/b"),  # plain: no escapes
        (
            '"\\x41\\u00e9\\U0001F600\\t\\e\\N\\_\\L\\P\\0"',
            "A\u00e9\U0001f600\t\x1b\x85\xa0\u2028\u2029\0",
        ),
        ('"a\\\n  b"', "ab"),  # an escaped line break
    ],
)
def test_yaml_escapes_go_yaml_knows_still_read(
    written: str, read: str, yaml_loader_kind: str
) -> None:
    assert decode_document(f"k: {written}\n", "f", "yaml") == {"k": read}


@pytest.mark.parametrize("escape", ["\\uD800", "\\uDFFF", "\\U00110000"])
def test_escape_of_a_surrogate_or_beyond_unicode_is_refused(
    escape: str, yaml_loader_kind: str
) -> None:
    message = str(_decode_error(f'k: "{escape}"\n'))
    assert "invalid Unicode character escape code" in message or "invalid YAML" in message


def test_escaped_slash_in_json_is_valid_json() -> None:
    # RFC 8259 allows "\/"; ateom reads .json files as JSON, so it reads "/".
    text = json.dumps(
        {
            "cdiVersion": "0.5.0",
            "kind": "vendor.com/device",
            "devices": [{"name": "dev0", "containerEdits": {"env": ["A=x/y"]}}],
        }
    )
    text = text.replace("x/y", "x\\/y")
    assert parse_spec_text(text, "s.json", "json").spec.devices[0].container_edits.env == ("A=x/y",)


def test_escape_audit_finds_scalars_after_non_ascii_text(yaml_loader_kind: str) -> None:
    text = 'a: "é\U0001f600"\nb: "ok \\\\ fine"\nc: "bad \\/"\n'
    assert "line 3 column" in str(_decode_error(text))


# -- integers: sigs.k8s.io/yaml and encoding/json refuse what is out of range ----


@pytest.mark.parametrize(
    "field, written",
    [
        ("minor", "-9223372036854775809"),
        ("major", "9223372036854775808"),
        ("major", "-9.223372036854775808e18"),  # float64 -2^63; Go's JSON text overflows int64
        ("uid", "4294967296"),
        ("gid", "-1"),
        ("fileMode", "4294967296.0"),
    ],
)
def test_integer_out_of_range_is_refused(field: str, written: str) -> None:
    message = yaml_error(
        device_yaml(f"      deviceNodes: [{{path: /dev/a, {field}: {written}}}]\n")
    )
    assert f"devices[0].containerEdits.deviceNodes[0].{field}: " in message
    assert "out of range for" in message


def test_out_of_range_integer_is_quoted_as_written() -> None:
    message = yaml_error(
        device_yaml("      deviceNodes: [{path: /dev/a, minor: -9223372036854775809}]\n")
    )
    assert "-9223372036854775809 is out of range for int64" in message


@pytest.mark.parametrize(
    "written, value",
    [
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("1e3", 1000),
        ("9.2233720368547e18", 9223372036854700000),
    ],
)
def test_integers_in_range_read_as_the_reference_reads_them(written: str, value: int) -> None:
    spec = load_yaml(device_yaml(f"      deviceNodes: [{{path: /dev/a, major: {written}}}]\n")).spec
    major = spec.devices[0].container_edits.device_nodes[0].major
    assert major == value and isinstance(major, int)


def test_a_huge_integer_where_a_string_belongs_is_go_float_text() -> None:
    # go-yaml has a float64 here, which a string field formats as a float32.
    mounts = "      mounts: [{hostPath: /a, containerPath: /a, options: [-9223372036854775809]}]\n"
    spec = load_yaml(device_yaml(mounts)).spec
    assert spec.devices[0].container_edits.mounts[0].options == ("-9.223372e+18",)


# -- field rules: the reference's validation ------------------------------------


def test_empty_schemata_needs_1_1_0_like_any_schemata() -> None:
    # requiresV110 gates on Schemata != nil: present, even empty.
    for version in ("0.7.0", "0.8.0", "1.0.0"):
        message = yaml_error(device_yaml("      intelRdt: {schemata: []}\n", version))
        assert (
            "devices[0].containerEdits.intelRdt.schemata: intelRdt schemata needs cdiVersion 1.1.0"
            in message
        )
    load_yaml(device_yaml("      intelRdt: {schemata: []}\n", "1.1.0"))


@pytest.mark.parametrize("rdt", ["{schemata: null}", "{closID: c}", "{}"])
def test_absent_or_null_schemata_is_fine_before_1_1_0(rdt: str) -> None:
    load_yaml(device_yaml(f"      intelRdt: {rdt}\n", "0.7.0"))


def test_root_clos_id_is_allowed() -> None:
    spec = load_yaml(device_yaml("      intelRdt: {closID: /}\n", "0.7.0")).spec
    assert spec.devices[0].container_edits.intel_rdt.clos_id == "/"  # type: ignore[union-attr]


def test_clos_id_length_counts_bytes_as_go_does() -> None:
    message = yaml_error(device_yaml(f"      intelRdt: {{closID: {'é' * 2048}}}\n", "0.7.0"))
    assert "intelRdt.closID: " in message


def test_permissions_none_requests_empty_cgroup_access() -> None:
    spec = load_yaml(device_yaml("      deviceNodes: [{path: /dev/a, permissions: none}]\n")).spec
    node = spec.devices[0].container_edits.device_nodes[0]
    assert node.permissions == "none"
    assert node.cgroup_access == ""


@pytest.mark.parametrize("perms, access", [(None, "rwm"), ("", "rwm"), ("rw", "rw"), ("none", "")])
def test_cgroup_access(perms: str | None, access: str) -> None:
    assert DeviceNode(path="/dev/a", permissions=perms).cgroup_access == access


@pytest.mark.parametrize("perms", ["nonex", "None", "rwnone", "none "])
def test_permissions_like_none_are_still_refused(perms: str) -> None:
    message = yaml_error(
        device_yaml(f"      deviceNodes: [{{path: /dev/a, permissions: '{perms}'}}]\n")
    )
    assert "deviceNodes[0].permissions: " in message


def test_device_without_edits_is_named() -> None:
    message = yaml_error(HEAD.format(version="0.5.0") + "devices:\n  - name: dev1\n")
    assert message == 'spec.yaml: devices[0].containerEdits: device "dev1" has no edits'


# -- tags: read as go-yaml v2 reads them (see docs/cdi.md) ----------------------


def test_binary_tag_is_its_decoded_text(yaml_loader_kind: str) -> None:
    encoded = base64.b64encode(b"A=from binary").decode()
    spec = load_yaml(device_yaml(f"      env: [!!binary {encoded}]\n")).spec
    assert spec.devices[0].container_edits.env == ("A=from binary",)


def test_binary_block_may_span_lines() -> None:
    encoded = base64.b64encode(b"x" * 60).decode()
    text = "k: !!binary |\n  " + encoded[:40] + "\n  " + encoded[40:] + "\n"
    assert decode_document(text, "f", "yaml") == {"k": "x" * 60}


def test_binary_that_is_not_utf8_reads_as_go_json_writes_it() -> None:
    # encoding/json replaces each byte of invalid UTF-8 with U+FFFD.
    encoded = base64.b64encode(b"a\xff\xe2\x82b").decode()
    assert decode_document(f"k: !!binary {encoded}\n", "f", "yaml") == {"k": "a\ufffd\ufffd\ufffdb"}


@pytest.mark.parametrize("value", ["'###'", "aGk", "aGk=aGk=", "a Gk=", "QT0x==="])
def test_binary_with_invalid_base64_is_refused(value: str) -> None:
    assert "!!binary value contains invalid base64 data" in str(
        _decode_error(f"k: !!binary {value}\n")
    )


@pytest.mark.parametrize(
    "written, read",
    [
        ("!foo bar", "bar"),
        ("!foo 12", "12"),  # a custom tag leaves the text untyped
        ("!<tag:example.com,2024:x> y", "y"),
        ("!!python/object:os.system x", "x"),
        ("!!merge x", "x"),
        ("<<", "<<"),  # a merge key's text, where a value belongs
        ("=", "="),  # not YAML 1.1's "value" type
        ("!!set x", "x"),
        ("!foo {a: 1}", {"a": 1}),
        ("!foo [1, a]", [1, "a"]),
        ("!!str [a]", ["a"]),  # go-yaml v2 reads collections by kind, whatever the tag
        ("!!set {a, b}", {"a": None, "b": None}),
        ("!!omap [a: 1]", [{"a": 1}]),
        ("!!null {a: 1}", None),
        ("!!null x", None),
        ("!!str 12", "12"),
        ("!!int '12'", 12),
        ("!!int 0x10", 16),
        ("!!float 1", 1.0),
        ("!!bool yes", True),
        ("!!timestamp 2001-12-14", "2001-12-14"),
        ("!!timestamp 2001-12-14t21:59:43.10-05:00", "2001-12-14t21:59:43.10-05:00"),
        ("!!timestamp 2001-12-14 21:59:43.10", "2001-12-14 21:59:43.10"),
    ],
)
def test_tags_read_as_go_yaml_v2_reads_them(written: str, read: Any, yaml_loader_kind: str) -> None:
    assert decode_document(f"k: {written}\n", "f", "yaml") == {"k": read}


@pytest.mark.parametrize(
    "written, problem",
    [
        ("!!int 1:0", "cannot decode !!str `1:0` as a !!int"),
        ("!!int 1.5", "cannot decode !!float `1.5` as a !!int"),
        ("!!int ~", "cannot decode !!null `~` as a !!int"),
        ("!!float abc", "cannot decode !!str `abc` as a !!float"),
        ("!!bool 1", "cannot decode !!int `1` as a !!bool"),
        ("!!timestamp 2001-13-01", "cannot decode !!str `2001-13-01` as a !!timestamp"),
        ("!!timestamp nope", "cannot decode !!str `nope` as a !!timestamp"),
    ],
)
def test_core_tags_that_do_not_fit_are_refused_as_go_yaml_refuses_them(
    written: str, problem: str
) -> None:
    assert problem in str(_decode_error(f"k: {written}\n"))


def test_a_custom_tagged_number_is_text_where_a_number_belongs() -> None:
    # As in the reference: json cannot unmarshal a string into an int64.
    message = yaml_error(device_yaml("      deviceNodes: [{path: !dev /dev/a, major: !num 195}]\n"))
    assert message.endswith(
        "devices[0].containerEdits.deviceNodes[0].major: must be integer, not string"
    )


def _decode_error(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        decode_document(text, "f.yaml", "yaml")
    assert "\n" not in str(info.value)
    return info.value
