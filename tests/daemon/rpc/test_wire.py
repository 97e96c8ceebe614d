"""The wire translation: protobuf <-> plain requests, and the contract with the
reference proto."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom._proto import ateom_pb2 as pb
from ateom.daemon.calls.requests import ActorRef, DevicePolicy, SnapshotScope, StatsSample
from ateom.daemon.rpc import wire
from ateom.errors import AteomError, ErrorCode


def test_wire_run_request_round_trip() -> None:
    msg = pb.RunWorkloadRequest(
        atespace="ns", actor_name="n", actor_uid="u", actor_template_atespace="ta",
        actor_template_name="tn", runsc_path="/r", cpu_milli=5, memory_bytes=6,
        spec=pb.WorkloadSpec(containers=[
            pb.Container(name="a"),
            pb.Container(name="b", devices=pb.DeviceRequest(
                policy=pb.DEVICE_POLICY_EXPLICIT, names=["nvidia.com/gpu=0"]),
                csi_volume_mounts=[pb.VolumeMount(volume_name="v", mount_path="/v")]),
        ]),
        actor_dirs=pb.ActorDirs(root_dir="/x", volumes_dir="/x/v"),
    )
    req = wire.run_request(msg)
    assert req.actor.actor_template_name == "tn" and req.runsc_path == "/r"
    assert req.egress_gateway is None  # absent, not ""
    assert req.dirs.volumes_dir == "/x/v" and req.cpu_milli == 5
    a, b = req.containers
    assert a.devices.policy is DevicePolicy.POD_DEFAULT
    assert b.devices.names == ("nvidia.com/gpu=0",) and b.csi_volume_mounts[0].mount_path == "/v"
    msg.egress_gateway.address = ""
    assert wire.run_request(msg).egress_gateway == ""  # present even if empty


def test_wire_scope_and_unknown_values() -> None:
    req = wire.checkpoint_request(pb.CheckpointWorkloadRequest(scope=pb.SNAPSHOT_SCOPE_DATA))
    assert req.scope is SnapshotScope.DATA
    with pytest.raises(AteomError) as err:
        wire.checkpoint_request(pb.CheckpointWorkloadRequest(scope=7))  # type: ignore[arg-type]
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_contract_field_numbers() -> None:
    def numbers(message: type) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    common = {"atespace": 1, "actor_name": 2, "actor_uid": 3, "actor_template_atespace": 4,
              "actor_template_name": 5, "runsc_path": 6, "spec": 7}
    assert numbers(pb.RunWorkloadRequest) == {**common, "runtime_asset_paths": 8,
                                              "egress_gateway": 10, "cpu_milli": 11,
                                              "memory_bytes": 12, "actor_dirs": 13,
                                              "gpus": 20}  # ateom addition
    assert numbers(pb.CheckpointWorkloadRequest) == {**common, "snapshot_uri": 8,
                                                     "runtime_asset_paths": 9, "scope": 10,
                                                     "actor_dirs": 11}
    assert numbers(pb.RestoreWorkloadRequest) == {**common, "snapshot_uri": 8,
                                                  "runtime_asset_paths": 9, "scope": 10,
                                                  "egress_gateway": 12, "cpu_milli": 14,
                                                  "memory_bytes": 15, "actor_dirs": 16,
                                                  "preserve_restore_dir": 17,
                                                  "gpus": 20}  # ateom addition
    assert numbers(pb.TerminateWorkloadRequest) == {**common, "actor_dirs": 8}
    assert list(numbers(pb.ActorDirs).values()) == list(range(1, 8))
    assert numbers(pb.Container) == {"name": 1, "wakeup_probe": 2,
                                     "durable_dir_volume_mounts": 3, "csi_volume_mounts": 4,
                                     "system_info_volume_mounts": 5, "image_volume_mounts": 6,
                                     "devices": 20}
    assert list(numbers(pb.WorkloadStatsSample).values()) == list(range(1, 14))
    assert numbers(pb.CheckpointWorkloadResponse) == {"snapshot_files": 1,
                                                      "data_snapshot_files": 2}
    assert pb.SNAPSHOT_SCOPE_FULL == 1 and pb.SANDBOX_CLASS_MICROVM == 2
    assert pb.STATS_SOURCE_GUEST_AGENT == 2
    methods = [m.name for m in pb.DESCRIPTOR.services_by_name["Ateom"].methods]
    assert methods == ["RunWorkload", "CheckpointWorkload", "RestoreWorkload",
                       "TerminateWorkload", "GetWorkloadStats", "GetActiveWorkloadStats"]
    assert pb.DESCRIPTOR.package == "ateom"


def _shape(message: type) -> list[tuple[str, int, str]]:
    """(name, number, type) of each field, the type spelled as in the issue."""
    from google.protobuf.descriptor import FieldDescriptor as F

    scalar = {F.TYPE_STRING: "string", F.TYPE_INT64: "int64", F.TYPE_UINT64: "uint64",
              F.TYPE_INT32: "int32", F.TYPE_BOOL: "bool"}
    shape = []
    for f in message.DESCRIPTOR.fields:  # type: ignore[attr-defined]
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            kind = "map<{},{}>".format(*(scalar[v.type] for v in f.message_type.fields))
        elif f.message_type is not None:
            kind = f.message_type.name
        elif f.enum_type is not None:
            kind = f.enum_type.name
        else:
            kind = scalar[f.type]
        if f.is_repeated and not kind.startswith("map"):
            kind = "repeated " + kind
        if f.containing_oneof is not None:  # proto3 `optional`: a synthetic oneof
            kind = "optional " + kind
        shape.append((f.name, f.number, kind))
    return shape


_COMMON = [("atespace", 1, "string"), ("actor_name", 2, "string"), ("actor_uid", 3, "string"),
           ("actor_template_atespace", 4, "string"), ("actor_template_name", 5, "string"),
           ("runsc_path", 6, "string"), ("spec", 7, "WorkloadSpec")]
_MOUNT = [("volume_name", 1, "string"), ("mount_path", 2, "string")]
# The wire API, field by field: names, numbers and types are the contract.
_CONTRACT: dict[str, list[tuple[str, int, str]]] = {
    "RunWorkloadRequest": [*_COMMON, ("runtime_asset_paths", 8, "map<string,string>"),
                           ("egress_gateway", 10, "optional EgressGateway"),
                           ("cpu_milli", 11, "int64"), ("memory_bytes", 12, "int64"),
                           ("actor_dirs", 13, "ActorDirs"), ("gpus", 20, "GpuRequest")],
    "RunWorkloadResponse": [],
    "CheckpointWorkloadRequest": [*_COMMON, ("snapshot_uri", 8, "string"),
                                  ("runtime_asset_paths", 9, "map<string,string>"),
                                  ("scope", 10, "SnapshotScope"), ("actor_dirs", 11, "ActorDirs")],
    "CheckpointWorkloadResponse": [("snapshot_files", 1, "repeated string"),
                                   ("data_snapshot_files", 2, "repeated string")],
    "RestoreWorkloadRequest": [*_COMMON, ("snapshot_uri", 8, "string"),
                               ("runtime_asset_paths", 9, "map<string,string>"),
                               ("scope", 10, "SnapshotScope"),
                               ("egress_gateway", 12, "optional EgressGateway"),
                               ("cpu_milli", 14, "int64"), ("memory_bytes", 15, "int64"),
                               ("actor_dirs", 16, "ActorDirs"),
                               ("preserve_restore_dir", 17, "bool"),
                               ("gpus", 20, "GpuRequest")],
    "RestoreWorkloadResponse": [],
    "TerminateWorkloadRequest": [*_COMMON, ("actor_dirs", 8, "ActorDirs")],
    "TerminateWorkloadResponse": [],
    "GetWorkloadStatsRequest": [("actor_uid", 1, "string")],
    "GetActiveWorkloadStatsRequest": [],
    "GetActiveWorkloadStatsResponse": [("samples", 1, "repeated WorkloadStatsSample")],
    "EgressGateway": [("address", 1, "string")],
    "ActorDirs": [(name, i, "string") for i, name in enumerate(
        ["root_dir", "oci_bundle_dir", "checkpoint_dir", "restore_dir",
         "durable_dir_volume_mounts_dir", "system_info_volume_roots_dir", "volumes_dir"], 1)],
    "WorkloadSpec": [("containers", 1, "repeated Container")],
    "Container": [("name", 1, "string"), ("wakeup_probe", 2, "WakeupProbe"),
                  ("durable_dir_volume_mounts", 3, "repeated DurableDirVolumeMount"),
                  ("csi_volume_mounts", 4, "repeated VolumeMount"),
                  ("system_info_volume_mounts", 5, "repeated SystemInfoVolumeMount"),
                  ("image_volume_mounts", 6, "repeated ImageVolumeMount"),
                  ("devices", 20, "DeviceRequest")],  # ours: >= 20
    "DurableDirVolumeMount": _MOUNT, "VolumeMount": _MOUNT, "SystemInfoVolumeMount": _MOUNT,
    "ImageVolumeMount": _MOUNT,
    "WakeupProbe": [("http_get", 1, "HTTPGetAction"), ("timeout_seconds", 2, "int32")],
    "HTTPGetAction": [("path", 1, "string"), ("port", 2, "int32")],
    "WorkloadStatsSample": [
        *_COMMON[:5], ("sandbox_class", 6, "SandboxClass"), ("source", 7, "StatsSource"),
        # uint64 in the reference: measurements; int64: timestamps.
        *[(name, i, "uint64") for i, name in enumerate(
            ["memory_current_bytes", "memory_peak_bytes", "memory_working_set_bytes",
             "cpu_usage_usec"], 8)],
        ("observed_at_unix_nano", 12, "int64"), ("epoch_unix_nano", 13, "int64")],
    "GetWorkloadStatsResponse": [("sample", 1, "WorkloadStatsSample")],
}


@pytest.mark.parametrize("name", sorted(_CONTRACT))
def test_contract_messages_field_by_field(name: str) -> None:
    assert _shape(getattr(pb, name)) == _CONTRACT[name]


def test_contract_enums_and_methods() -> None:
    def values(enum: str) -> list[tuple[str, int]]:
        return [(v.name, v.number) for v in pb.DESCRIPTOR.enum_types_by_name[enum].values]

    for enum, prefix, names in [
        ("SnapshotScope", "SNAPSHOT_SCOPE_", ["UNSPECIFIED", "FULL", "DATA"]),
        ("SandboxClass", "SANDBOX_CLASS_", ["UNSPECIFIED", "GVISOR", "MICROVM"]),
        ("StatsSource", "STATS_SOURCE_", ["UNSPECIFIED", "CGROUP", "GUEST_AGENT"]),
    ]:
        assert values(enum) == [(prefix + n, i) for i, n in enumerate(names)]
    service = pb.DESCRIPTOR.services_by_name["Ateom"]
    assert service.full_name == "ateom.Ateom"
    assert [(m.name, m.input_type.name, m.output_type.name) for m in service.methods] == [
        ("RunWorkload", "RunWorkloadRequest", "RunWorkloadResponse"),
        ("CheckpointWorkload", "CheckpointWorkloadRequest", "CheckpointWorkloadResponse"),
        ("RestoreWorkload", "RestoreWorkloadRequest", "RestoreWorkloadResponse"),
        ("TerminateWorkload", "TerminateWorkloadRequest", "TerminateWorkloadResponse"),
        ("GetWorkloadStats", "GetWorkloadStatsRequest", "GetWorkloadStatsResponse"),
        ("GetActiveWorkloadStats", "GetActiveWorkloadStatsRequest",
         "GetActiveWorkloadStatsResponse"),
    ]
    assert all(not (m.client_streaming or m.server_streaming) for m in service.methods)
    # Our additions live in a second service of the same package.
    assert pb.DESCRIPTOR.services_by_name["Inspect"].full_name == "ateom.Inspect"


def test_generated_code_is_reproducible(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(repo / "proto"),
                    f"--python_out={tmp_path}", str(repo / "proto" / "ateom.proto")], check=True)
    assert (tmp_path / "ateom_pb2.py").read_text() == (
        repo / "ateom" / "_proto" / "ateom_pb2.py").read_text()


def test_a_sample_says_how_it_was_measured_and_not_measured_is_unspecified() -> None:
    ref = ActorRef("u", atespace="ns", actor_name="a")
    measured = StatsSample(actor=ref, memory_current_bytes=3, memory_peak_bytes=4,
                           memory_working_set_bytes=2, cpu_usage_usec=9,
                           observed_at_unix_nano=11, epoch_unix_nano=5)
    got = wire.stats_sample(measured)
    assert (got.source, got.actor_uid, got.memory_current_bytes, got.observed_at_unix_nano) == (
        pb.STATS_SOURCE_GUEST_AGENT, "u", 3, 11)
    unmeasured = StatsSample(actor=ref, memory_current_bytes=0, memory_peak_bytes=0,
                             memory_working_set_bytes=0, cpu_usage_usec=0,
                             observed_at_unix_nano=12, epoch_unix_nano=5, measured=False)
    got = wire.stats_sample(unmeasured)
    assert (got.source, got.actor_name, got.atespace, got.cpu_usage_usec) == (
        pb.STATS_SOURCE_UNSPECIFIED, "a", "ns", 0)
