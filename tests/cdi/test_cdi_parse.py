"""Decoding spec text (JSON and YAML) and building the model from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ateom.cdi import parse
from ateom.cdi import yaml_loader as spec_yaml
from ateom.cdi.go_scalars import go_float32_text, scalar_text
from ateom.cdi.parse import MAX_DOCUMENT_NODES, decode_document
from ateom.cdi.spec_file import load_spec, parse_spec_text
from ateom.errors import SpecError

MINIMAL_YAML = """\
cdiVersion: 0.5.0
kind: vendor.com/device
devices:
  - name: {name}
    containerEdits:
      env: [A=1]
"""


def spec_error(text: str | bytes, fmt: str = "yaml") -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec_text(text, "spec." + fmt, fmt)  # type: ignore[arg-type]
    assert str(info.value).startswith("spec." + fmt + ": ")
    return info.value


@pytest.mark.parametrize("fmt", ["json", "yaml"])
@pytest.mark.parametrize("text", ["", "   \n\t\n", b""])
def test_empty_file_is_an_error(fmt: str, text: str | bytes) -> None:
    assert "file is empty" in str(spec_error(text, fmt))


def test_yaml_with_only_comments_is_empty() -> None:
    assert "file is empty" in str(spec_error("# nothing\n---\n"))


def test_duplicate_key_yaml() -> None:
    text = MINIMAL_YAML.format(name="a") + "kind: vendor.com/other\n"
    message = str(spec_error(text))
    assert "duplicate key 'kind'" in message
    assert "line 7" in message and "first defined at line 2" in message


def test_duplicate_key_json() -> None:
    text = '{"cdiVersion": "0.5.0", "cdiVersion": "0.6.0"}'
    assert "duplicate key 'cdiVersion'" in str(spec_error(text, "json"))


def test_duplicate_key_nested_json() -> None:
    text = json.dumps({"a": 1})[:-1] + ', "b": {"x": 1, "x": 2}}'
    assert "duplicate key 'x'" in str(spec_error(text, "json"))


def test_yaml_merge_key_override_is_a_duplicate() -> None:
    # go-yaml v2 strict, as the reference reads specs: "key already set in map".
    message = str(spec_error("base: &b {x: 1, z: 2}\nover:\n  <<: *b\n  x: 3\n"))
    assert "key 'x' already set in map (by the merge key '<<' at line 3" in message
    assert decode_document("b: &b {z: 2}\nover:\n  <<: *b\n  x: 3\n", "f", "yaml") == {
        "b": {"z": 2},
        "over": {"z": 2, "x": 3},
    }


def test_yaml_int_keys_become_strings_and_collide() -> None:
    assert decode_document("1: a\ntrue: b\n", "f", "yaml") == {"1": "a", "true": "b"}
    assert "duplicate key '1'" in str(spec_error("1: a\n'1': b\n"))


def test_yaml_complex_key_is_an_error() -> None:
    assert "non-scalar mapping key" in str(spec_error("? [a, b]\n: c\n"))


def test_yaml_several_documents_is_an_error() -> None:
    text = MINIMAL_YAML.format(name="a") + "---\n" + MINIMAL_YAML.format(name="b")
    assert "single document" in str(spec_error(text))


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_nan_and_infinity_are_rejected(constant: str) -> None:
    assert "not valid JSON" in str(spec_error('{"a": ' + constant + "}", "json"))


def test_json_syntax_error_names_the_line() -> None:
    assert "invalid JSON at line 2 column" in str(spec_error('{\n"a" 1}', "json"))


def test_invalid_utf8_is_an_error() -> None:
    assert "not valid UTF-8" in str(spec_error(b'{"kind": "\xff"}', "json"))


def test_utf8_bom_is_accepted() -> None:
    loaded = parse_spec_text(
        b"\xef\xbb\xbf" + MINIMAL_YAML.format(name="a").encode(), "spec.yaml", "yaml"
    )
    assert loaded.spec.devices[0].name == "a"


@pytest.mark.parametrize("text", ["&x [1, *x]\n", "a: &x [1, *x]\n", "a: &m {b: [*m]}\n"])
def test_recursive_yaml_alias_is_an_error(text: str) -> None:
    assert "recursive" in str(spec_error(text))


def test_alias_bomb_is_refused_before_expansion() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):  # 10**8 nodes once expanded
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    message = str(spec_error("\n".join(lines) + "\n"))
    assert f"more than {MAX_DOCUMENT_NODES} nodes" in message


def test_small_yaml_aliases_are_fine() -> None:
    text = """\
