from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DevicePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_POLICY_POD_DEFAULT: _ClassVar[DevicePolicy]
    DEVICE_POLICY_NONE: _ClassVar[DevicePolicy]
    DEVICE_POLICY_EXPLICIT: _ClassVar[DevicePolicy]

class SnapshotScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SNAPSHOT_SCOPE_UNSPECIFIED: _ClassVar[SnapshotScope]
    SNAPSHOT_SCOPE_FULL: _ClassVar[SnapshotScope]
    SNAPSHOT_SCOPE_DATA: _ClassVar[SnapshotScope]

class SandboxClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SANDBOX_CLASS_UNSPECIFIED: _ClassVar[SandboxClass]
    SANDBOX_CLASS_GVISOR: _ClassVar[SandboxClass]
    SANDBOX_CLASS_MICROVM: _ClassVar[SandboxClass]

class StatsSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATS_SOURCE_UNSPECIFIED: _ClassVar[StatsSource]
    STATS_SOURCE_CGROUP: _ClassVar[StatsSource]
    STATS_SOURCE_GUEST_AGENT: _ClassVar[StatsSource]

class DoctorStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DOCTOR_STATUS_UNSPECIFIED: _ClassVar[DoctorStatus]
    DOCTOR_STATUS_PASS: _ClassVar[DoctorStatus]
    DOCTOR_STATUS_WARN: _ClassVar[DoctorStatus]
    DOCTOR_STATUS_FAIL: _ClassVar[DoctorStatus]
    DOCTOR_STATUS_SKIP: _ClassVar[DoctorStatus]
DEVICE_POLICY_POD_DEFAULT: DevicePolicy
DEVICE_POLICY_NONE: DevicePolicy
DEVICE_POLICY_EXPLICIT: DevicePolicy
SNAPSHOT_SCOPE_UNSPECIFIED: SnapshotScope
SNAPSHOT_SCOPE_FULL: SnapshotScope
SNAPSHOT_SCOPE_DATA: SnapshotScope
SANDBOX_CLASS_UNSPECIFIED: SandboxClass
SANDBOX_CLASS_GVISOR: SandboxClass
SANDBOX_CLASS_MICROVM: SandboxClass
STATS_SOURCE_UNSPECIFIED: StatsSource
STATS_SOURCE_CGROUP: StatsSource
STATS_SOURCE_GUEST_AGENT: StatsSource
DOCTOR_STATUS_UNSPECIFIED: DoctorStatus
DOCTOR_STATUS_PASS: DoctorStatus
DOCTOR_STATUS_WARN: DoctorStatus
DOCTOR_STATUS_FAIL: DoctorStatus
DOCTOR_STATUS_SKIP: DoctorStatus

class ActorDirs(_message.Message):
    __slots__ = ("root_dir", "oci_bundle_dir", "checkpoint_dir", "restore_dir", "durable_dir_volume_mounts_dir", "system_info_volume_roots_dir", "volumes_dir")
    ROOT_DIR_FIELD_NUMBER: _ClassVar[int]
    OCI_BUNDLE_DIR_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    RESTORE_DIR_FIELD_NUMBER: _ClassVar[int]
    DURABLE_DIR_VOLUME_MOUNTS_DIR_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_INFO_VOLUME_ROOTS_DIR_FIELD_NUMBER: _ClassVar[int]
    VOLUMES_DIR_FIELD_NUMBER: _ClassVar[int]
    root_dir: str
    oci_bundle_dir: str
    checkpoint_dir: str
    restore_dir: str
    durable_dir_volume_mounts_dir: str
    system_info_volume_roots_dir: str
    volumes_dir: str
    def __init__(self, root_dir: _Optional[str] = ..., oci_bundle_dir: _Optional[str] = ..., checkpoint_dir: _Optional[str] = ..., restore_dir: _Optional[str] = ..., durable_dir_volume_mounts_dir: _Optional[str] = ..., system_info_volume_roots_dir: _Optional[str] = ..., volumes_dir: _Optional[str] = ...) -> None: ...

