"""Protobuf messages <-> the plain requests the service takes (pure translation)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ateom._proto import ateom_pb2 as pb
from ateom.daemon.requests import (
    ActorDirs,
    ActorRef,
    CheckpointRequest,
    CheckpointResult,
    ContainerRequest,
    DeviceChoice,
    DevicePolicy,
    RestoreRequest,
    RunRequest,
    SnapshotScope,
    StatsSample,
    TerminateRequest,
    VolumeMountRequest,
)

_POLICIES = {
    pb.DEVICE_POLICY_POD_DEFAULT: DevicePolicy.POD_DEFAULT,
    pb.DEVICE_POLICY_NONE: DevicePolicy.NONE,
    pb.DEVICE_POLICY_EXPLICIT: DevicePolicy.EXPLICIT,
}


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
        from ateom.daemon.validation import invalid

        raise invalid(f"container {msg.name!r}: devices.policy {msg.devices.policy}: unknown")
    return ContainerRequest(
        name=msg.name,
        devices=DeviceChoice(policy, tuple(msg.devices.names)),
        wakeup_probe=msg.HasField("wakeup_probe"),
        durable_dir_volume_mounts=_mounts(msg.durable_dir_volume_mounts),
        csi_volume_mounts=_mounts(msg.csi_volume_mounts),
        system_info_volume_mounts=_mounts(msg.system_info_volume_mounts),
        image_volume_mounts=_mounts(msg.image_volume_mounts),
    )


def _containers(spec: pb.WorkloadSpec) -> tuple[ContainerRequest, ...]:
    return tuple(container(c) for c in spec.containers)


def _egress(msg: Any) -> str | None:
    return msg.egress_gateway.address if msg.HasField("egress_gateway") else None


def _scope(value: int) -> SnapshotScope:
    try:
        return SnapshotScope(value)
    except ValueError:
        from ateom.daemon.validation import invalid

        raise invalid(f"scope {value}: unknown SnapshotScope") from None


def run_request(msg: pb.RunWorkloadRequest) -> RunRequest:
    return RunRequest(
        actor=actor_ref(msg),
        dirs=actor_dirs(msg.actor_dirs),
        containers=_containers(msg.spec),
        runsc_path=msg.runsc_path,
        runtime_asset_paths=dict(msg.runtime_asset_paths),
        egress_gateway=_egress(msg),
        cpu_milli=msg.cpu_milli,
        memory_bytes=msg.memory_bytes,
    )


def checkpoint_request(msg: pb.CheckpointWorkloadRequest) -> CheckpointRequest:
    return CheckpointRequest(
        actor=actor_ref(msg),
        dirs=actor_dirs(msg.actor_dirs),
        containers=_containers(msg.spec),
        runsc_path=msg.runsc_path,
        snapshot_uri=msg.snapshot_uri,
        runtime_asset_paths=dict(msg.runtime_asset_paths),
        scope=_scope(msg.scope),
    )


def restore_request(msg: pb.RestoreWorkloadRequest) -> RestoreRequest:
    return RestoreRequest(
        actor=actor_ref(msg),
        dirs=actor_dirs(msg.actor_dirs),
        containers=_containers(msg.spec),
        runsc_path=msg.runsc_path,
        snapshot_uri=msg.snapshot_uri,
        runtime_asset_paths=dict(msg.runtime_asset_paths),
        scope=_scope(msg.scope),
        egress_gateway=_egress(msg),
        cpu_milli=msg.cpu_milli,
        memory_bytes=msg.memory_bytes,
        preserve_restore_dir=msg.preserve_restore_dir,
    )


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


def stats_sample(sample: StatsSample) -> pb.WorkloadStatsSample:
    a = sample.actor
    return pb.WorkloadStatsSample(
        atespace=a.atespace,
        actor_name=a.actor_name,
        actor_uid=a.actor_uid,
        actor_template_atespace=a.actor_template_atespace,
        actor_template_name=a.actor_template_name,
        sandbox_class=pb.SANDBOX_CLASS_GVISOR,
        # runsc events --stats reports what the sentry (the guest kernel) counts.
        source=pb.STATS_SOURCE_GUEST_AGENT,
        memory_current_bytes=sample.memory_current_bytes,
        memory_peak_bytes=sample.memory_peak_bytes,
        memory_working_set_bytes=sample.memory_working_set_bytes,
        cpu_usage_usec=sample.cpu_usage_usec,
        observed_at_unix_nano=sample.observed_at_unix_nano,
        epoch_unix_nano=sample.epoch_unix_nano,
    )
