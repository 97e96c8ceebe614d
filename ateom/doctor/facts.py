"""What the doctor learned about the machine: plain frozen data, no I/O.

`ateom.doctor.gather` fills these in (stat, ELF, runsc, a dry-run
injection); `ateom.doctor.checks` judges them. Keeping the two apart means
every verdict can be tested from hand-written facts, and every probe of the
machine happens in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from ateom.cdi.model import DeviceNode, Resolution
from ateom.doctor.config import DoctorConfig
from ateom.gpuinfo.cuda_checkpoint import CudaCheckpointFacts
from ateom.gpuinfo.inventory import WorkerGpus
from ateom.gpuinfo.mps import MpsVerdict
from ateom.runsc.host import CgroupMount
from ateom.worker.capacity import Capacity


@dataclass(frozen=True, slots=True)
class NodeFact:
    """One device node as the host has it. `kind` is None when it does not exist."""

    path: str
    kind: str | None = None  # "c", "b", or "other" (a file or dir where a node should be)
    major: int | None = None
    minor: int | None = None
    error: str = ""  # why stat failed, when it did

    @property
    def exists(self) -> bool:
        return self.kind is not None


@dataclass(frozen=True, slots=True)
class DirFact:
    path: str
    is_dir: bool


@dataclass(frozen=True, slots=True)
class ToolFact:
    """A toolkit binary as ateom would run it: the ``.real`` one when present."""

    name: str  # "nvidia-cdi-hook", "nvidia-ctk"
    path: str  # the chosen file
    exists: bool
    executable: bool = False
    is_real: bool = False  # the chosen file is ``<name>.real``
    is_script: bool = False  # starts with "#!": a wrapper needing a shell


@dataclass(frozen=True, slots=True)
class MpsFact:
    """NVIDIA MPS in the spec dirs' devices (`ateom.gpuinfo.mps`)."""

    default: MpsVerdict = MpsVerdict()  # in the resolution of DoctorConfig.devices
    others: MpsVerdict = MpsVerdict()  # in every other device of the spec dirs
    devices_scanned: int = 0


@dataclass(frozen=True, slots=True)
class SpecFact:
    """The CDI spec for the doctor's device kind, found in the spec dirs or generated."""

    files: tuple[str, ...] = ()  # spec files that define the kind
    errors: tuple[str, ...] = ()  # every invalid spec file in the dirs: "path: field: reason"
    generated_by: str = ""  # nvidia-ctk path, when the spec was generated for this run
    generate_error: str = ""  # why generation failed or was impossible
    devices: tuple[str, ...] = ()  # qualified names the registry knows
    resolution: Resolution | None = None  # of DoctorConfig.devices
    resolve_error: str = ""
    mps: MpsFact | None = None  # None when no spec dir could be read


@dataclass(frozen=True, slots=True)
class SpecNodeFact:
    """A device node a resolved spec asks for, and what the host has at its host path."""

    origin: str  # qualified device name or "<kind> (spec-level)"
    declared: DeviceNode
    host: NodeFact


@dataclass(frozen=True, slots=True)
class LibraryFact:
    """A library mount of the resolved spec and its source's SONAME."""

    origin: str
    host_path: str
    container_path: str
    exists: bool  # a regular file (through symlinks) is there
    soname: str | None = None
    # Why the SONAME could not be read; when not `exists`, what is there instead
    # ("No such file or directory", "a directory, not a regular file", ...).
    error: str = ""
    special: bool = False  # a FIFO, socket or device: reading it may block


@dataclass(frozen=True, slots=True)
class RunscFact:
    path: str
    found: bool
    version: str = ""
    error: str = ""
    supports_nvproxy: bool = False
    # (flag, supported) for each nvproxy flag ateom would pass as configured.
    flags: tuple[tuple[str, bool], ...] = ()
    # Versions `runsc nvproxy list-supported-drivers` prints; None when runsc lacks it.
    supported_drivers: tuple[str, ...] | None = None
    # `runsc checkpoint` flags for GPU checkpoints (`runsc help checkpoint`).
    cuda_checkpoint_path: bool = False
    cuda_checkpoint_sequential: bool = False
    # The daemon's --runsc-global-flag values this runsc does not know.
    unknown_global_flags: tuple[str, ...] = ()
    # Why this runsc cannot take an actor's network namespace here ("" when it can).
    netns_problem: str = ""


@dataclass(frozen=True, slots=True)
class UsernsFact:
    """Whether a child process could make a user namespace, as runsc must."""

    probed: bool
    error: str = ""  # strerror of unshare(CLONE_NEWUSER), "" when it worked
    chroot: bool | None = None  # / is not PID 1's root (None: could not tell)
    max_user_namespaces: int | None = None
    map_error: str = ""  # writing the new namespace's uid_map/gid_map failed: why
    capabilities: int | None = None  # the probe's effective capability mask


@dataclass(frozen=True, slots=True)
class InjectionFact:
    """A dry-run injection of the doctor's devices into a scratch bundle."""

    error: str = ""
    skipped: str = ""  # why no dry run was attempted (the check names it)
    env: tuple[str, ...] = ()  # process.env after injection
    symlinks: tuple[tuple[str, str], ...] = ()  # (link path inside the rootfs, target)


@dataclass(frozen=True, slots=True)
class Facts:
    config: DoctorConfig
    gpu_nodes: tuple[NodeFact, ...]
    control_nodes: tuple[NodeFact, ...]
    driver_root: DirFact
    driver_lib_dir: DirFact
    driver_bin_dir: DirFact
    toolkit_dir: DirFact
    tools: tuple[ToolFact, ...]
    spec: SpecFact
    spec_nodes: tuple[SpecNodeFact, ...]
    libraries: tuple[LibraryFact, ...]
    runsc: RunscFact
    host_driver_version: str = ""  # "" when unknown
    injection: InjectionFact | None = None  # None when there was nothing to inject
    # The Pod's GPUs from /proc and nvidia-smi; None when not gathered (hand-written facts).
    worker_gpus: WorkerGpus | None = None
    cuda_checkpoint: CudaCheckpointFacts | None = None  # None when not probed
    userns: UsernsFact | None = None  # None when not probed
    cgroups: tuple[CgroupMount, ...] | None = None  # None when mountinfo was unreadable
    # (flag, path, why unusable or "") for --actors-root and --run-dir; () when not looked at.
    daemon_dirs: tuple[tuple[str, str, str], ...] = ()
    # The worker container's limits (downward API); None when not read.
    capacity: Capacity | None = None

    @property
    def driver_version(self) -> str:
        """The kernel module's version as the inventory read it, else the doctor's own."""
        found = self.worker_gpus.driver_version if self.worker_gpus is not None else ""
        return found or self.host_driver_version