class WorkloadSpec(_message.Message):
    __slots__ = ("containers",)
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    containers: _containers.RepeatedCompositeFieldContainer[Container]
    def __init__(self, containers: _Optional[_Iterable[_Union[Container, _Mapping]]] = ...) -> None: ...

class Container(_message.Message):
    __slots__ = ("name", "wakeup_probe", "durable_dir_volume_mounts", "csi_volume_mounts", "system_info_volume_mounts", "image_volume_mounts", "devices")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WAKEUP_PROBE_FIELD_NUMBER: _ClassVar[int]
    DURABLE_DIR_VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    CSI_VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_INFO_VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    name: str
    wakeup_probe: WakeupProbe
    durable_dir_volume_mounts: _containers.RepeatedCompositeFieldContainer[DurableDirVolumeMount]
    csi_volume_mounts: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    system_info_volume_mounts: _containers.RepeatedCompositeFieldContainer[SystemInfoVolumeMount]
    image_volume_mounts: _containers.RepeatedCompositeFieldContainer[ImageVolumeMount]
    devices: DeviceRequest
    def __init__(self, name: _Optional[str] = ..., wakeup_probe: _Optional[_Union[WakeupProbe, _Mapping]] = ..., durable_dir_volume_mounts: _Optional[_Iterable[_Union[DurableDirVolumeMount, _Mapping]]] = ..., csi_volume_mounts: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ..., system_info_volume_mounts: _Optional[_Iterable[_Union[SystemInfoVolumeMount, _Mapping]]] = ..., image_volume_mounts: _Optional[_Iterable[_Union[ImageVolumeMount, _Mapping]]] = ..., devices: _Optional[_Union[DeviceRequest, _Mapping]] = ...) -> None: ...

