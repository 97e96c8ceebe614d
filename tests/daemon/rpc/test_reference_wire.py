"""ateom's proto against the node agent's: the reference's exact wire, ours only added to.

Both protos are compiled with grpc_tools.protoc into descriptor sets and compared
structurally: every message, field (number, name, type, type name, label, proto3
`optional`, oneof), nested type (map entries), enum value and RPC signature the
reference has must be ateom's too; ateom may add fields, values, messages, methods
and services only at numbers and names the reference does not use.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2 as d
from google.protobuf import descriptor_pool, message_factory

from ateom._proto import ateom_pb2 as pb
from ateom.daemon.calls.requests import ActorRef, StatsSample

REPO = Path(__file__).resolve().parents[3]
OURS = REPO / "proto" / "ateom.proto"
# The node agent's proto, kept as test data (tests/fixtures/reference/PROVENANCE.md).
REFERENCE = REPO / "tests" / "fixtures" / "reference" / "ateom.proto"


def compile_proto(path: Path, out: Path) -> d.FileDescriptorProto:
    """Run protoc on `path`; its FileDescriptorProto (runs a subprocess)."""
    pytest.importorskip("grpc_tools")
    target = out / (path.stem + ".pb")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{path.parent}",
                    f"--descriptor_set_out={target}", str(path)], check=True)
    [file] = d.FileDescriptorSet.FromString(target.read_bytes()).file
    return file


def _field_shape(msg: d.DescriptorProto, f: d.FieldDescriptorProto) -> tuple[object, ...]:
    oneof = msg.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None
    return (f.name, f.number, d.FieldDescriptorProto.Type.Name(f.type), f.type_name,
            d.FieldDescriptorProto.Label.Name(f.label), f.proto3_optional, oneof)


def _compare_message(where: str, ref: d.DescriptorProto, ours: d.DescriptorProto,
                     diffs: list[str]) -> None:
    if ref.options.map_entry != ours.options.map_entry:
        diffs.append(f"{where}: map_entry {ref.options.map_entry} != {ours.options.map_entry}")
    # Each reference field present at its number with its name leaves ateom's
    # additions other numbers and names: protoc refuses duplicates of either.
    ours_by_number = {f.number: f for f in ours.field}
    for f in ref.field:
        mine = ours_by_number.get(f.number)
        if mine is None:
            diffs.append(f"{where}.{f.name} = {f.number}: missing")
        elif _field_shape(ref, f) != _field_shape(ours, mine):
            diffs.append(f"{where} field {f.number}: reference {_field_shape(ref, f)},"
                         f" ateom {_field_shape(ours, mine)}")
    _compare_all(where + ".", ref.nested_type, ours.nested_type, ref.enum_type,
                 ours.enum_type, diffs)


def _compare_enum(where: str, ref: d.EnumDescriptorProto, ours: d.EnumDescriptorProto,
                  diffs: list[str]) -> None:
    mine = {v.name: v.number for v in ours.value}
    theirs = {v.name: v.number for v in ref.value}
    for name, number in theirs.items():
        if mine.get(name) != number:
            diffs.append(f"{where}.{name}: reference {number}, ateom {mine.get(name)}")
    for name, number in mine.items():  # an alias (allow_alias) would decode as another value
        if name not in theirs and number in theirs.values():
            diffs.append(f"{where}.{name} = {number}: ateom's addition reuses a reference number")


def _compare_all(prefix: str, ref_msgs: object, our_msgs: object, ref_enums: object,
                 our_enums: object, diffs: list[str]) -> None:
    ours = {m.name: m for m in our_msgs}  # type: ignore[attr-defined]
    for m in ref_msgs:  # type: ignore[attr-defined]
        if m.name not in ours:
            diffs.append(f"message {prefix}{m.name}: missing")
        else:
            _compare_message(prefix + m.name, m, ours[m.name], diffs)
    our_enum = {e.name: e for e in our_enums}  # type: ignore[attr-defined]
    for e in ref_enums:  # type: ignore[attr-defined]
        if e.name not in our_enum:
            diffs.append(f"enum {prefix}{e.name}: missing")
        else:
            _compare_enum(prefix + e.name, e, our_enum[e.name], diffs)


def _method_shape(m: d.MethodDescriptorProto) -> tuple[object, ...]:
    return (m.input_type, m.output_type, m.client_streaming, m.server_streaming)


def wire_differences(ref: d.FileDescriptorProto, ours: d.FileDescriptorProto) -> list[str]:
    """Every way `ours` fails to speak `ref`'s wire (pure); [] when it does."""
    diffs: list[str] = []
    if ref.package != ours.package:
        diffs.append(f"package: reference {ref.package!r}, ateom {ours.package!r}")
    if ref.syntax != ours.syntax:
        diffs.append(f"syntax: reference {ref.syntax!r}, ateom {ours.syntax!r}")
    _compare_all("", ref.message_type, ours.message_type, ref.enum_type, ours.enum_type,
                 diffs)
    our_services = {s.name: s for s in ours.service}
    for service in ref.service:
        mine = our_services.get(service.name)
        if mine is None:
            diffs.append(f"service {service.name}: missing")
            continue
        methods = {m.name: m for m in mine.method}
        for m in service.method:
            if m.name not in methods:
                diffs.append(f"rpc {service.name}.{m.name}: missing")
            elif _method_shape(m) != _method_shape(methods[m.name]):
                diffs.append(f"rpc {service.name}.{m.name}: reference {_method_shape(m)},"
                             f" ateom {_method_shape(methods[m.name])}")
    return diffs


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> d.FileDescriptorProto:
    assert REFERENCE.is_file(), f"{REFERENCE}: the reference proto is test data in the repo"
    return compile_proto(REFERENCE, tmp_path_factory.mktemp("reference"))


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> d.FileDescriptorProto:
    return compile_proto(OURS, tmp_path_factory.mktemp("ours"))


