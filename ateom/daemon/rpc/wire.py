"""Protobuf messages <-> the plain requests the service takes (pure translation).

Also the wire's own well-formedness, checked before any translation:
`decode` parses a request's bytes (bad UTF-8 in a string field is a
malformed request, INVALID_ARGUMENT) and refuses a NUL in any string field,
naming the field's path in the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError, Message

from ateom._proto import ateom_pb2 as pb
from ateom.daemon.calls import validation
from ateom.daemon.calls.requests import (
    ActorDirs,
    ActorRef,
    CheckpointRequest,
    CheckpointResult,
    ContainerRequest,
    DeviceChoice,
    DevicePolicy,
    GpuWish,
    RestoreRequest,
    RunRequest,
    SnapshotScope,
    StatsSample,
    TerminateRequest,
    VolumeMountRequest,
    WakeupProbeRequest,
)
from ateom.errors import bounded

_POLICIES = {
    pb.DEVICE_POLICY_POD_DEFAULT: DevicePolicy.POD_DEFAULT,
    pb.DEVICE_POLICY_NONE: DevicePolicy.NONE,
    pb.DEVICE_POLICY_EXPLICIT: DevicePolicy.EXPLICIT,
}


@dataclass(frozen=True, slots=True)
class Undecoded:
    """A request's bytes, not parsed yet: what the server's deserializers hand the
    handlers, so that parsing happens inside `ateom.daemon.rpc.handler` and a request
    protobuf refuses (bad UTF-8) gets INVALID_ARGUMENT. grpc's own failed
    deserialization answers INTERNAL, and no handler sees or logs it."""

    message: type[Message]
    data: bytes


def decode(request: Any) -> Any:
    """The parsed request, free of NUL characters. An already parsed message is
    checked only; anything else (a test's stand-in) is passed through."""
    if isinstance(request, Undecoded):
        name = request.message.DESCRIPTOR.full_name
        try:
            request = request.message.FromString(request.data)
        except DecodeError as exc:
            # upb names the reason, e.g. "String field had bad UTF-8".
            reason = str(exc).rpartition(": ")[2] or "malformed"
            raise validation.invalid(
                f"{name}: cannot parse the request: {bounded(reason)}") from None
    if isinstance(request, Message):
        check_strings(request)
    return request


def check_strings(msg: Message, prefix: str = "") -> None:
    """Every string field, at any depth (repeated, map keys and values), is free of
    NUL: the message names the first offender's path, e.g. ``spec.containers[0].name``."""
    for field, value in msg.ListFields():
        _check_value(prefix + field.name, value)


def _check_value(path: str, value: object) -> None:
    # By the value's type, not the descriptor's label (which protobuf 7 dropped):
    # map fields are Mappings, repeated fields Sequences.
    if isinstance(value, str):
        validation.check_no_nul(path, value)
    elif isinstance(value, Message):
        check_strings(value, path + ".")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                validation.check_no_nul(f"{path} key", key)
            _check_value(f"{path}[{validation.quote(str(key))}]", item)
    elif isinstance(value, Sequence):
        for i, item in enumerate(value):
            _check_value(f"{path}[{i}]", item)


def actor_ref(msg: Any) -> ActorRef:
    return ActorRef(
        actor_uid=msg.actor_uid,
        atespace=msg.atespace,
        actor_name=msg.actor_name,
        actor_template_atespace=msg.actor_template_atespace,
        actor_template_name=msg.actor_template_name,
    )


def actor_dirs(msg: pb.ActorDirs) -> ActorDirs:
    return ActorDirs(
        root_dir=msg.root_dir,
        oci_bundle_dir=msg.oci_bundle_dir,
        checkpoint_dir=msg.checkpoint_dir,
        restore_dir=msg.restore_dir,
        durable_dir_volume_mounts_dir=msg.durable_dir_volume_mounts_dir,
        system_info_volume_roots_dir=msg.system_info_volume_roots_dir,
        volumes_dir=msg.volumes_dir,
    )


def _mounts(items: Iterable[Any]) -> tuple[VolumeMountRequest, ...]:
    return tuple(VolumeMountRequest(m.volume_name, m.mount_path) for m in items)


def container(msg: pb.Container) -> ContainerRequest:
    policy = _POLICIES.get(msg.devices.policy)
    if policy is None:
        raise validation.invalid(f"container {validation.quote(msg.name)}: devices.policy"
                                 f" {msg.devices.policy}: unknown")
    return ContainerRequest(
        name=msg.name,
        devices=DeviceChoice(policy, tuple(msg.devices.names)),
        wakeup_probe=_wakeup_probe(msg),
        durable_dir_volume_mounts=_mounts(msg.durable_dir_volume_mounts),
        csi_volume_mounts=_mounts(msg.csi_volume_mounts),
        system_info_volume_mounts=_mounts(msg.system_info_volume_mounts),
        image_volume_mounts=_mounts(msg.image_volume_mounts),
    )


def _wakeup_probe(msg: pb.Container) -> WakeupProbeRequest | None:
    if not msg.HasField("wakeup_probe"):
        return None
    probe = msg.wakeup_probe
    if not probe.HasField("http_get"):
        # Only HTTP is defined; a probe that names no action could never pass.
        raise validation.invalid(f"container {validation.quote(msg.name)}: wakeup_probe:"
                                 " http_get required (the only probe the wire defines)")
    return WakeupProbeRequest(probe.http_get.path, probe.http_get.port,
                              probe.timeout_seconds)


def _containers(spec: pb.WorkloadSpec) -> tuple[ContainerRequest, ...]:
    return tuple(container(c) for c in spec.containers)


def _egress(msg: Any) -> str | None:
    return msg.egress_gateway.address if msg.HasField("egress_gateway") else None


def _scope(value: int) -> SnapshotScope:
    try:
        return SnapshotScope(value)
    except ValueError:
        raise validation.invalid(f"scope {value}: unknown SnapshotScope") from None


def _call(msg: pb.RunWorkloadRequest | pb.CheckpointWorkloadRequest
          | pb.RestoreWorkloadRequest) -> dict[str, Any]:
    """`ActorCall`'s fields, as every lifecycle request carries them."""
    return {"actor": actor_ref(msg), "dirs": actor_dirs(msg.actor_dirs),
            "containers": _containers(msg.spec), "runsc_path": msg.runsc_path,
            "runtime_asset_paths": dict(msg.runtime_asset_paths)}


def _snapshot(msg: pb.CheckpointWorkloadRequest | pb.RestoreWorkloadRequest) -> dict[str, Any]:
    """`SnapshotCall`'s own fields."""
    return {"snapshot_uri": msg.snapshot_uri, "scope": _scope(msg.scope)}


def _boot(msg: pb.RunWorkloadRequest | pb.RestoreWorkloadRequest) -> dict[str, Any]:
    """How a sandbox boots, as Run and Restore both say it."""
    return {"egress_gateway": _egress(msg), "cpu_milli": msg.cpu_milli,
            "memory_bytes": msg.memory_bytes, "gpus": _gpus(msg)}


def run_request(msg: pb.RunWorkloadRequest) -> RunRequest:
    return RunRequest(**_call(msg), **_boot(msg))


def checkpoint_request(msg: pb.CheckpointWorkloadRequest) -> CheckpointRequest:
    return CheckpointRequest(**_call(msg), **_snapshot(msg))


def restore_request(msg: pb.RestoreWorkloadRequest) -> RestoreRequest:
    return RestoreRequest(**_call(msg), **_snapshot(msg), **_boot(msg),
                          preserve_restore_dir=msg.preserve_restore_dir)


def _gpus(msg: pb.RunWorkloadRequest | pb.RestoreWorkloadRequest) -> GpuWish | None:
    if not msg.HasField("gpus"):
        return None
    return GpuWish(count=msg.gpus.count, names=tuple(msg.gpus.names))



def terminate_request(msg: pb.TerminateWorkloadRequest) -> TerminateRequest:
    return TerminateRequest(
        actor=actor_ref(msg),
        dirs=actor_dirs(msg.actor_dirs),
        containers=_containers(msg.spec),
        runsc_path=msg.runsc_path,
    )


def checkpoint_response(result: CheckpointResult) -> pb.CheckpointWorkloadResponse:
    return pb.CheckpointWorkloadResponse(
        snapshot_files=list(result.snapshot_files),
        data_snapshot_files=list(result.data_snapshot_files),
    )


_UINT64_MAX = 2**64 - 1


def _uint64(value: int) -> int:
    """A measurement as the reference's uint64: clamped, since a negative value
    (a working set computed below zero) would make protobuf raise."""
    return min(max(value, 0), _UINT64_MAX)


def stats_response(sample: StatsSample) -> pb.GetWorkloadStatsResponse:
    return pb.GetWorkloadStatsResponse(sample=stats_sample(sample))


def stats_sample(sample: StatsSample) -> pb.WorkloadStatsSample:
    a = sample.actor
    return pb.WorkloadStatsSample(
        atespace=a.atespace,
        actor_name=a.actor_name,
        actor_uid=a.actor_uid,
        actor_template_atespace=a.actor_template_atespace,
        actor_template_name=a.actor_template_name,
        sandbox_class=pb.SANDBOX_CLASS_GVISOR,
        # runsc events --stats reports what the sentry (the guest kernel) counts;
        # "not measured" is the reference's UNSPECIFIED.
        source=pb.STATS_SOURCE_GUEST_AGENT if sample.measured else pb.STATS_SOURCE_UNSPECIFIED,
        memory_current_bytes=_uint64(sample.memory_current_bytes),
        memory_peak_bytes=_uint64(sample.memory_peak_bytes),
        memory_working_set_bytes=_uint64(sample.memory_working_set_bytes),
        cpu_usage_usec=_uint64(sample.cpu_usage_usec),
        observed_at_unix_nano=sample.observed_at_unix_nano,
        epoch_unix_nano=sample.epoch_unix_nano,
    )
