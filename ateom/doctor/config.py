"""Where the doctor looks: every root it inspects, so tests can point it at a fixture.

Defaults are the daemon's: the same environment variables, read the same way,
so `ateom doctor` in a worker Pod inspects exactly what `ateom serve` will use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ateom.errors import AteomError, ErrorCode, quote
from ateom.settings import (
    DEFAULT_DRIVER_ROOT,
    DEFAULT_GPU_GLOB,
    DEFAULT_SPEC_DIRS,
    DEFAULT_TOOLKIT_DIR,
    NodeSettings,
)

DEFAULT_DEVICES = ("nvidia.com/gpu=all",)
DEFAULT_GPU_PLACEMENT = "shared"  # the daemon's --gpu-placement default
# nvproxy needs these two; nvidia-uvm-tools and nvidia-modeset are optional.
CONTROL_NODE_NAMES = ("nvidiactl", "nvidia-uvm")
# The libraries without which CUDA cannot start: their SONAME links are the
# ones a workload's loader looks up first.
CORE_LIBRARY_SONAMES = ("libcuda.so.1", "libnvidia-ml.so.1")


@dataclass(frozen=True, slots=True)
class DoctorConfig:
    """The roots and settings one doctor run inspects.

    control_nodes: the control device nodes nvproxy needs; default, the
        `CONTROL_NODE_NAMES` in the GPU glob's directory.
    devices: the qualified CDI names resolved and dry-run injected (what a
        GPU actor gets by default: every GPU of the Pod).
    proc_driver_version: the kernel module's version file, read for the host
        driver version (falls back to libcuda's file name under lib64);
        "" for ``<proc_root>/driver/nvidia/version``.
    proc_root: where the NVIDIA module's /proc files are read for the GPU
        inventory (`ateom.gpuinfo`); a fixture tree in tests.
    nvidia_smi: the nvidia-smi to ask for PCI ids and memory; "" to look in
        the driver root's bin/, then $PATH, as the daemon does.
    cuda_checkpoint: NVIDIA's cuda-checkpoint as configured for the daemon
        (``--cuda-checkpoint``); "" to look for it where the daemon looks. A
        configured one means GPU checkpoints are expected: what they lack FAILs.
    gpu_placement, max_actors: the daemon's ``--gpu-placement`` (checked, not
        parsed, here: a bad value is a finding) and ``--max-actors``.
    generate_timeout / probe_timeout: seconds allowed for nvidia-ctk cdi
        generate / for each runsc command; after one runsc command times out
        the rest are not run.
    """

    gpu_glob: str = DEFAULT_GPU_GLOB
    driver_root: str = DEFAULT_DRIVER_ROOT
    toolkit_dir: str = DEFAULT_TOOLKIT_DIR
    spec_dirs: tuple[str, ...] = DEFAULT_SPEC_DIRS
    runsc: str = "runsc"
    nvproxy_driver_version: str = ""
    nvproxy_capabilities: str = ""
    devices: tuple[str, ...] = DEFAULT_DEVICES
    control_nodes: tuple[str, ...] = ()
    proc_driver_version: str = ""
    proc_root: str = "/proc"
    nvidia_smi: str = ""
    cuda_checkpoint: str = ""
    gpu_placement: str = DEFAULT_GPU_PLACEMENT
    max_actors: int = 1
    generate_timeout: float = 60.0
    # Each runsc probe command (--version, flags, help, list-supported-drivers)
    # answers in well under a second; a wedged binary must not wedge the doctor.
    probe_timeout: float = 10.0

    @property
    def driver_version_file(self) -> str:
        return self.proc_driver_version or os.path.join(self.proc_root, "driver", "nvidia",
                                                        "version")

    @property
    def checkpoint_expected(self) -> bool:
        """The operator named a cuda-checkpoint: GPU checkpoints are part of this
        worker's job, so what they need FAILs when missing (else it WARNs)."""
        return bool(self.cuda_checkpoint)

    @property
    def node(self) -> NodeSettings:
        """The four node settings as the daemon's `NodeSettings` (one place that
        derives the driver's lib64/bin and the device dir from them)."""
        return NodeSettings(self.driver_root, self.toolkit_dir, self.spec_dirs, self.gpu_glob)

    @property
    def dev_dir(self) -> str:
        return self.node.dev_dir

    @property
    def control_node_paths(self) -> tuple[str, ...]:
        if self.control_nodes:
            return self.control_nodes
        return tuple(os.path.join(self.dev_dir, n) for n in CONTROL_NODE_NAMES)

    @property
    def driver_lib_dir(self) -> str:
        return self.node.driver_lib_dir

    @property
    def driver_bin_dir(self) -> str:
        return self.node.driver_bin_dir


def _first(environ: Mapping[str, str], *names: str) -> str:
    for name in names:
        if environ.get(name):
            return environ[name]
    return ""


def config_from_env(environ: Mapping[str, str] = os.environ) -> DoctorConfig:
    """The daemon's settings from its ``ATEOM_*`` variables (pure over `environ`).

    The same names `ateom serve` reads for its flags' twins (and the CDI
    registry and injector for their own): ``ATEOM_CDI_SPEC_DIRS`` (split on
    ``:`` like PATH), ``ATEOM_NVIDIA_DRIVER_ROOT``, ``ATEOM_NVIDIA_TOOLKIT_DIR``,
    ``ATEOM_CUDA_CHECKPOINT``, ``ATEOM_GPU_PLACEMENT``, ``ATEOM_MAX_ACTORS``.
    Raises AteomError (INVALID_ARGUMENT) for a max-actors that is not a
    number, as ``ateom serve`` refuses to start with it.
    """
    node = NodeSettings.from_env(environ)  # the four node settings, as the daemon reads them
    max_actors = _first(environ, "ATEOM_MAX_ACTORS") or "1"
    try:
        actors = int(max_actors)
    except ValueError:
        raise AteomError(f"$ATEOM_MAX_ACTORS={quote(max_actors)}: not a number",
                         code=ErrorCode.INVALID_ARGUMENT) from None
    return DoctorConfig(
        gpu_glob=node.gpu_glob,
        driver_root=node.driver_root,
        toolkit_dir=node.toolkit_dir,
        spec_dirs=node.spec_dirs,
        runsc=_first(environ, "ATEOM_RUNSC") or "runsc",
        nvproxy_driver_version=_first(environ, "ATEOM_NVPROXY_DRIVER_VERSION"),
        nvproxy_capabilities=_first(environ, "ATEOM_NVPROXY_CAPABILITIES"),
        cuda_checkpoint=_first(environ, "ATEOM_CUDA_CHECKPOINT"),
        gpu_placement=_first(environ, "ATEOM_GPU_PLACEMENT") or DEFAULT_GPU_PLACEMENT,
        max_actors=actors,
    )
