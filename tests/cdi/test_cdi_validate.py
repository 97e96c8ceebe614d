"""Validation: the JSON Schema pass and every semantic rule, incl. version gates."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ateom.cdi.schema import SCHEMA, schema_problems
from ateom.cdi.spec_file import InvalidSpecError, LoadedSpec, parse_spec_text, spec_problems
from ateom.cdi.validate import KNOWN_VERSIONS, MAX_ANNOTATIONS_BYTES, annotation_key_problem
from ateom.errors import SpecError

PATH = "/etc/cdi/test.json"


def base(version: str = "0.3.0") -> dict[str, Any]:
    """A minimal valid spec at `version`, using nothing newer than 0.3.0."""
    return {
        "cdiVersion": version,
        "kind": "vendor.com/device",
        "devices": [{"name": "dev0", "containerEdits": {"env": ["A=1"]}}],
    }


def load(doc: dict[str, Any]) -> LoadedSpec:
    return parse_spec_text(json.dumps(doc), PATH, "json")


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(doc)
    found = spec_problems(info.value)
    assert all(p.path == PATH for p in found)
    return [f"{p.field}: {p.reason}" for p in found]


def one_problem(doc: dict[str, Any]) -> str:
    found = problems(doc)
    assert len(found) == 1, found
    return found[0]


def edits(doc: dict[str, Any], where: str = "device") -> dict[str, Any]:
    if where == "spec":
        return doc.setdefault("containerEdits", {})
    return doc["devices"][0]["containerEdits"]


# -- schema pass ---------------------------------------------------------------


def test_schema_forbids_additional_properties_everywhere() -> None:
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "object" in (
                [node["type"]] if isinstance(node.get("type"), str) else node.get("type", [])
            ):
                if "properties" in node:
                    assert node.get("additionalProperties") is False, node
            for value in node.values():
                walk(value)

    walk(SCHEMA)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda d: d["devices"][0]["containerEdits"].update(
                deviceNodes=[{"path": "/a", "majr": 1}]
            ),
            "devices[0].containerEdits.deviceNodes[0].majr: unknown field",
        ),
        (lambda d: d.update(extra=1), "extra: unknown field"),
        (
            lambda d: d["devices"][0].update(containerEdits={"env": ["A=1"], "Env": []}),
            "devices[0].containerEdits.Env: unknown field",
        ),
        (lambda d: d.pop("devices"), "devices: required field is missing"),
        (lambda d: d["devices"][0].pop("name"), "devices[0].name: required field is missing"),
        (lambda d: d.update(devices={}), "devices: must be array, not object"),
        (lambda d: d.update(kind=None), "kind: must be string, not null"),
        (lambda d: d.update(kind=["a"]), "kind: must be string, not array"),
        (
            lambda d: edits(d).update(deviceNodes=[{"path": "/a", "major": "1"}]),
            "devices[0].containerEdits.deviceNodes[0].major: must be integer, not string",
        ),
        (
            lambda d: edits(d).update(deviceNodes=[{"path": "/a", "major": 1.5}]),
            "devices[0].containerEdits.deviceNodes[0].major: must be integer, not number",
        ),
        (
            lambda d: edits(d).update(deviceNodes=[{"path": "/a", "gid": -1}]),
            "devices[0].containerEdits.deviceNodes[0].gid: -1 is out of range for uint32",
        ),
        (
            lambda d: edits(d).update(deviceNodes=[{"path": "/a", "uid": 2**32}]),
            "devices[0].containerEdits.deviceNodes[0].uid: 4294967296 is out of range for uint32",
        ),
        (
            lambda d: edits(d).update(deviceNodes=[{"path": "/a", "major": 2**63}]),
            "out of range for int64",
        ),
        (
            lambda d: edits(d).update(env=[["A=1"]]),
            "devices[0].containerEdits.env[0]: must be string, not array",
        ),
        (
            lambda d: edits(d).update(hooks=[{"hookName": "prestart"}]),
            "devices[0].containerEdits.hooks[0].path: required field is missing",
        ),
        (
            lambda d: edits(d).update(mounts=[{"containerPath": "/a"}]),
            "devices[0].containerEdits.mounts[0].hostPath: required field is missing",
        ),
        (
            lambda d: edits(d).update(netDevices=[{"name": "n"}]),
            "devices[0].containerEdits.netDevices[0].hostInterfaceName: required field is missing",
        ),
        (
            lambda d: edits(d).update(intelRdt={"closID": "x", "enableCMT": True}),
            "devices[0].containerEdits.intelRdt.enableCMT: unknown field",
        ),
        (
            lambda d: edits(d).update(intelRdt={"enableMonitoring": "yes"}),
            "devices[0].containerEdits.intelRdt.enableMonitoring: must be boolean, not string",
        ),
        (
            lambda d: d.update(annotations={"a": {"b": 1}}),
            "annotations.a: must be string, not object",
        ),
        (
            lambda d: d.update(annotations={"vendor.com/a": 1.5, "vendor.com/b": [1]}),
            "annotations['vendor.com/b']: must be string, not array",
        ),
        # Keys that are not plain names are quoted: one line per problem.
        (lambda d: d.update({"x\ny": 1}), "['x\\ny']: unknown field"),
        (
            lambda d: edits(d).update(deviceNodes=[{"path": "/a", "my field": 1}]),
            "devices[0].containerEdits.deviceNodes[0]['my field']: unknown field",
        ),
    ],
)
def test_schema_problems_name_the_json_path(mutate: Any, expected: str) -> None:
    doc = base("1.1.0")
    mutate(doc)
    assert any(expected in p for p in problems(doc)), problems(doc)


def test_schema_reports_every_problem_in_document_order() -> None:
    doc = base()
    doc["devices"] = [
        {"name": f"d{i}", "containerEdits": {"deviceNodes": [{"path": "/a", "majr": 1}]}}
        for i in range(12)
    ]
    found = problems(doc)
    assert found == [
        f"devices[{i}].containerEdits.deviceNodes[0].majr: unknown field (did you mean major?)"
            for i in range(12)
    ]


def test_schema_problems_is_empty_for_valid_doc() -> None:
    assert schema_problems(base(), PATH) == []


# -- versions ------------------------------------------------------------------


@pytest.mark.parametrize("version", KNOWN_VERSIONS + tuple("v" + v for v in KNOWN_VERSIONS))
def test_known_versions_with_or_without_v(version: str) -> None:
    assert load(base(version)).spec.version == version


@pytest.mark.parametrize(
    "version", ["0.1.0", "0.2.0", "0.9.0", "1.2.0", "2.0.0", "1.0", "", "vv1.0.0", "latest"]
)
def test_unknown_or_older_versions_are_errors(version: str) -> None:
    assert one_problem(base(version)).startswith(f"cdiVersion: unknown CDI version {version!r}")


def _mount_type(d: dict[str, Any]) -> None:
    edits(d).update(mounts=[{"hostPath": "/a", "containerPath": "/a", "type": "bind"}])


def _host_path(d: dict[str, Any]) -> None:
    edits(d, "spec").update(deviceNodes=[{"path": "/dev/a", "hostPath": "/dev/b"}])


def _digit_name(d: dict[str, Any]) -> None:
    d["devices"][0]["name"] = "0"


def _spec_annotations(d: dict[str, Any]) -> None:
    d["annotations"] = {"vendor.com/key": "v"}


def _device_annotations(d: dict[str, Any]) -> None:
    d["devices"][0]["annotations"] = {"key": "v"}


def _dot_in_class(d: dict[str, Any]) -> None:
    d["kind"] = "vendor.com/gpu.mig"


def _intel_rdt(d: dict[str, Any]) -> None:
    edits(d).update(intelRdt={"closID": "c"})


def _additional_gids(d: dict[str, Any]) -> None:
    edits(d, "spec").update(additionalGids=[44])


def _net_devices(d: dict[str, Any]) -> None:
    edits(d).update(netDevices=[{"hostInterfaceName": "eth1", "name": "net1"}])


def _rdt_schemata(d: dict[str, Any]) -> None:
    edits(d, "spec").update(intelRdt={"schemata": ["L3:0=f"]})


def _rdt_monitoring(d: dict[str, Any]) -> None:
    edits(d).update(intelRdt={"enableMonitoring": True})


VERSION_GATES = [
    # (feature, minimum version, the version just below it, field named)
    (_mount_type, "0.4.0", "0.3.0", "devices[0].containerEdits.mounts[0].type"),
    (_host_path, "0.5.0", "0.4.0", "containerEdits.deviceNodes[0].hostPath"),
    (_digit_name, "0.5.0", "0.4.0", "devices[0].name"),
    (_spec_annotations, "0.6.0", "0.5.0", "annotations"),
    (_device_annotations, "0.6.0", "0.5.0", "devices[0].annotations"),
    (_dot_in_class, "0.6.0", "0.5.0", "kind"),
    (_intel_rdt, "0.7.0", "0.6.0", "devices[0].containerEdits.intelRdt"),
    (_additional_gids, "0.7.0", "0.6.0", "containerEdits.additionalGids"),
    (_net_devices, "1.1.0", "1.0.0", "devices[0].containerEdits.netDevices"),
    (_rdt_schemata, "1.1.0", "1.0.0", "containerEdits.intelRdt.schemata"),
    (_rdt_monitoring, "1.1.0", "1.0.0", "devices[0].containerEdits.intelRdt.enableMonitoring"),
]


@pytest.mark.parametrize("feature, minimum, below, field", VERSION_GATES)
def test_version_gate_below_minimum_is_an_error(
    feature: Any, minimum: str, below: str, field: str
) -> None:
    doc = base(below)
    feature(doc)
    problem = one_problem(doc)
    assert problem.startswith(f"{field}: ")
    assert f"needs cdiVersion {minimum} or later; the spec declares {below}" in problem


@pytest.mark.parametrize("feature, minimum, below, field", VERSION_GATES)
def test_version_gate_at_minimum_is_fine(
    feature: Any, minimum: str, below: str, field: str
) -> None:
    for version in (minimum, "v" + minimum, "1.1.0"):
        doc = base(version)
        feature(doc)
        load(doc)


def test_version_gate_uses_declared_v_prefixed_version() -> None:
    doc = base("v0.4.0")
    _host_path(doc)
    assert "the spec declares v0.4.0" in one_problem(doc)


# -- names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("vendor.com", "kind: kind 'vendor.com' must be vendor/class"),
        ("/gpu", "kind: vendor is empty"),
        ("vendor.com/", "kind: class is empty"),
        ("_v/gpu", "kind: vendor '_v' must start with a letter"),
        ("v_/gpu", "kind: vendor 'v_' must end with a letter or digit"),
        ("v/g*u", "kind: class 'g*u' contains '*'"),
        ("v/g/u", "kind: class 'g/u' contains '/'"),
        ("v/9gpu", "kind: class '9gpu' must start with a letter"),
    ],
)
def test_kind_rules(kind: str, expected: str) -> None:
    doc = base("1.1.0")
    doc["kind"] = kind
    assert one_problem(doc).startswith(expected)


@pytest.mark.parametrize("kind", ["a/b", "vendor.com/gpu", "v-1_x.y/c-1_2.3", "A9/Z0"])
def test_valid_kinds(kind: str) -> None:
    doc = base("1.1.0")
    doc["kind"] = kind
    assert load(doc).spec.kind == kind


@pytest.mark.parametrize("name", ["0", "0:0", "a", "GPU-3a05-8a75", "MIG-1:2.3_x", "all", "Z"])
def test_valid_device_names(name: str) -> None:
    doc = base("1.1.0")
    doc["devices"][0]["name"] = name
    assert load(doc).spec.devices[0].name == name


@pytest.mark.parametrize(
    "name, expected",
    [
        ("", "device name is empty"),
        ("-a", "device name '-a' must start with a letter or digit"),
        ("a-", "device name 'a-' must end with a letter or digit"),
        ("a b", "device name 'a b' contains ' '"),
        ("a/b", "device name 'a/b' contains '/'"),
        (":0", "device name ':0' must start"),
    ],
)
def test_device_name_rules(name: str, expected: str) -> None:
    doc = base("1.1.0")
    doc["devices"][0]["name"] = name
    assert one_problem(doc).startswith(f"devices[0].name: {expected}")


def test_duplicate_device_names() -> None:
    doc = base()
    doc["devices"].append(copy.deepcopy(doc["devices"][0]))
    doc["devices"].append(copy.deepcopy(doc["devices"][0]))
    assert problems(doc) == [
        "devices[1].name: duplicate device name 'dev0' (first defined at devices[0])",
        "devices[2].name: duplicate device name 'dev0' (first defined at devices[0])",
    ]


def test_no_devices() -> None:
    doc = base()
    doc["devices"] = []
    assert one_problem(doc) == "devices: spec has no devices"


@pytest.mark.parametrize("device_edits", [None, {}, {"env": []}, {"deviceNodes": None}])
def test_device_without_edits(device_edits: Any) -> None:
    doc = base()
    if device_edits is None:
        del doc["devices"][0]["containerEdits"]
    else:
        doc["devices"][0]["containerEdits"] = device_edits
    assert one_problem(doc) == 'devices[0].containerEdits: device "dev0" has no edits'


def test_spec_level_edits_may_be_empty() -> None:
    doc = base()
    doc["containerEdits"] = {}
    assert load(doc).spec.container_edits.is_empty()


# -- container edits -------------------------------------------------------------


@pytest.mark.parametrize("entry", ["A=", "A=b=c", "A=1", "_X=", "a.b=c d"])
def test_valid_env(entry: str) -> None:
    doc = base()
    edits(doc)["env"] = [entry]
    load(doc)


@pytest.mark.parametrize("entry", ["A", "=b", "=", ""])
def test_invalid_env(entry: str) -> None:
    doc = base()
    edits(doc)["env"] = [entry]
    assert one_problem(doc).startswith("devices[0].containerEdits.env[0]: env entry")


@pytest.mark.parametrize("node_type", ["b", "c", "u", "p", ""])
def test_valid_node_types(node_type: str) -> None:
    doc = base()
    edits(doc)["deviceNodes"] = [{"path": "/dev/a", "type": node_type}]
    load(doc)


@pytest.mark.parametrize("node_type", ["x", "C", "cc", "char"])
def test_invalid_node_types(node_type: str) -> None:
    doc = base()
    edits(doc)["deviceNodes"] = [{"path": "/dev/a", "type": node_type}]
    assert one_problem(doc).startswith("devices[0].containerEdits.deviceNodes[0].type:")


@pytest.mark.parametrize("perms", ["", "r", "w", "m", "rw", "rwm", "mwr"])
def test_valid_permissions(perms: str) -> None:
    doc = base()
    edits(doc)["deviceNodes"] = [{"path": "/dev/a", "permissions": perms}]
    load(doc)


@pytest.mark.parametrize("perms", ["x", "rwx", "R", "rw "])
def test_invalid_permissions(perms: str) -> None:
    doc = base()
    edits(doc)["deviceNodes"] = [{"path": "/dev/a", "permissions": perms}]
    assert one_problem(doc).startswith("devices[0].containerEdits.deviceNodes[0].permissions:")


def test_empty_paths() -> None:
    doc = base()
    edits(doc).update(
        deviceNodes=[{"path": ""}],
        mounts=[{"hostPath": "", "containerPath": ""}],
        hooks=[{"hookName": "prestart", "path": ""}],
    )
    assert problems(doc) == [
        "devices[0].containerEdits.deviceNodes[0].path: device node path is empty",
        "devices[0].containerEdits.mounts[0].hostPath: mount hostPath is empty",
        "devices[0].containerEdits.mounts[0].containerPath: mount containerPath is empty",
        "devices[0].containerEdits.hooks[0].path: hook path is empty",
    ]


@pytest.mark.parametrize(
    "name",
    ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
)
def test_the_six_hook_names(name: str) -> None:
    doc = base()
    edits(doc)["hooks"] = [{"hookName": name, "path": "/bin/true", "timeout": 5}]
    assert load(doc).spec.devices[0].container_edits.hooks[0].hook_name == name


@pytest.mark.parametrize("name", ["preStart", "prestop", "", "CreateContainer"])
def test_other_hook_names(name: str) -> None:
    doc = base()
    edits(doc)["hooks"] = [{"hookName": name, "path": "/bin/true"}]
    assert one_problem(doc).startswith("devices[0].containerEdits.hooks[0].hookName:")


def test_hook_env_and_timeout() -> None:
    doc = base()
    edits(doc)["hooks"] = [
        {"hookName": "prestart", "path": "/bin/true", "env": ["OK=1", "BAD"], "timeout": -1}
    ]
    assert problems(doc) == [
        "devices[0].containerEdits.hooks[0].env[1]: env entry 'BAD' must be KEY=VALUE "
        "with a non-empty KEY",
        "devices[0].containerEdits.hooks[0].timeout: hook timeout -1 must be greater than zero",
    ]


@pytest.mark.parametrize("clos", ["a/b", ".", "..", "a\nb", "x" * 4096])
def test_invalid_clos_id(clos: str) -> None:
    doc = base("0.7.0")
    edits(doc)["intelRdt"] = {"closID": clos}
    assert one_problem(doc).startswith("devices[0].containerEdits.intelRdt.closID:")


@pytest.mark.parametrize("clos", ["", "a", "...", "x" * 4095, "guaranteed_1"])
def test_valid_clos_id(clos: str) -> None:
    doc = base("0.7.0")
    edits(doc)["intelRdt"] = {"closID": clos, "l3CacheSchema": "L3:0=f", "memBwSchema": "MB:0=5"}
    load(doc)


def test_net_devices() -> None:
    doc = base("1.1.0")
    edits(doc)["netDevices"] = [
        {"hostInterfaceName": "eth0", "name": "net0"},
        {"hostInterfaceName": "eth0", "name": "net1"},
        {"hostInterfaceName": "eth1", "name": "net0"},
        {"hostInterfaceName": "", "name": ""},
    ]
    assert problems(doc) == [
        "devices[0].containerEdits.netDevices[1].hostInterfaceName: duplicate "
        "hostInterfaceName 'eth0' (also netDevices[0])",
        "devices[0].containerEdits.netDevices[2].name: duplicate net device name 'net0' "
        "(also netDevices[0])",
        "devices[0].containerEdits.netDevices[3].hostInterfaceName: net device "
        "hostInterfaceName is empty",
        "devices[0].containerEdits.netDevices[3].name: net device name is empty",
    ]


def test_uint32_bounds_are_inclusive() -> None:
    doc = base("0.7.0")
    edits(doc).update(
        deviceNodes=[{"path": "/dev/a", "uid": 0, "gid": 4294967295, "fileMode": 0o666}],
        additionalGids=[0, 4294967295],
    )
    node = load(doc).spec.devices[0].container_edits.device_nodes[0]
    assert (node.uid, node.gid, node.file_mode) == (0, 4294967295, 0o666)


# -- annotations -------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "A-b_c.d",
        "example.com/key",
        "cdi.k8s.io/vfio17",
        "x" * 63,
        "a.b-c/" + "k" * 63,
        "Example.COM/Key",  # case does not matter in annotation keys (Kubernetes lower-cases)
    ],
)
def test_valid_annotation_keys(key: str) -> None:
    assert annotation_key_problem(key) is None
    doc = base("0.6.0")
    doc["annotations"] = {key: "value"}
    load(doc)


@pytest.mark.parametrize(
    "key, why",
    [
        ("", "name part is empty"),
        ("a/", "name part is empty"),
        ("/a", "prefix before '/' is empty"),
        ("a/b/c", "more than one '/'"),
        ("ex ample.com/a", "not a DNS subdomain"),
        ("ex_ample.com/a", "not a DNS subdomain"),
        ("-a", "must be letters"),
        ("a b", "must be letters"),
        ("x" * 64, "at most 63"),
        ("p" * 254 + "/a", "at most 253"),
    ],
)
def test_invalid_annotation_keys(key: str, why: str) -> None:
    problem = annotation_key_problem(key)
    assert problem is not None and why in problem
    doc = base("0.6.0")
    doc["devices"][0]["annotations"] = {key: "value"}
    found = one_problem(doc)
    assert found.startswith(f"devices[0].annotations[{key!r}]: annotation key")
    assert why in found


def test_annotations_total_size_limit() -> None:
    doc = base("0.6.0")
    doc["annotations"] = {"a": "x" * (MAX_ANNOTATIONS_BYTES - 1)}
    load(doc)  # exactly 256 KiB: key 1 byte + value
    doc["annotations"] = {"a": "x" * MAX_ANNOTATIONS_BYTES}
    assert one_problem(doc) == (
        f"annotations: annotations total {MAX_ANNOTATIONS_BYTES + 1} bytes; "
        f"at most {MAX_ANNOTATIONS_BYTES} (256 KiB) allowed"
    )


def test_annotation_size_counts_utf8_bytes() -> None:
    doc = base("0.6.0")
    doc["annotations"] = {"a": "é" * (MAX_ANNOTATIONS_BYTES // 2)}  # 2 bytes each
    assert "annotations total" in one_problem(doc)


# -- warnings and aggregate reports ---------------------------------------------------


def test_relative_paths_are_warnings_not_errors() -> None:
    doc = base("0.5.0")
    edits(doc).update(
        deviceNodes=[{"path": "dev/a"}],
        mounts=[{"hostPath": "lib/x", "containerPath": "lib/x"}],
        hooks=[{"hookName": "prestart", "path": "bin/hook"}],
    )
    loaded = load(doc)
    assert loaded.warnings == (
        f"{PATH}: warning: devices[0].containerEdits.deviceNodes[0].path: "
        "device node path 'dev/a' is not absolute",
        f"{PATH}: warning: devices[0].containerEdits.mounts[0].containerPath: "
        "mount containerPath 'lib/x' is not absolute",
        f"{PATH}: warning: devices[0].containerEdits.hooks[0].path: "
        "hook path 'bin/hook' is not absolute",
    )


def test_valid_spec_has_no_warnings() -> None:
    assert load(base()).warnings == ()


def test_every_semantic_problem_is_reported_at_once() -> None:
    doc = base("0.3.0")
    doc["kind"] = "vendor.com/gpu.x"
    doc["devices"].append({"name": "dev0"})
    edits(doc).update(env=["BAD"], deviceNodes=[{"path": "/a", "hostPath": "/b", "type": "q"}])
    with pytest.raises(InvalidSpecError) as info:
        load(doc)
    error = info.value
    assert len(error.problems) == 6
    assert (error.path, error.field) == (PATH, error.problems[0].field)
    assert str(error).count("\n") == 5
    assert all(line.startswith(PATH + ": ") for line in str(error).splitlines())