def test_ateom_speaks_the_reference_wire_exactly(reference: d.FileDescriptorProto,
                                                 ours: d.FileDescriptorProto) -> None:
    assert wire_differences(reference, ours) == []


def test_ateom_additions_are_only_the_documented_ones(reference: d.FileDescriptorProto,
                                                      ours: d.FileDescriptorProto) -> None:
    added = {m.name for m in ours.message_type} - {m.name for m in reference.message_type}
    [container] = [m for m in ours.message_type if m.name == "Container"]
    [ref_container] = [m for m in reference.message_type if m.name == "Container"]
    extra = {(f.name, f.number) for f in container.field} - {
        (f.name, f.number) for f in ref_container.field}
    assert extra == {("devices", 20)}
    # Everything else ateom adds is messages of its own (the device request, the
    # Inspect service's) and that second service.
    assert {"DeviceRequest", "GetStatusRequest", "DoctorResponse"} <= added
    assert {s.name for s in ours.service} == {"Ateom", "Inspect"}
    [ateom] = [s for s in ours.service if s.name == "Ateom"]
    [ref_ateom] = [s for s in reference.service if s.name == "Ateom"]
    assert {m.name for m in ateom.method} == {m.name for m in ref_ateom.method}


def _mutated(reference_text: str, old: str, new: str) -> str:
    assert old in reference_text, old
    return reference_text.replace(old, new)


