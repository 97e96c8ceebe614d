"""The node's settings, each defined once and shared by every part of ateom.

`NodeSettings`: where the driver, the toolkit, the CDI specs and the Pod's
GPU device nodes are. `GpuSettings`: how this worker runs GPU actors —
cuda-checkpoint, the nvproxy options, the placement policy, where the
kernel module's GPU facts are read. `ateom serve` (flags with these
environment twins), `ateom doctor`, `ateom checkpoint-info`, `ateom inject`
and `ateom cdi` all read the same names with the same defaults, so each
inspects exactly what the daemon uses. The values are passed around typed;
nothing writes them back into an environment dict to be parsed again.
"""

from __future__ import annotations

import enum
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field

from ateom.errors import AteomError, ErrorCode

DEFAULT_DRIVER_ROOT = "/usr/local/nvidia"
DEFAULT_TOOLKIT_DIR = "/opt/nvidia-toolkit"
DEFAULT_SPEC_DIRS: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
DEFAULT_GPU_GLOB = "/dev/nvidia[0-9]*"

DRIVER_ROOT_ENV = "ATEOM_NVIDIA_DRIVER_ROOT"
TOOLKIT_DIR_ENV = "ATEOM_NVIDIA_TOOLKIT_DIR"
SPEC_DIRS_ENV = "ATEOM_CDI_SPEC_DIRS"  # colon-separated, like PATH
GPU_GLOB_ENV = "ATEOM_GPU_GLOB"

DEFAULT_PROC_ROOT = "/proc"
DEFAULT_CUDA_CHECKPOINT_TIMEOUT = 300.0
DEFAULT_GPU_PLACEMENT = "shared"

CUDA_CHECKPOINT_ENV = "ATEOM_CUDA_CHECKPOINT"
CUDA_CHECKPOINT_TIMEOUT_ENV = "ATEOM_CUDA_CHECKPOINT_TIMEOUT"
NVPROXY_DRIVER_VERSION_ENV = "ATEOM_NVPROXY_DRIVER_VERSION"
NVPROXY_CAPABILITIES_ENV = "ATEOM_NVPROXY_CAPABILITIES"
GPU_PLACEMENT_ENV = "ATEOM_GPU_PLACEMENT"
PROC_ROOT_ENV = "ATEOM_PROC_ROOT"
# Global runsc flags for every call, space-separated (`ateom serve --runsc-global-flag`).
RUNSC_GLOBAL_FLAGS_ENV = "ATEOM_RUNSC_GLOBAL_FLAGS"
# The daemon's own directories (`ateom serve --actors-root`, `--run-dir`), which
# `ateom doctor` checks too.
ACTORS_ROOT_ENV = "ATEOM_ACTORS_ROOT"
RUN_DIR_ENV = "ATEOM_RUN_DIR"
DEFAULT_RUN_DIR = "/run/ateom"