class DeviceRequest(_message.Message):
    __slots__ = ("policy", "names")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    policy: DevicePolicy
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, policy: _Optional[_Union[DevicePolicy, str]] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class WakeupProbe(_message.Message):
    __slots__ = ("http_get", "timeout_seconds")
    HTTP_GET_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    http_get: HTTPGetAction
    timeout_seconds: int
    def __init__(self, http_get: _Optional[_Union[HTTPGetAction, _Mapping]] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class HTTPGetAction(_message.Message):
    __slots__ = ("path", "port")
    PATH_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    path: str
    port: int
    def __init__(self, path: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class DurableDirVolumeMount(_message.Message):
    __slots__ = ("volume_name", "mount_path")
    VOLUME_NAME_FIELD_NUMBER: _ClassVar[int]
    MOUNT_PATH_FIELD_NUMBER: _ClassVar[int]
    volume_name: str
    mount_path: str
    def __init__(self, volume_name: _Optional[str] = ..., mount_path: _Optional[str] = ...) -> None: ...

class VolumeMount(_message.Message):
    __slots__ = ("volume_name", "mount_path")
    VOLUME_NAME_FIELD_NUMBER: _ClassVar[int]
    MOUNT_PATH_FIELD_NUMBER: _ClassVar[int]
    volume_name: str
    mount_path: str
    def __init__(self, volume_name: _Optional[str] = ..., mount_path: _Optional[str] = ...) -> None: ...

class SystemInfoVolumeMount(_message.Message):
    __slots__ = ("volume_name", "mount_path")
    VOLUME_NAME_FIELD_NUMBER: _ClassVar[int]
    MOUNT_PATH_FIELD_NUMBER: _ClassVar[int]
    volume_name: str
    mount_path: str
    def __init__(self, volume_name: _Optional[str] = ..., mount_path: _Optional[str] = ...) -> None: ...

class ImageVolumeMount(_message.Message):
    __slots__ = ("volume_name", "mount_path")
    VOLUME_NAME_FIELD_NUMBER: _ClassVar[int]
    MOUNT_PATH_FIELD_NUMBER: _ClassVar[int]
    volume_name: str
    mount_path: str
    def __init__(self, volume_name: _Optional[str] = ..., mount_path: _Optional[str] = ...) -> None: ...

class EgressGateway(_message.Message):
    __slots__ = ("address",)
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    address: str
    def __init__(self, address: _Optional[str] = ...) -> None: ...

class RunWorkloadRequest(_message.Message):
    __slots__ = ("atespace", "actor_name", "actor_uid", "actor_template_atespace", "actor_template_name", "runsc_path", "spec", "runtime_asset_paths", "egress_gateway", "cpu_milli", "memory_bytes", "actor_dirs", "gpus")
    class RuntimeAssetPathsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_NAME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_UID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TEMPLATE_ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TEMPLATE_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNSC_PATH_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ASSET_PATHS_FIELD_NUMBER: _ClassVar[int]
    EGRESS_GATEWAY_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACTOR_DIRS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    atespace: str
    actor_name: str
    actor_uid: str
    actor_template_atespace: str
    actor_template_name: str
    runsc_path: str
    spec: WorkloadSpec
    runtime_asset_paths: _containers.ScalarMap[str, str]
    egress_gateway: EgressGateway
    cpu_milli: int
    memory_bytes: int
    actor_dirs: ActorDirs
    gpus: GpuRequest
    def __init__(self, atespace: _Optional[str] = ..., actor_name: _Optional[str] = ..., actor_uid: _Optional[str] = ..., actor_template_atespace: _Optional[str] = ..., actor_template_name: _Optional[str] = ..., runsc_path: _Optional[str] = ..., spec: _Optional[_Union[WorkloadSpec, _Mapping]] = ..., runtime_asset_paths: _Optional[_Mapping[str, str]] = ..., egress_gateway: _Optional[_Union[EgressGateway, _Mapping]] = ..., cpu_milli: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., actor_dirs: _Optional[_Union[ActorDirs, _Mapping]] = ..., gpus: _Optional[_Union[GpuRequest, _Mapping]] = ...) -> None: ...

class GpuRequest(_message.Message):
    __slots__ = ("count", "names")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    count: int
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, count: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class RunWorkloadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckpointWorkloadRequest(_message.Message):
    __slots__ = ("atespace", "actor_name", "actor_uid", "actor_template_atespace", "actor_template_name", "runsc_path", "spec", "snapshot_uri", "runtime_asset_paths", "scope", "actor_dirs")
    class RuntimeAssetPathsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_NAME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_UID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TEMPLATE_ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TEMPLATE_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNSC_PATH_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_URI_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ASSET_PATHS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_DIRS_FIELD_NUMBER: _ClassVar[int]
    atespace: str
    actor_name: str
    actor_uid: str
    actor_template_atespace: str
    actor_template_name: str
    runsc_path: str
    spec: WorkloadSpec
    snapshot_uri: str
    runtime_asset_paths: _containers.ScalarMap[str, str]
    scope: SnapshotScope
    actor_dirs: ActorDirs
    def __init__(self, atespace: _Optional[str] = ..., actor_name: _Optional[str] = ..., actor_uid: _Optional[str] = ..., actor_template_atespace: _Optional[str] = ..., actor_template_name: _Optional[str] = ..., runsc_path: _Optional[str] = ..., spec: _Optional[_Union[WorkloadSpec, _Mapping]] = ..., snapshot_uri: _Optional[str] = ..., runtime_asset_paths: _Optional[_Mapping[str, str]] = ..., scope: _Optional[_Union[SnapshotScope, str]] = ..., actor_dirs: _Optional[_Union[ActorDirs, _Mapping]] = ...) -> None: ...

class CheckpointWorkloadResponse(_message.Message):
    __slots__ = ("snapshot_files", "data_snapshot_files")
    SNAPSHOT_FILES_FIELD_NUMBER: _ClassVar[int]
    DATA_SNAPSHOT_FILES_FIELD_NUMBER: _ClassVar[int]
    snapshot_files: _containers.RepeatedScalarFieldContainer[str]
    data_snapshot_files: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, snapshot_files: _Optional[_Iterable[str]] = ..., data_snapshot_files: _Optional[_Iterable[str]] = ...) -> None: ...

class RestoreWorkloadRequest(_message.Message):
    __slots__ = ("atespace", "actor_name", "actor_uid", "actor_template_atespace", "actor_template_name", "runsc_path", "spec", "snapshot_uri", "runtime_asset_paths", "scope", "egress_gateway", "cpu_milli", "memory_bytes", "actor_dirs", "preserve_restore_dir", "gpus")
    class RuntimeAssetPathsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_NAME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_UID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TEMPLATE_ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TEMPLATE_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNSC_PATH_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_URI_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ASSET_PATHS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    EGRESS_GATEWAY_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACTOR_DIRS_FIELD_NUMBER: _ClassVar[int]
    PRESERVE_RESTORE_DIR_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    atespace: str
    actor_name: str
    actor_uid: str
    actor_template_atespace: str
    actor_template_name: str
    runsc_path: str
    spec: WorkloadSpec
    snapshot_uri: str
    runtime_asset_paths: _containers.ScalarMap[str, str]
    scope: SnapshotScope
    egress_gateway: EgressGateway
    cpu_milli: int
    memory_bytes: int
    actor_dirs: ActorDirs
    preserve_restore_dir: bool
    gpus: GpuRequest
    def __init__(self, atespace: _Optional[str] = ..., actor_name: _Optional[str] = ..., actor_uid: _Optional[str] = ..., actor_template_atespace: _Optional[str] = ..., actor_template_name: _Optional[str] = ..., runsc_path: _Optional[str] = ..., spec: _Optional[_Union[WorkloadSpec, _Mapping]] = ..., snapshot_uri: _Optional[str] = ..., runtime_asset_paths: _Optional[_Mapping[str, str]] = ..., scope: _Optional[_Union[SnapshotScope, str]] = ..., egress_gateway: _Optional[_Union[EgressGateway, _Mapping]] = ..., cpu_milli: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., actor_dirs: _Optional[_Union[ActorDirs, _Mapping]] = ..., preserve_restore_dir: _Optional[bool] = ..., gpus: _Optional[_Union[GpuRequest, _Mapping]] = ...) -> None: ...

class RestoreWorkloadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TerminateWorkloadRequest(_message.Message):
    __slots__ = ("atespace", "actor_name", "actor_uid", "actor_template_atespace", "actor_template_name", "runsc_path", "spec", "actor_dirs")
    ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_NAME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_UID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TEMPLATE_ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TEMPLATE_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNSC_PATH_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    ACTOR_DIRS_FIELD_NUMBER: _ClassVar[int]
    atespace: str
    actor_name: str
    actor_uid: str
    actor_template_atespace: str
    actor_template_name: str
    runsc_path: str
    spec: WorkloadSpec
    actor_dirs: ActorDirs
    def __init__(self, atespace: _Optional[str] = ..., actor_name: _Optional[str] = ..., actor_uid: _Optional[str] = ..., actor_template_atespace: _Optional[str] = ..., actor_template_name: _Optional[str] = ..., runsc_path: _Optional[str] = ..., spec: _Optional[_Union[WorkloadSpec, _Mapping]] = ..., actor_dirs: _Optional[_Union[ActorDirs, _Mapping]] = ...) -> None: ...

class TerminateWorkloadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetWorkloadStatsRequest(_message.Message):
    __slots__ = ("actor_uid",)
    ACTOR_UID_FIELD_NUMBER: _ClassVar[int]
    actor_uid: str
    def __init__(self, actor_uid: _Optional[str] = ...) -> None: ...

class GetWorkloadStatsResponse(_message.Message):
    __slots__ = ("sample",)
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    sample: WorkloadStatsSample
    def __init__(self, sample: _Optional[_Union[WorkloadStatsSample, _Mapping]] = ...) -> None: ...

class GetActiveWorkloadStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetActiveWorkloadStatsResponse(_message.Message):
    __slots__ = ("samples",)
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[WorkloadStatsSample]
    def __init__(self, samples: _Optional[_Iterable[_Union[WorkloadStatsSample, _Mapping]]] = ...) -> None: ...

class WorkloadStatsSample(_message.Message):
    __slots__ = ("atespace", "actor_name", "actor_uid", "actor_template_atespace", "actor_template_name", "sandbox_class", "source", "memory_current_bytes", "memory_peak_bytes", "memory_working_set_bytes", "cpu_usage_usec", "observed_at_unix_nano", "epoch_unix_nano")
    ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_NAME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_UID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TEMPLATE_ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TEMPLATE_NAME_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_CLASS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CURRENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_WORKING_SET_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_USAGE_USEC_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    EPOCH_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    atespace: str
    actor_name: str
    actor_uid: str
    actor_template_atespace: str
    actor_template_name: str
    sandbox_class: SandboxClass
    source: StatsSource
    memory_current_bytes: int
    memory_peak_bytes: int
    memory_working_set_bytes: int
    cpu_usage_usec: int
    observed_at_unix_nano: int
    epoch_unix_nano: int
    def __init__(self, atespace: _Optional[str] = ..., actor_name: _Optional[str] = ..., actor_uid: _Optional[str] = ..., actor_template_atespace: _Optional[str] = ..., actor_template_name: _Optional[str] = ..., sandbox_class: _Optional[_Union[SandboxClass, str]] = ..., source: _Optional[_Union[StatsSource, str]] = ..., memory_current_bytes: _Optional[int] = ..., memory_peak_bytes: _Optional[int] = ..., memory_working_set_bytes: _Optional[int] = ..., cpu_usage_usec: _Optional[int] = ..., observed_at_unix_nano: _Optional[int] = ..., epoch_unix_nano: _Optional[int] = ...) -> None: ...

class ListActorsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListActorsResponse(_message.Message):
    __slots__ = ("actors", "gpu_placement", "gpus")
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    GPU_PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    actors: _containers.RepeatedCompositeFieldContainer[HostedActor]
    gpu_placement: str
    gpus: _containers.RepeatedCompositeFieldContainer[GpuHolders]
    def __init__(self, actors: _Optional[_Iterable[_Union[HostedActor, _Mapping]]] = ..., gpu_placement: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[GpuHolders, _Mapping]]] = ...) -> None: ...

