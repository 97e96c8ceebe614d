"""Does a CDI device ask for NVIDIA MPS sharing, which a gVisor sandbox cannot use? (pure)

MPS (Multi-Process Service) lets processes share one GPU through a host
daemon: ``nvidia-cuda-mps-control`` starts an ``nvidia-cuda-mps-server``,
and a CUDA client finds them through UNIX sockets and named pipes in its
*pipe directory* (``$CUDA_MPS_PIPE_DIRECTORY``, default ``/tmp/nvidia-mps``)
and shares memory with the server through ``/dev/shm``. NVIDIA's DRA driver
writes exactly that into a claim's CDI edits
(NVIDIA/k8s-dra-driver-gpu, ``cmd/gpu-kubelet-plugin/sharing.go``,
``MpsControlDaemon.GetCDIContainerEdits``; the same in the older
NVIDIA/k8s-dra-driver ``cmd/nvidia-dra-plugin/sharing.go``)::

    env:    CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps
    mounts: /dev/shm        <- <MpsRoot>/<claim>-<hash>/shm   (rw, nosuid, nodev, bind)
            /tmp/nvidia-mps <- <MpsRoot>/<claim>-<hash>/pipe  (rw, nosuid, nodev, bind)

(``MpsRoot`` is the kubelet plugin's ``.../mps`` directory; the shm dir is a
tmpfs the driver mounts on the host.) Inside gVisor the Sentry implements
UNIX sockets, pipes and shared memory itself, so a client in the sandbox
cannot reach the host's MPS server through those mounts: ateom refuses such
a device for a gVisor actor up front rather than let CUDA fail (or quietly
run without the sharing the claim promised) inside it.

What counts, and why:

- ``CUDA_MPS_PIPE_DIRECTORY`` or ``CUDA_MPS_LOG_DIRECTORY`` in the env:
  only MPS clients and daemons read them;
- a mount at the pipe directory (the env's value, else CUDA's default
  ``/tmp/nvidia-mps``): a client connects there even without the env;
- a bind mount of a host directory at ``/dev/shm``: reported, but *not* MPS
  by itself. NCCL and other multi-process workloads get a larger /dev/shm
  the same way, and inside one sandbox that works; only beside one of the
  two signals above is it MPS's shared memory.

Other ``CUDA_MPS_*`` variables (active thread percentage, pinned memory
limit) only tune a client that found a server; alone they change nothing,
so they are not counted.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ateom.cdi.model import ContainerEdits, EditStep, Mount, Resolution
from ateom.errors import AteomError, ErrorCode, quote

PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"  # CUDA's default when the env is unset
SHM_DIR = "/dev/shm"
# The slug the daemon counts refusals of such devices under (ateom.daemon.calls.refusals).
REFUSAL_REASON = "mps_device"
_MAX_LISTED = 6  # findings named in one message; the rest are counted

Signal = Literal["env", "pipe-mount", "shm-bind"]

WHY_GVISOR = (
    "MPS clients reach the host's nvidia-cuda-mps-server through UNIX sockets and pipes in "
    "the pipe directory and shared memory in /dev/shm, which gVisor's Sentry implements "
    "itself: from inside the sandbox the host MPS daemon cannot be reached. Give the actor "
    "a GPU claim without MPS sharing (whole GPUs, or time-slicing via --gpu-placement "
    "shared)"
)


@dataclass(frozen=True, slots=True)
class MpsFinding:
    """One edit that speaks of MPS, and where it came from."""

    origin: str  # qualified device name, or "<kind> (spec-level)"
    spec_path: str
    signal: Signal
    edit: str  # the edit as a person reads it, input quoted (<= ~200 chars)
    why: str

    def describe(self) -> str:
        where = f"{self.origin} ({self.spec_path})" if self.spec_path else self.origin
        return f"{where}: {self.edit}: {self.why}"


@dataclass(frozen=True, slots=True)
class MpsVerdict:
    """Every MPS finding in a resolution (or one device's edits)."""

    findings: tuple[MpsFinding, ...] = ()

    @property
    def expresses_mps(self) -> bool:
        """An MPS env or pipe mount is present (a /dev/shm bind alone is not MPS)."""
        return any(f.signal != "shm-bind" for f in self.findings)

    @property
    def origins(self) -> tuple[str, ...]:
        """The devices (or spec-level edits) the findings came from, in order."""
        return tuple(dict.fromkeys(f.origin for f in self.findings))

    def describe(self) -> str:
        """The findings, one after another, the first `_MAX_LISTED` named."""
        shown = [f.describe() for f in self.findings[:_MAX_LISTED]]
        more = len(self.findings) - len(shown)
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


class MpsRefused(AteomError):
    """A gVisor actor asked for a device whose edits express MPS sharing."""

    code = ErrorCode.FAILED_PRECONDITION

    def __init__(self, container: str, verdict: MpsVerdict) -> None:
        self.container = container
        self.verdict = verdict
        devices = ", ".join(verdict.origins)
        verb = "expresses" if len(verdict.origins) == 1 else "express"
        super().__init__(f"container {container!r}: {devices} {verb} NVIDIA MPS sharing, "
                         f"which a gVisor sandbox cannot use: {verdict.describe()}. "
                         f"{WHY_GVISOR}")


def _norm(path: str) -> str:
    return posixpath.normpath(path) if path.startswith("/") else path


def _env_items(edits: ContainerEdits) -> Iterable[tuple[str, str]]:
    for entry in edits.env:
        key, _, value = entry.partition("=")
        yield key, value


def pipe_dirs(steps: Iterable[EditStep]) -> tuple[str, ...]:
    """Where MPS clients would look for the pipes: each ``CUDA_MPS_PIPE_DIRECTORY``
    the edits set, and CUDA's default (pure)."""
    found = [_norm(v) for step in steps for k, v in _env_items(step.edits)
             if k == PIPE_ENV and v]
    return tuple(dict.fromkeys([*found, DEFAULT_PIPE_DIR]))


def _is_bind(m: Mount) -> bool:
    # CDI writes host directories as bind mounts; a tmpfs at /dev/shm is the
    # container's own and shares nothing with the host.
    return bool({"bind", "rbind"} & {m.type or "", *m.options}) or (
        not m.type and m.host_path.startswith("/"))


def _covers(mount_point: str, path: str) -> bool:
    return mount_point == path or (mount_point != "/" and path.startswith(mount_point + "/"))


def mps_in_edits(origin: str, edits: ContainerEdits, *, spec_path: str = "",
                 pipe_dirs: Iterable[str] = (DEFAULT_PIPE_DIR,)) -> tuple[MpsFinding, ...]:
    """The MPS findings in one block of edits (pure). `pipe_dirs`: where clients
    would look for the pipes (`pipe_dirs` of the whole resolution: the env may
    come from another step than the mount)."""
    out: list[MpsFinding] = []

    def found(signal: Signal, edit: str, why: str) -> None:
        out.append(MpsFinding(origin, spec_path, signal, edit, why))

    for key, value in _env_items(edits):
        if key == PIPE_ENV:
            found("env", f"env {key}={quote(value)}",
                  "tells CUDA clients to connect to an MPS server's pipes there")
        elif key == LOG_ENV:
            found("env", f"env {key}={quote(value)}", "the MPS control daemon's log directory")
    dirs = tuple(dict.fromkeys(_norm(d) for d in pipe_dirs))
    for m in edits.mounts:
        target = _norm(m.container_path)
        mount = f"mount {quote(m.container_path)} <- {quote(m.host_path)}"
        pipe = next((d for d in dirs if _covers(target, d)), None)
        if pipe is not None:
            found("pipe-mount", mount, f"binds the host MPS daemon's pipe directory, where "
                                       f"clients connect ({pipe})")
        elif target == SHM_DIR and _is_bind(m):
            found("shm-bind", mount, "binds a host /dev/shm, through which MPS clients share "
                                     "memory with the host MPS server")
    return tuple(out)


def mps_in_resolution(resolution: Resolution) -> MpsVerdict:
    """Every MPS finding in the edits a set of devices resolved to (pure)."""
    dirs = pipe_dirs(resolution.steps)
    return MpsVerdict(tuple(f for step in resolution.steps
                            for f in mps_in_edits(step.origin, step.edits,
                                                  spec_path=step.spec_path, pipe_dirs=dirs)))


def check_no_mps(container: str, resolution: Resolution) -> MpsVerdict:
    """Refuse, for a gVisor actor, devices whose edits express MPS (pure).

    Raises `MpsRefused` (FAILED_PRECONDITION, naming each device and edit);
    returns the verdict otherwise, whose findings (a /dev/shm bind alone) the
    caller may log.
    """
    verdict = mps_in_resolution(resolution)
    if verdict.expresses_mps:
        raise MpsRefused(container, verdict)
    return verdict