def runsc_global_flags_from_env(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The global runsc flags $ATEOM_RUNSC_GLOBAL_FLAGS names, as `ateom serve` splits them."""
    return tuple(environ.get(RUNSC_GLOBAL_FLAGS_ENV, "").split())


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


def unusable_dir(path: str, *, writable: bool = False, creatable: bool = False) -> str:
    """Why `path` cannot serve as one of the daemon's directories ("" when it can;
    stats it). `writable`: ateom writes in it (a read-only mount will not do);
    `creatable`: one that does not exist yet is fine if its nearest existing
    parent is a directory ateom could make it in."""
    if not path:
        return "not set"
    if not os.path.isabs(path):
        return "not an absolute path"
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if not creatable:
            return "does not exist"
        parent = os.path.dirname(path)
        while parent != os.path.dirname(parent) and not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        why = unusable_dir(parent, writable=True)
        return f"does not exist, and cannot be made ({parent}: {why})" if why else ""
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if writable and not os.access(path, os.W_OK | os.X_OK):
        return "not writable (a read-only mount, or its permissions)"
    return ""


def split_spec_dirs(value: str) -> tuple[str, ...]:
    """``/etc/cdi:/var/run/cdi`` -> the dirs, empty entries dropped (pure)."""
    return tuple(d for d in value.split(":") if d)


@dataclass(frozen=True, slots=True)
class NvproxyOptions:
    """What runsc's nvproxy is told: the driver ABI to speak
    (``--nvproxy-driver-version``, "" for the host's) and the driver
    capabilities containers may use (``--nvproxy-allowed-driver-capabilities``)."""

    driver_version: str = ""
    capabilities: str = ""


@dataclass(frozen=True, slots=True)
class GpuSettings:
    """How this worker runs GPU actors.

    cuda_checkpoint: NVIDIA's cuda-checkpoint as the operator named it; ""
        to look for it in the driver root's bin/, the toolkit dir, then $PATH.
    cuda_checkpoint_timeout: seconds a GPU actor's checkpoint may take.
    nvproxy: passed to every runsc call of a GPU sandbox.
    placement: ``--gpu-placement`` as given (`placement_settings` parses it:
        the daemon refuses a bad one at start, the doctor reports it).
    proc_root: where the NVIDIA kernel module's GPU facts are read
        (``<root>/driver/nvidia/...``); a fixture tree in tests.
    """

    cuda_checkpoint: str = ""
    cuda_checkpoint_timeout: float = DEFAULT_CUDA_CHECKPOINT_TIMEOUT
    nvproxy: NvproxyOptions = field(default_factory=NvproxyOptions)
    placement: str = DEFAULT_GPU_PLACEMENT
    proc_root: str = DEFAULT_PROC_ROOT

    @property
    def placement_settings(self) -> PlacementSettings:
        """The parsed policy (AteomError INVALID_ARGUMENT naming --gpu-placement)."""
        return parse_placement(self.placement)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> GpuSettings:
        """The settings the ``ATEOM_*`` variables name, defaults for the rest (pure).
        A timeout that is not a number is INVALID_ARGUMENT, as `ateom serve` refuses it."""
        raw_timeout = environ.get(CUDA_CHECKPOINT_TIMEOUT_ENV) or ""
        try:
            timeout = float(raw_timeout) if raw_timeout else DEFAULT_CUDA_CHECKPOINT_TIMEOUT
        except ValueError:
            raise AteomError(f"${CUDA_CHECKPOINT_TIMEOUT_ENV}={raw_timeout!r}: not a number",
                             code=ErrorCode.INVALID_ARGUMENT) from None
        return cls(
            cuda_checkpoint=environ.get(CUDA_CHECKPOINT_ENV) or "",
            cuda_checkpoint_timeout=timeout,
            nvproxy=NvproxyOptions(environ.get(NVPROXY_DRIVER_VERSION_ENV) or "",
                                   environ.get(NVPROXY_CAPABILITIES_ENV) or ""),
            placement=environ.get(GPU_PLACEMENT_ENV) or DEFAULT_GPU_PLACEMENT,
            proc_root=environ.get(PROC_ROOT_ENV) or DEFAULT_PROC_ROOT,
        )


class PlacementPolicy(enum.Enum):
    EXCLUSIVE = "exclusive"
    SHARED = "shared"


def _invalid(message: str) -> AteomError:
    return AteomError(message, code=ErrorCode.INVALID_ARGUMENT)


@dataclass(frozen=True, slots=True)
class PlacementSettings:
    """The policy and, for shared, the most actors per GPU (0: no cap)."""

    policy: PlacementPolicy = PlacementPolicy.SHARED
    cap: int = 0

    def __post_init__(self) -> None:
        if self.cap < 0 or (self.policy is PlacementPolicy.EXCLUSIVE and self.cap):
            raise _invalid(f"gpu placement {self.policy.value} with cap {self.cap}: a cap is"
                           " a whole number >= 1 and only for shared")

    @property
    def per_gpu_limit(self) -> int | None:
        """Most holders of one GPU; None when unlimited."""
        if self.policy is PlacementPolicy.EXCLUSIVE:
            return 1
        return self.cap or None

    def __str__(self) -> str:
        """The flag's spelling, which GetStatus shows too."""
        return f"{self.policy.value}:{self.cap}" if self.cap else self.policy.value


DEFAULT_PLACEMENT = PlacementSettings()  # what DEFAULT_GPU_PLACEMENT parses to


def as_typed(name: str, value: object) -> str:
    """A setting's value as the user typed it, for an error: ``$ATEOM_X='v'`` for an
    environment twin, ``--x 'v'`` for a flag."""
    return f"{name}={value!r}" if name.startswith("$") else f"{name} {value!r}"


def parse_placement(value: str, *, field: str = "--gpu-placement") -> PlacementSettings:
    """``exclusive``, ``shared`` or ``shared:N`` (N >= 1 actors per GPU).

    One value rather than a second cap flag: the cap means nothing without
    shared, and one string reads back unchanged in GetStatus. `field` is how the
    user gave it (``--gpu-placement`` or ``$ATEOM_GPU_PLACEMENT``), for the error.
    """
    said = as_typed(field, value)
    policy_text, sep, cap_text = value.strip().partition(":")
    try:
        policy = PlacementPolicy(policy_text.lower())
    except ValueError:
        raise _invalid(f"{said}: must be exclusive, shared or shared:N") from None
    if not sep:
        return PlacementSettings(policy)
    if policy is PlacementPolicy.EXCLUSIVE:
        raise _invalid(f"{said}: exclusive takes no cap (one actor per GPU)")
    if not (cap_text.isascii() and cap_text.isdigit()) or int(cap_text) < 1:
        raise _invalid(f"{said}: the cap after 'shared:' must be a whole number"
                       " >= 1 (actors per GPU)")
    return PlacementSettings(policy, int(cap_text))