class GpuHolders(_message.Message):
    __slots__ = ("gpu", "actor_uids", "model", "uuid")
    GPU_FIELD_NUMBER: _ClassVar[int]
    ACTOR_UIDS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    gpu: str
    actor_uids: _containers.RepeatedScalarFieldContainer[str]
    model: str
    uuid: str
    def __init__(self, gpu: _Optional[str] = ..., actor_uids: _Optional[_Iterable[str]] = ..., model: _Optional[str] = ..., uuid: _Optional[str] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("version", "state", "actors", "gpu_present", "cdi_spec_source", "runsc", "max_actors", "spec_dirs", "gpu_placement", "gpus", "not_ready", "worker")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    GPU_PRESENT_FIELD_NUMBER: _ClassVar[int]
    CDI_SPEC_SOURCE_FIELD_NUMBER: _ClassVar[int]
    RUNSC_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTORS_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIRS_FIELD_NUMBER: _ClassVar[int]
    GPU_PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    version: str
    state: str
    actors: _containers.RepeatedCompositeFieldContainer[HostedActor]
    gpu_present: bool
    cdi_spec_source: str
    runsc: RunscStatus
    max_actors: int
    spec_dirs: _containers.RepeatedScalarFieldContainer[str]
    gpu_placement: str
    gpus: _containers.RepeatedCompositeFieldContainer[GpuHolders]
    not_ready: _containers.RepeatedScalarFieldContainer[str]
    worker: WorkerStatus
    def __init__(self, version: _Optional[str] = ..., state: _Optional[str] = ..., actors: _Optional[_Iterable[_Union[HostedActor, _Mapping]]] = ..., gpu_present: _Optional[bool] = ..., cdi_spec_source: _Optional[str] = ..., runsc: _Optional[_Union[RunscStatus, _Mapping]] = ..., max_actors: _Optional[int] = ..., spec_dirs: _Optional[_Iterable[str]] = ..., gpu_placement: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[GpuHolders, _Mapping]]] = ..., not_ready: _Optional[_Iterable[str]] = ..., worker: _Optional[_Union[WorkerStatus, _Mapping]] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("pod_uid", "base_dir", "socket", "actors_root", "cpu_milli", "memory_bytes", "capacity_problems", "readiness_listen_address", "accepted_not_served", "cpu_milli_in_use", "memory_bytes_in_use")
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    BASE_DIR_FIELD_NUMBER: _ClassVar[int]
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    ACTORS_ROOT_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    READINESS_LISTEN_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_NOT_SERVED_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_IN_USE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_IN_USE_FIELD_NUMBER: _ClassVar[int]
    pod_uid: str
    base_dir: str
    socket: str
    actors_root: str
    cpu_milli: int
    memory_bytes: int
    capacity_problems: _containers.RepeatedScalarFieldContainer[str]
    readiness_listen_address: str
    accepted_not_served: _containers.RepeatedScalarFieldContainer[str]
    cpu_milli_in_use: int
    memory_bytes_in_use: int
    def __init__(self, pod_uid: _Optional[str] = ..., base_dir: _Optional[str] = ..., socket: _Optional[str] = ..., actors_root: _Optional[str] = ..., cpu_milli: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., capacity_problems: _Optional[_Iterable[str]] = ..., readiness_listen_address: _Optional[str] = ..., accepted_not_served: _Optional[_Iterable[str]] = ..., cpu_milli_in_use: _Optional[int] = ..., memory_bytes_in_use: _Optional[int] = ...) -> None: ...

