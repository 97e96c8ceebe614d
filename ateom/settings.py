"""The node's GPU settings: one definition of where the driver, the toolkit, the
CDI specs and the Pod's GPU device nodes are, shared by every part of ateom.

`ateom serve` (flags with these environment twins), `ateom doctor`,
`ateom inject` and `ateom cdi` all read the same names with the same
defaults, so each inspects exactly what the daemon uses. The value is passed
around typed (`NodeSettings`); nothing writes it back into an environment
dict to be parsed again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_DRIVER_ROOT = "/usr/local/nvidia"
DEFAULT_TOOLKIT_DIR = "/opt/nvidia-toolkit"
DEFAULT_SPEC_DIRS: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
DEFAULT_GPU_GLOB = "/dev/nvidia[0-9]*"

DRIVER_ROOT_ENV = "ATEOM_NVIDIA_DRIVER_ROOT"
TOOLKIT_DIR_ENV = "ATEOM_NVIDIA_TOOLKIT_DIR"
SPEC_DIRS_ENV = "ATEOM_CDI_SPEC_DIRS"  # colon-separated, like PATH
GPU_GLOB_ENV = "ATEOM_GPU_GLOB"


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """Where this node's GPU pieces are.

    driver_root: the driver's files as mounted in the worker (``bin/``,
        ``lib64/``): nvidia-ctk's library search path, the directory injected
        containers' LD_LIBRARY_PATH leads with, where nvidia-smi and
        cuda-checkpoint are looked for.
    toolkit_dir: the NVIDIA container toolkit: kept CDI hooks run its
        ``nvidia-cdi-hook(.real)``; nvidia-ctk is looked for here first.
    spec_dirs: CDI spec directories, lowest priority first.
    gpu_glob: the Pod has GPUs when this matches (its device nodes).
    """

    driver_root: str = DEFAULT_DRIVER_ROOT
    toolkit_dir: str = DEFAULT_TOOLKIT_DIR
    spec_dirs: tuple[str, ...] = DEFAULT_SPEC_DIRS
    gpu_glob: str = DEFAULT_GPU_GLOB

    @property
    def driver_lib_dir(self) -> str:
        return os.path.join(self.driver_root, "lib64")

    @property
    def driver_bin_dir(self) -> str:
        return os.path.join(self.driver_root, "bin")

    @property
    def dev_dir(self) -> str:
        """The directory of the GPU device nodes (and of nvidiactl, nvidia-uvm)."""
        return os.path.dirname(self.gpu_glob) or "/dev"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> NodeSettings:
        """The settings the ``ATEOM_*`` variables name, defaults for the rest (pure)."""
        return cls(
            driver_root=environ.get(DRIVER_ROOT_ENV) or DEFAULT_DRIVER_ROOT,
            toolkit_dir=environ.get(TOOLKIT_DIR_ENV) or DEFAULT_TOOLKIT_DIR,
            spec_dirs=split_spec_dirs(environ.get(SPEC_DIRS_ENV, "")) or DEFAULT_SPEC_DIRS,
            gpu_glob=environ.get(GPU_GLOB_ENV) or DEFAULT_GPU_GLOB,
        )


def split_spec_dirs(value: str) -> tuple[str, ...]:
    """``/etc/cdi:/var/run/cdi`` -> the dirs, empty entries dropped (pure)."""
    return tuple(d for d in value.split(":") if d)
