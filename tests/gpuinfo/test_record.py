"""The compatibility record: build, JSON, strict parse, every corruption class."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ateom import __version__
from ateom.cdi.model import ContainerEdits, DeviceNode, EditStep, Mount, Resolution
from ateom.errors import AteomError
from ateom.gpuinfo.gather import gather_worker_gpus
from ateom.gpuinfo.inventory import GpuFacts
from ateom.gpuinfo.record import (
    FORMAT_VERSION,
    RECORD_FILE,
    CompatRecord,
    ContainerDevices,
    RecordError,
    RunscBuild,
    build_record,
    edits_digest,
    parse_record,
    parse_runsc_version,
    read_record,
    record_json,
    write_record,
)
from tests.support.gpu_node import recorded_fixture, write_gpu_node

DIGEST = "sha256:" + "ab" * 32
RUNSC = RunscBuild("release-20260706.0")


def _h200(tmp_path: Path, **kw: Any) -> list[GpuFacts]:
    node = write_gpu_node(tmp_path / "node", recorded_fixture("h200-8gpu"), **kw)
    return list(gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                                   nvidia_smi=node.nvidia_smi).gpus)


def _record(tmp_path: Path) -> CompatRecord:
    return build_record(runsc=RUNSC, driver_version="580.95.05", gpus=_h200(tmp_path),
                        containers=[ContainerDevices("trainer", ("nvidia.com/gpu=all",),
                                                     DIGEST)],
                        nvproxy_capabilities="compute,utility")


def _doc(tmp_path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(record_json(_record(tmp_path)))
    return doc


def _parse(doc: Any) -> Any:
    return parse_record(json.dumps(doc).encode(), path="/ckpt/ateom-compat.json")


def test_round_trip_of_a_gathered_8_gpu_record(tmp_path: Path) -> None:
    record = _record(tmp_path)
    data = record_json(record)
    parsed = parse_record(data)
    assert parsed.record == record and parsed.ignored == ()
    assert record_json(parsed.record) == data  # deterministic
    doc = json.loads(data)
    assert doc["format_version"] == FORMAT_VERSION and doc["ateom_version"] == __version__
    assert doc["gpus"][3] == {"index": 3, "minor": 3, "uuid": "GPU-a0000000-0000-4000-8000-"
                              "000000000003", "name": "NVIDIA H200", "pci_bus_id": "0000:73:00.0",
                              "pci_vendor_id": "0x10de", "pci_device_id": "0x2335",
                              "memory_mib": 143771}


_uuid = st.integers(0, 2**48 - 1).map(lambda n: f"GPU-00000000-0000-4000-8000-{n:012x}")
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@st.composite
def _records(draw: st.DrawFn) -> CompatRecord:
    n = draw(st.integers(0, 8))
    uuids = draw(st.lists(_uuid, min_size=n, max_size=n, unique=True))
    minors = draw(st.lists(st.integers(0, 255), min_size=n, max_size=n, unique=True))
    gpus = [GpuFacts(i, minors[i], uuids[i], draw(_text), f"0000:{i:02x}:00.0",
                     draw(st.integers(0, 0xFFFF)), draw(st.integers(0, 0xFFFF)),
                     draw(st.integers(0, 2**40))) for i in range(n)]
    names = draw(st.lists(_text.filter(bool), max_size=4, unique=True))
    containers = [ContainerDevices(name, tuple(draw(st.lists(_text, max_size=3))),
                                   "sha256:" + draw(st.text("0123456789abcdef", min_size=64,
                                                            max_size=64)))
                  for name in names]
    return build_record(runsc=RunscBuild(draw(st.from_regex(r"[a-z0-9.\-]{1,20}", fullmatch=True)),
                                         draw(st.from_regex(r"[0-9a-f]{0,12}", fullmatch=True))),
                        driver_version=draw(st.from_regex(r"[1-9][0-9]{2}\.[0-9]{1,3}(\.[0-9]{2})?",
                                                          fullmatch=True)),
                        gpus=gpus, containers=containers, nvproxy_capabilities=draw(_text))


@settings(max_examples=200, deadline=None)
@given(_records())
def test_any_record_round_trips_byte_for_byte(record: CompatRecord) -> None:
    data = record_json(record)
    assert parse_record(data).record == record
    assert record_json(parse_record(data).record) == data


@settings(max_examples=100, deadline=None)
@given(_records(), st.data())
def test_every_truncation_is_a_record_error(record: CompatRecord, data: st.DataObject) -> None:
    full = record_json(record)
    cut = data.draw(st.integers(0, len(full.rstrip()) - 1))
    with pytest.raises(RecordError) as err:
        parse_record(full[:cut], path="/c/r.json")
    assert str(err.value).startswith("/c/r.json: ")


@pytest.mark.parametrize("data, reason", [
    (b"\xff\xfe{}", "not UTF-8 (corrupt)"),
    (b"", "not valid JSON (truncated or corrupt): Expecting value at line 1 column 1"),
    (b'{"format_version": "1.0",', "not valid JSON (truncated or corrupt)"),
    (b"[]", "must be a JSON object, not an array"),
    (b"{}", "format_version: missing"),
])
def test_corrupt_files(data: bytes, reason: str) -> None:
    with pytest.raises(RecordError, match=reason.replace("(", r"\(").replace(")", r"\)")) as e:
        parse_record(data, path="/c/r.json")
    assert e.value.code.name == "FAILED_PRECONDITION"


def test_too_large() -> None:
    with pytest.raises(RecordError, match="larger than any record"):
        parse_record(b" " * (2 << 20))


def _paths(doc: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    """(dotted field, key path) of every leaf the parser requires."""
    out: list[tuple[str, list[Any]]] = []
    for key, value in doc.items():
        if key == "runsc":
            out += [(f"runsc.{k}", ["runsc", k]) for k in value]
        elif key in ("gpus", "containers"):
            out += [(f"{key}[0].{k}", [key, 0, k]) for k in value[0]]
        else:
            out.append((key, [key]))
    return out


def _at(doc: Any, path: list[Any]) -> tuple[Any, Any]:
    for k in path[:-1]:
        doc = doc[k]
    return doc, path[-1]


def test_every_missing_field_is_named(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    for field, path in _paths(doc):
        broken = json.loads(json.dumps(doc))
        parent, key = _at(broken, path)
        del parent[key]
        with pytest.raises(RecordError) as err:
            _parse(broken)
        assert (err.value.field, err.value.reason) == (field, "missing"), field


def test_every_wrong_type_is_named_with_the_value(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    for field, path in _paths(doc):
        if field == "format_version":
            continue  # its own gate, below
        broken = json.loads(json.dumps(doc))
        parent, key = _at(broken, path)
        wrong = {"a": 1} if isinstance(parent[key], (str, int, list)) else "x"
        parent[key] = wrong
        with pytest.raises(RecordError) as err:
            _parse(broken)
        assert err.value.field == field, field
        assert "not an object" in err.value.reason and "'{\"a\": 1}'" in err.value.reason


@pytest.mark.parametrize("field, path, value, reason", [
    ("gpus[0].index", ["gpus", 0, "index"], True, "must be int, not a boolean 'true'"),
    ("gpus[0].minor", ["gpus", 0, "minor"], -1, "must be >= 0, not '-1'"),
    ("gpus[0].memory_mib", ["gpus", 0, "memory_mib"], 1.5, "must be int, not a number '1.5'"),
    ("gpus[0].pci_device_id", ["gpus", 0, "pci_device_id"], "0x2335a", "must be 0x and 4"),
    ("gpus[0].pci_vendor_id", ["gpus", 0, "pci_vendor_id"], "0x10DE", "must be 0x and 4"),
    ("gpus[0].uuid", ["gpus", 0, "uuid"], "GPU-1", "must be GPU-<8-4-4-4-12 hex>"),
    ("driver_version", ["driver_version"], "latest", "must be N.N[.N]"),
    ("runsc.version", ["runsc", "version"], "", "must be one non-empty word"),
    ("containers[0].edits_digest", ["containers", 0, "edits_digest"], "md5:00",
     "must be sha256:<64 hex>"),
    ("containers[0].name", ["containers", 0, "name"], "", "must not be empty"),
    ("containers[0].cdi_devices[0]", ["containers", 0, "cdi_devices", 0], 7,
     "must be str, not a number '7'"),
    ("gpus", ["gpus"], None, "must be list, not null"),
])
def test_wrong_values(tmp_path: Path, field: str, path: list[Any], value: Any,
                      reason: str) -> None:
    doc = _doc(tmp_path)
    parent, key = _at(doc, path)
    parent[key] = value
    with pytest.raises(RecordError) as err:
        _parse(doc)
    assert err.value.field == field and reason in err.value.reason, str(err.value)
    assert str(err.value).startswith(f"/ckpt/ateom-compat.json: {field}: ")


def test_duplicate_gpus_and_containers(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    doc["gpus"][1]["uuid"] = doc["gpus"][0]["uuid"]
    with pytest.raises(RecordError, match=r"gpus\[1\]: GPU uuid .* appears twice"):
        _parse(doc)
    doc = _doc(tmp_path)
    doc["containers"].append(dict(doc["containers"][0]))
    with pytest.raises(RecordError, match=r"containers\[1\]: container name 'trainer'"):
        _parse(doc)


def test_a_huge_value_is_quoted_short(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    doc["driver_version"] = "9" * 100_000
    with pytest.raises(RecordError) as err:
        _parse(doc)
    assert len(str(err.value)) < 350


def test_a_newer_major_is_refused_naming_both_versions(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    doc.update(format_version="2.0", ateom_version="9.1.0", gpus="a new shape")
    with pytest.raises(RecordError) as err:
        _parse(doc)
    assert err.value.field == "format_version"
    assert ("record format '2.0' written by ateom 9.1.0; this ateom " + __version__ +
            " reads format 1.x only: restore it with that ateom or a newer one") in str(err.value)


def test_an_older_major_is_refused(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    doc["format_version"] = "0.9"
    with pytest.raises(RecordError, match="no reader for that format is left"):
        _parse(doc)


def test_a_newer_minor_is_read_and_its_new_fields_reported(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    doc.update(format_version="1.7", cuda_checkpoint={"sequential": True})
    doc["gpus"][0]["nvlink"] = 18
    parsed = _parse(doc)
    assert parsed.ignored == ("cuda_checkpoint", "gpus[0].nvlink")
    assert parsed.record.format_version == "1.7" and len(parsed.record.gpus) == 8


def test_the_snapshot_uri_is_recorded_and_a_1_0_record_without_it_still_reads(
        tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    doc["snapshot_uri"] = "gs://bucket/root/atespaces/a/actors/u/snapshots/5678"
    assert _parse(doc).record.snapshot_uri == doc["snapshot_uri"]
    del doc["snapshot_uri"]  # 1.1 knows the field: its records must carry it
    with pytest.raises(RecordError, match="snapshot_uri: missing"):
        _parse(doc)
    doc["format_version"] = "1.0"  # written before it existed
    parsed = _parse(doc)
    assert parsed.record.snapshot_uri == "" and parsed.ignored == ()


def test_build_refuses_unknown_facts(tmp_path: Path) -> None:
    gpus = _h200(tmp_path, smi="fail")
    with pytest.raises(AteomError) as err:
        build_record(runsc=RUNSC, driver_version="", gpus=gpus[:2], containers=[])
    assert err.value.code.name == "FAILED_PRECONDITION"
    assert str(err.value) == (
        "cannot write a GPU checkpoint's compatibility record: driver version unknown; "
        "GPU 0 (0000:59:00.0): PCI ids, memory unknown; GPU 1 (0000:5a:00.0): PCI ids, "
        "memory unknown")
    with pytest.raises(AteomError, match="container names repeat"):
        c = ContainerDevices("a", (), DIGEST)
        build_record(runsc=RUNSC, driver_version="580.95.05", gpus=[], containers=[c, c])


@pytest.mark.parametrize("out, build", [
    ("runsc version release-20260706.0\nspec: 1.2.1\n", RunscBuild("release-20260706.0")),
    ("runsc version release-20240422.0-45-gabcdef123456\nspec: 1.1.0\n",
     RunscBuild("release-20240422.0-45-gabcdef123456", "abcdef123456")),
    ("runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n", RunscBuild("0.0~20221219.0")),
])
def test_parse_runsc_version(out: str, build: RunscBuild) -> None:
    assert parse_runsc_version(out) == build


def test_parse_runsc_version_garbage() -> None:
    with pytest.raises(AteomError, match="no 'runsc version <v>'"):
        parse_runsc_version("Usage: runsc <flags> <subcommand>")


def _resolution(spec_path: str, host: str = "/dev/nvidia0") -> Resolution:
    edits = ContainerEdits(env=("A=1",), device_nodes=(DeviceNode("/dev/nvidia0", host),),
                           mounts=(Mount("/usr/lib/libcuda.so.1", "/usr/lib/libcuda.so.1",
                                         options=("ro",)),))
    return Resolution(("nvidia.com/gpu=0",), (EditStep("nvidia.com/gpu=0", spec_path, edits),))


def test_edits_digest_is_of_the_edits_not_where_they_were_read() -> None:
    a = edits_digest(_resolution("/etc/cdi/nvidia.json"))
    assert a == edits_digest(_resolution("/run/ateom/cdi/nvidia.json"))
    assert a != edits_digest(_resolution("/etc/cdi/nvidia.json", host="/dev/nvidia1"))
    assert a.startswith("sha256:") and len(a) == 71
    assert edits_digest({"b": 1, "a": [1, 2]}) == edits_digest({"a": [1, 2], "b": 1})


def test_write_then_read_the_file(tmp_path: Path) -> None:
    record = _record(tmp_path)
    ckpt = tmp_path / "actors" / "a1" / "checkpoint"
    ckpt.mkdir(parents=True)
    path = write_record(str(ckpt), record, beneath=str(tmp_path / "actors"))
    assert path == str(ckpt / RECORD_FILE)
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert read_record(str(ckpt), beneath=str(tmp_path / "actors")).record == record


def test_read_missing_and_symlinked_records(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="missing: this checkpoint has no compatibility"):
        read_record(str(tmp_path), beneath=str(tmp_path))
    (tmp_path / "elsewhere.json").write_bytes(record_json(_record(tmp_path)))
    (tmp_path / RECORD_FILE).symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(RecordError, match="unreadable"):
        read_record(str(tmp_path), beneath=str(tmp_path))