cdiVersion: 0.5.0
kind: vendor.com/device
devices:
  - name: a
    containerEdits: &edits
      env: [A=1]
  - name: b
    containerEdits: *edits
"""
    spec = parse_spec_text(text, "s.yaml", "yaml").spec
    assert spec.devices[0].container_edits == spec.devices[1].container_edits


@pytest.mark.parametrize(
    "written, read",
    [
        ("0", "0"),
        ("'0'", "0"),
        ("10", "10"),
        ("010", "8"),  # YAML 1.1 octal, as the Go decoder reads it
        ("0x1f", "31"),
        ("1.5", "1.5"),
        ("1.0", "1"),
        ("true", "true"),
        ("yes", "true"),
        ("0:0", "0:0"),
        ("1:0", "1:0"),  # MIG name, not base-60 integer 60
        ("2024-01-02", "2024-01-02"),  # not a timestamp
        # go-yaml v2's forms, where YAML 1.1 (PyYAML) would read a string:
        ("y", "true"),
        ("N", "false"),
        ("1e3", "1000"),
        ("1.5e3", "1500"),
        (".5e1", "5"),
        ("+.5", "0.5"),
        ("08", "8"),  # not octal, so Go reads the float 8
        ("0o17", "15"),
        ("0X1f", "31"),
        ("1_000", "1000"),
        ("18446744073709551615", "18446744073709551615"),  # uint64
        ("1e999", "1e999"),  # out of float range: text
        ("0b2", "0b2"),
        ("1.2.3", "1.2.3"),
    ],
)
def test_scalars_where_a_string_belongs_read_like_the_reference(
    written: str, read: str, yaml_loader: str
) -> None:
    spec = parse_spec_text(
        MINIMAL_YAML.format(name=written).replace("0.5.0", "0.6.0"), "s.yaml", "yaml"
    ).spec
    assert spec.devices[0].name == read


def test_json_numbers_where_strings_belong() -> None:
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "vendor.com/device",
        "devices": [
            {
                "name": 0,
                "containerEdits": {
                    "env": ["A=1"],
                    "mounts": [
                        {"hostPath": "/a", "containerPath": "/a", "options": ["ro", 1, True]}
                    ],
                },
            }
        ],
    }
    spec = parse_spec_text(json.dumps(doc), "s.json", "json").spec
    assert spec.devices[0].name == "0"
    assert spec.devices[0].container_edits.mounts[0].options == ("ro", "1", "true")


def test_json_integral_floats_are_integers_for_numeric_fields() -> None:
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "vendor.com/device",
        "devices": [
            {
                "name": "a",
                "containerEdits": {
                    "deviceNodes": [{"path": "/dev/a", "major": 195.0, "minor": 3, "fileMode": 438}]
                },
            }
        ],
    }
    node = parse_spec_text(json.dumps(doc), "s.json", "json").spec.devices[0]
    assert node.container_edits.device_nodes[0].major == 195
    assert isinstance(node.container_edits.device_nodes[0].major, int)


def test_string_where_a_number_belongs_is_an_error() -> None:
    text = MINIMAL_YAML.format(name="a").replace(
        "env: [A=1]", "deviceNodes: [{path: /dev/a, major: '195'}]"
    )
    message = str(spec_error(text))
    assert "devices[0].containerEdits.deviceNodes[0].major: must be integer, not string" in message


def test_nulls_in_optional_fields_read_as_absent() -> None:
    text = """\
cdiVersion: 0.5.0
kind: vendor.com/device
annotations:
containerEdits:
devices:
  - name: a
    containerEdits:
      env: [A=1]
      mounts:
      deviceNodes:
        - path: /dev/a
          type:
          major:
