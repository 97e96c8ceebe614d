"""What the node agent asks for, as plain frozen data (no protobuf here).

`ateom.daemon.rpc.wire` converts the wire messages into these; the service, the
validation and the tests only ever see these.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ateom.volumes import VolumeKind, VolumeRequest

# The CFS period a container's CPU limit is expressed over: `cpu_milli` of
# 1000 is one CPU, a quota of one period per period.
CPU_PERIOD_USEC = 100_000

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ActorRef:
    """Who the actor is. Only `actor_uid` is used as a key and in paths."""

    actor_uid: str
    atespace: str = ""
    actor_name: str = ""
    actor_template_atespace: str = ""
    actor_template_name: str = ""


@dataclass(frozen=True, slots=True)
class ActorDirs:
    """The node agent's directories for one actor ("" = not given)."""

    root_dir: str = ""
    oci_bundle_dir: str = ""
    checkpoint_dir: str = ""
    restore_dir: str = ""
    durable_dir_volume_mounts_dir: str = ""
    system_info_volume_roots_dir: str = ""
    volumes_dir: str = ""

    def items(self) -> tuple[tuple[str, str], ...]:
        """(field name, path) for every field, in wire order."""
        return tuple((name, getattr(self, name)) for name in self.__slots__)  # type: ignore[attr-defined]


class DevicePolicy(enum.Enum):
    POD_DEFAULT = "pod-default"  # every GPU the Pod was given
    NONE = "none"
    EXPLICIT = "explicit"


@dataclass(frozen=True, slots=True)
class DeviceChoice:
    policy: DevicePolicy = DevicePolicy.POD_DEFAULT
    names: tuple[str, ...] = ()  # qualified CDI names, only with EXPLICIT


@dataclass(frozen=True, slots=True)
class VolumeMountRequest:
    volume_name: str
    mount_path: str


@dataclass(frozen=True, slots=True)
class WakeupProbeRequest:
    """HTTP GET `path` on `port` at the actor's address until it answers 200, for at
    most `timeout_seconds` (0: the default, 30 s)."""

    path: str
    port: int
    timeout_seconds: int = 0


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """One app container of the workload (never the pause container)."""

    name: str
    devices: DeviceChoice = field(default_factory=DeviceChoice)
    wakeup_probe: WakeupProbeRequest | None = None
    durable_dir_volume_mounts: tuple[VolumeMountRequest, ...] = ()
    csi_volume_mounts: tuple[VolumeMountRequest, ...] = ()
    system_info_volume_mounts: tuple[VolumeMountRequest, ...] = ()
    image_volume_mounts: tuple[VolumeMountRequest, ...] = ()

    def volume_requests(self) -> tuple[VolumeRequest, ...]:
        """Every volume mount, in wire order (durable, CSI, system-info, image): the
        index a refusal names is the wire's (`ateom.volumes.plan_mounts`)."""
        kinds = ((VolumeKind.DURABLE_DIR, self.durable_dir_volume_mounts),
                 (VolumeKind.CSI, self.csi_volume_mounts),
                 (VolumeKind.SYSTEM_INFO, self.system_info_volume_mounts),
                 (VolumeKind.IMAGE, self.image_volume_mounts))
        return tuple(VolumeRequest(kind, m.volume_name, m.mount_path)
                     for kind, mounts in kinds for m in mounts)


@dataclass(frozen=True, slots=True)
class GpuWish:
    """The actor's share of the Pod's GPUs: `count` whole GPUs, or these `names`."""

    count: int = 0
    names: tuple[str, ...] = ()


class SnapshotScope(enum.Enum):
    UNSPECIFIED = 0
    FULL = 1
    DATA = 2


@dataclass(frozen=True, slots=True)
class ActorCall:
    """What Run, Checkpoint and Restore each name: the actor, its dirs, its
    containers, the runsc to use and its runtime assets. Held once here, so the
    three requests (and their wire builders) cannot drift apart."""

    actor: ActorRef
    dirs: ActorDirs
    containers: tuple[ContainerRequest, ...] = ()
    runsc_path: str = ""
    runtime_asset_paths: Mapping[str, str] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class SnapshotCall(ActorCall):
    """A call about a snapshot (Checkpoint, Restore): where it is and what it holds."""

    snapshot_uri: str = ""
    scope: SnapshotScope = SnapshotScope.UNSPECIFIED


@dataclass(frozen=True, slots=True)
class RunRequest(ActorCall):
    egress_gateway: str | None = None  # None = field absent
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpus: GpuWish | None = None  # None: every GPU of the Pod


@dataclass(frozen=True, slots=True)
class CheckpointRequest(SnapshotCall):
    pass


@dataclass(frozen=True, slots=True)
class RestoreRequest(SnapshotCall):
    # How the restored sandbox boots, as a Run's (a restore boots it anew).
    egress_gateway: str | None = None
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpus: GpuWish | None = None  # for a checkpoint without a GPU record
    preserve_restore_dir: bool = False


@dataclass(frozen=True, slots=True)
class TerminateRequest:
    actor: ActorRef
    dirs: ActorDirs = field(default_factory=ActorDirs)
    containers: tuple[ContainerRequest, ...] = ()
    runsc_path: str = ""


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    snapshot_files: tuple[str, ...]
    data_snapshot_files: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StatsSample:
    actor: ActorRef
    memory_current_bytes: int
    memory_peak_bytes: int
    memory_working_set_bytes: int
    cpu_usage_usec: int
    observed_at_unix_nano: int
    epoch_unix_nano: int
    measured: bool = True  # False: no numbers to give yet (the figures above are 0)
