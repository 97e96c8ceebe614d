"""Hand-written facts of a healthy GPU worker: every check PASSes on them."""

from __future__ import annotations

from ateom.cdi.model import ContainerEdits, DeviceNode, EditStep, Resolution
from ateom.doctor.config import DoctorConfig
from ateom.doctor.facts import (
    CgroupMount,
    DirFact,
    Facts,
    InjectionFact,
    LibraryFact,
    MpsFact,
    NodeFact,
    RunscFact,
    SpecFact,
    SpecNodeFact,
    ToolFact,
    UsernsFact,
)
from ateom.gpuinfo.cuda_checkpoint import CudaCheckpointFacts, CudaCheckpointHelp
from ateom.gpuinfo.inventory import GpuFacts, WorkerGpus

HELP_590 = CudaCheckpointHelp(
    "590.44.01",
    frozenset({"get-state", "action", "toggle", "get-restore-tid", "launch-job", "pid",
               "timeout", "help"}),
    frozenset({"lock", "checkpoint", "restore", "unlock"}))


def H200(index: int, minor: int) -> GpuFacts:  # noqa: N802 - reads as the model it makes
    return GpuFacts(index, minor, f"GPU-a0000000-0000-4000-8000-00000000000{minor}",
                    "NVIDIA H200", f"0000:{0x59 + minor:02x}:00.0", 0x10DE, 0x2335, 143771)


RESOLUTION = Resolution(
    ("nvidia.com/gpu=all",),
    (EditStep("nvidia.com/gpu=all", "/etc/cdi/nvidia.json", ContainerEdits()),),
)
GPU0 = DeviceNode("/dev/nvidia0", type="c", major=195, minor=0)


def healthy() -> Facts:
    # The example Pod's global flags, in a container whose cgroupfs is read-only.
    config = DoctorConfig(runsc_global_flags=("--ignore-cgroups", "--network=none"))
    return Facts(
        config=config,
        gpu_nodes=(NodeFact("/dev/nvidia0", "c", 195, 0), NodeFact("/dev/nvidia3", "c", 195, 3)),
        control_nodes=(NodeFact("/dev/nvidiactl", "c", 195, 255),
                       NodeFact("/dev/nvidia-uvm", "c", 510, 0)),
        driver_root=DirFact("/usr/local/nvidia", True),
        driver_lib_dir=DirFact("/usr/local/nvidia/lib64", True),
        driver_bin_dir=DirFact("/usr/local/nvidia/bin", True),
        toolkit_dir=DirFact("/opt/nvidia-toolkit", True),
        tools=(
            ToolFact("nvidia-cdi-hook", "/opt/nvidia-toolkit/nvidia-cdi-hook.real", True, True,
                     is_real=True),
            ToolFact("nvidia-ctk", "/opt/nvidia-toolkit/nvidia-ctk.real", True, True,
                     is_real=True),
        ),
        spec=SpecFact(files=("/etc/cdi/nvidia.json",), devices=("nvidia.com/gpu=all",),
                      resolution=RESOLUTION, mps=MpsFact(devices_scanned=3)),
        spec_nodes=(SpecNodeFact("nvidia.com/gpu=all", GPU0, NodeFact("/dev/nvidia0", "c", 195,
                                                                        0)),),
        libraries=(
            LibraryFact("x", "/usr/local/nvidia/lib64/libcuda.so.580.65.06",
                        "/usr/local/nvidia/lib64/libcuda.so.580.65.06", True, "libcuda.so.1"),
            LibraryFact("x", "/usr/local/nvidia/lib64/libnvidia-tls.so.580.65.06",
                        "/usr/local/nvidia/lib64/libnvidia-tls.so.580.65.06", True,
                        "libnvidia-tls.so.580.65.06"),
        ),
        runsc=RunscFact("/usr/local/bin/runsc", True, "release-20260817.0",
                        supports_nvproxy=True, supported_drivers=("580.65.06",),
                        cuda_checkpoint_path=True, cuda_checkpoint_sequential=True),
        host_driver_version="580.65.06",
        injection=InjectionFact(
            env=("PATH=/bin", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64"),
            symlinks=(("/usr/local/nvidia/lib64/libcuda.so.1", "libcuda.so.580.65.06"),
                      ("/usr/local/nvidia/lib64/libnvidia-ml.so.1", "libnvidia-ml.so.580.65.06")),
        ),
        worker_gpus=WorkerGpus("580.65.06", (H200(0, 0), H200(1, 3)),
                               sources=("/proc/driver/nvidia", "/usr/local/nvidia/bin/nvidia-smi")),
        cuda_checkpoint=CudaCheckpointFacts(
            ("/usr/local/nvidia/bin", "/opt/nvidia-toolkit", "$PATH"),
            "/usr/local/nvidia/bin/cuda-checkpoint", executable=True, help=HELP_590),
        userns=UsernsFact(probed=True, chroot=False, max_user_namespaces=15000),
        cgroups=(CgroupMount("/sys/fs/cgroup", "cgroup2", readonly=True),),
        daemon_dirs=(("--actors-root", "/var/lib/ateom/actors", ""),
                     ("--run-dir", "/run/ateom", "")),
    )