"""
    spec = parse_spec_text(text, "s.yaml", "yaml").spec
    node = spec.devices[0].container_edits.device_nodes[0]
    assert node.type is None and node.major is None
    assert spec.container_edits.is_empty()
    assert spec.devices[0].container_edits.mounts == ()


@pytest.mark.parametrize(
    "value, text",
    [
        (3.14159265358979, "3.1415927"),  # float32 precision, like Go's FormatFloat(.., 32)
        (1e6, "1e+06"),
        (123456.0, "123456"),
        (0.0001, "0.0001"),
        (1e-5, "1e-05"),
        (-2.5, "-2.5"),
        (1e40, "+Inf"),
        (3.4025000633641588e38, "3.4025002e+38"),  # near float32's max: no overflow
        (-1e39, "-Inf"),
        (float("nan"), "NaN"),
        (-0.0, "-0"),
    ],
)
def test_go_float_formatting(value: float, text: str) -> None:
    assert go_float32_text(value) == text


def test_huge_ints_format_as_go_floats() -> None:
    assert scalar_text(2**63 - 1) == str(2**63 - 1)
    assert scalar_text(2**70) == "1.1805916e+21"


@pytest.fixture(params=["default", "pure-python"])
def yaml_loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with libyaml's loader (when built) and with PyYAML's pure-Python one."""
    if request.param == "pure-python":
        monkeypatch.setattr(
            spec_yaml, "_SpecYamlLoader", spec_yaml.make_spec_loader(yaml.SafeLoader)
        )
    return str(request.param)


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "path",
    sorted((REPO / "cdi_specs").glob("*/*.yaml")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_both_yaml_loaders_agree(path: Path) -> None:
    """Same document or same error whether libyaml or pure Python parses it."""
    data = path.read_bytes()
    try:
        got: object = parse.decode_document(data, str(path), "yaml")
    except SpecError as exc:
        got = ("error", exc.reason.split(":")[0])
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(spec_yaml, "_SpecYamlLoader", spec_yaml.make_spec_loader(yaml.SafeLoader))
    try:
        try:
            pure: object = parse.decode_document(data, str(path), "yaml")
        except SpecError as exc:
            pure = ("error", exc.reason.split(":")[0])
    finally:
        monkeypatch.undo()
    assert got == pure


def test_pure_python_loader_keeps_the_rules(yaml_loader: str) -> None:
    assert "duplicate key 'a'" in str(spec_error("a: 1\na: 2\n"))
    assert decode_document("k: [1:0, 2024-01-02]\n", "f", "yaml") == {"k": ["1:0", "2024-01-02"]}


def test_yaml_forbidden_character_is_one_line_naming_where(yaml_loader: str) -> None:
    message = str(spec_error("a: b\nc: d\x1b\n"))
    assert message.startswith("spec.yaml: invalid YAML: line 2 column 5: character #x001b: ")
    assert "\n" not in message


def test_a_spec_path_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "dir.json")
    assert str(info.value) == f"{tmp_path / 'dir.json'}: not a regular file"


@pytest.mark.parametrize(
    "text", ["- " * 30_000 + "x", "[" * 100_000 + "]" * 100_000], ids=["block", "flow"]
)
def test_deeply_nested_yaml_is_a_spec_error_not_a_crash(text: str) -> None:
    """libyaml's composer would overflow the C stack here and kill the process
    (the daemon's, for a spec in /etc/cdi); a child process keeps a regression
    a test failure rather than a crashed test run."""
    code = (
        "import sys\n"
        "from ateom.cdi.spec_file import parse_spec_text\n"
        "from ateom.errors import SpecError\n"
        "try:\n"
        "    parse_spec_text(sys.stdin.read(), 'deep.yaml', 'yaml')\n"
        "except SpecError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (0, "deep.yaml: document is nested too deeply\n"), (
        done.stderr[-2000:]
    )


def test_a_decodable_but_deep_value_is_a_spec_error() -> None:
    # Decodes fine; jsonschema's wording of the type error would recurse in repr().
    assert str(spec_error("[" * 2000 + "]" * 2000)) == "spec.yaml: document is nested too deeply"
