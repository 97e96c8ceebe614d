"""This worker's GPUs, what a GPU checkpoint needs to be restored, and cuda-checkpoint.

- `inventory`: the facts of the Pod's GPUs (driver version, model, UUID, minor,
  PCI ids, memory), parsed from /proc/driver/nvidia and nvidia-smi and joined;
  `gather`: reads them off the machine.
- `record`: the compatibility record written beside a checkpoint image
  (``ateom-compat.json``) and its strict parser.
- `compat`: may a checkpoint be restored here, and onto which GPUs.
- `cuda_checkpoint`: find and probe NVIDIA's cuda-checkpoint and judge the driver.
- `placement`: the pure GPU placer (which actor holds which of the Pod's
  GPUs; exclusive or shared), the daemon's `gpus.placement` books through it.
- `nvidia_ctk`: generating a CDI spec with NVIDIA's nvidia-ctk when the node
  has GPUs but no spec.
- `nvproxy`: gVisor's GPU vocabulary in one place: the GPU kind and names, MIG,
  the control nodes, what runsc's nvproxy can pass through, the device view an
  actor's containers choose from and the tools its GPU containers get.
- `mps`: NVIDIA MPS in a CDI spec, which gVisor actors cannot use.
- `cli`: ``ateom checkpoint-info``, a checkpoint's record and whether this
  worker could restore it.

Pure cores, thin gatherers: every judgement is a function over facts, so it
is tested without a GPU; `tests.support.gpu_node` simulates a GPU node for
the gatherers.
"""

from ateom.gpuinfo.compat import (
    GpuMapping,
    Placement,
    Refusal,
    RestoreVerdict,
    check_restore,
    place_restore,
    runsc_remaps_gpus,
)
from ateom.gpuinfo.cuda_checkpoint import (
    CheckpointMode,
    CudaCheckpointFacts,
    CudaCheckpointHelp,
    Judgement,
    checkpoint_mode,
    judge_binary,
    judge_driver,
    parse_help,
    probe,
)
from ateom.gpuinfo.gather import DEFAULT_GPU_GLOB, find_nvidia_smi, gather_worker_gpus
from ateom.gpuinfo.inventory import (
    FactConflict,
    GpuFacts,
    GpuInfoError,
    WorkerGpus,
    driver_major,
)
from ateom.gpuinfo.record import (
    RECORD_FILE,
    CompatRecord,
    ContainerDevices,
    ParsedRecord,
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

__all__ = [
    "DEFAULT_GPU_GLOB",
    "RECORD_FILE",
    "CheckpointMode",
    "CompatRecord",
    "ContainerDevices",
    "CudaCheckpointFacts",
    "CudaCheckpointHelp",
    "FactConflict",
    "GpuFacts",
    "GpuInfoError",
    "GpuMapping",
    "Judgement",
    "ParsedRecord",
    "Placement",
    "RecordError",
    "Refusal",
    "RestoreVerdict",
    "RunscBuild",
    "WorkerGpus",
    "build_record",
    "check_restore",
    "checkpoint_mode",
    "driver_major",
    "edits_digest",
    "find_nvidia_smi",
    "gather_worker_gpus",
    "judge_binary",
    "judge_driver",
    "parse_help",
    "parse_record",
    "parse_runsc_version",
    "place_restore",
    "probe",
    "read_record",
    "record_json",
    "runsc_remaps_gpus",
    "write_record",
]