class HostedActor(_message.Message):
    __slots__ = ("actor_uid", "atespace", "actor_name", "phase", "containers", "devices", "sandbox_exited", "gpus", "checkpointable", "checkpoint_blocker", "exit_code", "exited_at_unix_nano", "in_progress")
    ACTOR_UID_FIELD_NUMBER: _ClassVar[int]
    ATESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_NAME_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_EXITED_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTABLE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_BLOCKER_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXITED_AT_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    actor_uid: str
    atespace: str
    actor_name: str
    phase: str
    containers: _containers.RepeatedScalarFieldContainer[str]
    devices: _containers.RepeatedScalarFieldContainer[str]
    sandbox_exited: bool
    gpus: _containers.RepeatedScalarFieldContainer[str]
    checkpointable: bool
    checkpoint_blocker: str
    exit_code: int
    exited_at_unix_nano: int
    in_progress: _containers.RepeatedCompositeFieldContainer[PhaseProgress]
    def __init__(self, actor_uid: _Optional[str] = ..., atespace: _Optional[str] = ..., actor_name: _Optional[str] = ..., phase: _Optional[str] = ..., containers: _Optional[_Iterable[str]] = ..., devices: _Optional[_Iterable[str]] = ..., sandbox_exited: _Optional[bool] = ..., gpus: _Optional[_Iterable[str]] = ..., checkpointable: _Optional[bool] = ..., checkpoint_blocker: _Optional[str] = ..., exit_code: _Optional[int] = ..., exited_at_unix_nano: _Optional[int] = ..., in_progress: _Optional[_Iterable[_Union[PhaseProgress, _Mapping]]] = ...) -> None: ...