@pytest.mark.parametrize(("old", "new", "expected"), [
    # What ateom's proto said before: a bare sample, int64 measurements.
    ("returns (GetWorkloadStatsResponse)", "returns (WorkloadStatsSample)",
     "rpc Ateom.GetWorkloadStats"),
    ("uint64 memory_peak_bytes = 9", "int64 memory_peak_bytes = 9",
     "WorkloadStatsSample field 9"),
    ("optional EgressGateway egress_gateway = 10", "EgressGateway egress_gateway = 10",
     "RunWorkloadRequest field 10"),
    ("map<string, string> runtime_asset_paths = 8", "string runtime_asset_paths = 8",
     "RunWorkloadRequest"),  # the field, and its map entry type gone
    ("SNAPSHOT_SCOPE_DATA = 2", "SNAPSHOT_SCOPE_DATA = 3", "SnapshotScope.SNAPSHOT_SCOPE_DATA"),
    ("  int32 timeout_seconds = 2;", "", "WakeupProbe.timeout_seconds = 2: missing"),
    ("  SNAPSHOT_SCOPE_DATA = 2;", "  option allow_alias = true;\n  SNAPSHOT_SCOPE_DATA = 2;\n"
     "  SNAPSHOT_SCOPE_MINE = 2;", "SNAPSHOT_SCOPE_MINE = 2: ateom's addition reuses"),
    ("HTTPGetAction", "HttpGetAction", "HTTPGetAction"),  # the message, WakeupProbe's field
    ("bool preserve_restore_dir = 17", "bool preserve_restore_dir = 18",
     "RestoreWorkloadRequest.preserve_restore_dir = 17: missing"),
])
def test_the_comparison_catches_each_kind_of_drift(
        reference: d.FileDescriptorProto, tmp_path: Path, old: str, new: str,
        expected: str) -> None:
    drifted = tmp_path / "ateom.proto"
    drifted.write_text(_mutated(REFERENCE.read_text(), old, new))
    diffs = wire_differences(reference, compile_proto(drifted, tmp_path))
    assert diffs and all(expected in line for line in diffs), diffs



class _Stats:
    """The service, as far as the stats RPCs ask it: one sample out of uint64 range."""

    def __init__(self) -> None:
        self.sample = StatsSample(
            ActorRef("a1", atespace="ns", actor_name="n"), memory_current_bytes=5,
            memory_peak_bytes=2**70, memory_working_set_bytes=-3, cpu_usage_usec=7,
            observed_at_unix_nano=11, epoch_unix_nano=12)

    def workload_stats(self, uid: str) -> StatsSample:
        assert uid == "a1"
        return self.sample

    def active_workload_stats(self) -> list[StatsSample]:
        return [self.sample]


def test_a_reference_client_reads_the_stats_answers(reference: d.FileDescriptorProto,
                                                    tmp_path: Path) -> None:
    from ateom.daemon.rpc.handler import add_servicer
    from ateom.daemon.rpc.server import AteomServicer

    pool = descriptor_pool.DescriptorPool()
    pool.Add(reference)

    def theirs(name: str) -> Any:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("ateom." + name))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add_servicer(server, AteomServicer(_Stats()),  # type: ignore[arg-type]
                 pb.DESCRIPTOR.services_by_name["Ateom"])
    server.add_insecure_port(f"unix:{tmp_path}/s")
    server.start()
    try:
        with grpc.insecure_channel(f"unix:{tmp_path}/s") as channel:
            def call(method: str, request: Any, response: str) -> Any:
                return channel.unary_unary(
                    f"/ateom.Ateom/{method}", request_serializer=type(request).SerializeToString,
                    response_deserializer=theirs(response).FromString)(request, timeout=10)

            one = call("GetWorkloadStats", theirs("GetWorkloadStatsRequest")(actor_uid="a1"),
                       "GetWorkloadStatsResponse")
            active = call("GetActiveWorkloadStats", theirs("GetActiveWorkloadStatsRequest")(),
                          "GetActiveWorkloadStatsResponse")
    finally:
        server.stop(0)
    for sample in (one.sample, *active.samples):
        assert (sample.actor_uid, sample.atespace, sample.actor_name) == ("a1", "ns", "n")
        assert sample.sandbox_class == pool.FindEnumTypeByName(
            "ateom.SandboxClass").values_by_name["SANDBOX_CLASS_GVISOR"].number
        # uint64 on the wire: clamped into range rather than refused by protobuf.
        assert (sample.memory_current_bytes, sample.memory_peak_bytes,
                sample.memory_working_set_bytes, sample.cpu_usage_usec) == (5, 2**64 - 1, 0, 7)
        assert (sample.observed_at_unix_nano, sample.epoch_unix_nano) == (11, 12)