class PhaseProgress(_message.Message):
    __slots__ = ("phase", "elapsed_seconds", "done_bytes", "expected_bytes", "bytes_per_second")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DONE_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    phase: str
    elapsed_seconds: float
    done_bytes: int
    expected_bytes: int
    bytes_per_second: float
    def __init__(self, phase: _Optional[str] = ..., elapsed_seconds: _Optional[float] = ..., done_bytes: _Optional[int] = ..., expected_bytes: _Optional[int] = ..., bytes_per_second: _Optional[float] = ...) -> None: ...

class RunscStatus(_message.Message):
    __slots__ = ("path", "version", "supports_nvproxy", "gpu_checkpoint", "gpu_remap", "error")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_NVPROXY_FIELD_NUMBER: _ClassVar[int]
    GPU_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    GPU_REMAP_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    path: str
    version: str
    supports_nvproxy: bool
    gpu_checkpoint: bool
    gpu_remap: bool
    error: str
    def __init__(self, path: _Optional[str] = ..., version: _Optional[str] = ..., supports_nvproxy: _Optional[bool] = ..., gpu_checkpoint: _Optional[bool] = ..., gpu_remap: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class ListDevicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListDevicesResponse(_message.Message):
    __slots__ = ("devices", "spec_dirs", "spec_errors", "conflicts", "warnings")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIRS_FIELD_NUMBER: _ClassVar[int]
    SPEC_ERRORS_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[CdiDevice]
    spec_dirs: _containers.RepeatedScalarFieldContainer[str]
    spec_errors: _containers.RepeatedScalarFieldContainer[str]
    conflicts: _containers.RepeatedScalarFieldContainer[str]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, devices: _Optional[_Iterable[_Union[CdiDevice, _Mapping]]] = ..., spec_dirs: _Optional[_Iterable[str]] = ..., spec_errors: _Optional[_Iterable[str]] = ..., conflicts: _Optional[_Iterable[str]] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class CdiDevice(_message.Message):
    __slots__ = ("qualified_name", "kind", "spec_path", "device_nodes", "device", "priority")
    QUALIFIED_NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SPEC_PATH_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NODES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    qualified_name: str
    kind: str
    spec_path: str
    device_nodes: _containers.RepeatedScalarFieldContainer[str]
    device: str
    priority: int
    def __init__(self, qualified_name: _Optional[str] = ..., kind: _Optional[str] = ..., spec_path: _Optional[str] = ..., device_nodes: _Optional[_Iterable[str]] = ..., device: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class PlanInjectionRequest(_message.Message):
    __slots__ = ("bundle_dir", "devices")
    BUNDLE_DIR_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    bundle_dir: str
    devices: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, bundle_dir: _Optional[str] = ..., devices: _Optional[_Iterable[str]] = ...) -> None: ...

class PlanInjectionResponse(_message.Message):
    __slots__ = ("devices", "diff")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedScalarFieldContainer[str]
    diff: str
    def __init__(self, devices: _Optional[_Iterable[str]] = ..., diff: _Optional[str] = ...) -> None: ...

class DoctorRequest(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, devices: _Optional[_Iterable[str]] = ...) -> None: ...

class DoctorResponse(_message.Message):
    __slots__ = ("ok", "checks")
    OK_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    checks: _containers.RepeatedCompositeFieldContainer[DoctorCheck]
    def __init__(self, ok: _Optional[bool] = ..., checks: _Optional[_Iterable[_Union[DoctorCheck, _Mapping]]] = ...) -> None: ...

class DoctorCheck(_message.Message):
    __slots__ = ("name", "status", "summary", "fix", "details")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    FIX_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    name: str
    status: DoctorStatus
    summary: str
    fix: str
    details: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., status: _Optional[_Union[DoctorStatus, str]] = ..., summary: _Optional[str] = ..., fix: _Optional[str] = ..., details: _Optional[_Iterable[str]] = ...) -> None: ...
