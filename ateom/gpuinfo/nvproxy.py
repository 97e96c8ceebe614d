"""gVisor's GPU vocabulary, in one place: what nvproxy proxies, what it needs, and
the names the daemon gives the Pod's GPUs (pure).

nvproxy proxies NVIDIA's driver ioctls and exposes only /dev/nvidiactl,
/dev/nvidia-uvm and /dev/nvidiaN: no other vendor, and no MIG (whose
instances are reached through /dev/nvidia-caps/*). Such requests fail
before anything is created, naming the device and why. The daemon's bundles
(which devices a container gets) and its GPU side (placement, checkpoints,
records) both speak this vocabulary, and import it from here;
`tests/test_import_graph.py` fails when a GPU name or an nvproxy rule is
defined anywhere else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ateom.cdi.model import Resolution
from ateom.cdi.names import parse_qualified_name
from ateom.cdi.registry import Registry
from ateom.errors import AteomError, ErrorCode
from ateom.runsc.probe import RunscInfo

GPU_KIND = "nvidia.com/gpu"
ALL_GPUS_NAME = f"{GPU_KIND}=all"  # every GPU of the Pod, as one CDI name
PROXIED_VENDOR = "nvidia.com"
# The control nodes nvproxy opens for every GPU sandbox, beside the GPUs' own
# (runsc fails "failed to open /dev/nvidiactl" without them); nvidia-uvm-tools
# and nvidia-modeset are optional.
CONTROL_NODE_NAMES = ("nvidiactl", "nvidia-uvm")
# MIG instances are reached through these nodes, which nvproxy does not expose.
MIG_NODE_PREFIX = "/dev/nvidia-caps"


def control_node_paths(dev_dir: str) -> tuple[str, ...]:
    """The control nodes nvproxy needs, in the directory of the GPU nodes."""
    return tuple(os.path.join(dev_dir, n) for n in CONTROL_NODE_NAMES)


def gpu_index(name: str) -> int | None:
    """N of ``nvidia.com/gpu=N``, None for any other name (pure)."""
    kind, _, rest = name.partition("=")
    return int(rest) if kind == GPU_KIND and rest.isdigit() else None


def is_mig_name(qualified: str) -> bool:
    """nvidia-ctk names MIG devices ``<gpu>:<instance>`` or by a ``MIG-`` UUID."""
    name = qualified.partition("=")[2]
    return ":" in name or name.lower().startswith("mig-")


def check_gvisor_devices(container: str, names: Sequence[str]) -> None:
    """Refuse devices runsc cannot proxy (pure): other vendors, MIG."""
    for name in names:
        q = parse_qualified_name(name)
        if q.vendor != PROXIED_VENDOR:
            raise AteomError(
                f"container {container!r}: device {name!r}: gVisor cannot pass through"
                f" vendor {q.vendor!r} devices (runsc proxies only {PROXIED_VENDOR} GPUs)",
                code=ErrorCode.FAILED_PRECONDITION,
            )
        if is_mig_name(name):
            raise AteomError(
                f"container {container!r}: device {name!r} is a MIG device; gVisor's nvproxy"
                " has no MIG support (it exposes only /dev/nvidiactl, /dev/nvidia-uvm and"
                " /dev/nvidiaN)",
                code=ErrorCode.FAILED_PRECONDITION,
            )


def check_resolution_for_gvisor(container: str, resolution: Resolution) -> None:
    """Refuse a resolution that reaches MIG through its device nodes (pure)."""
    for step in resolution.steps:
        for node in step.edits.device_nodes:
            if node.path.startswith(MIG_NODE_PREFIX):
                raise AteomError(
                    f"container {container!r}: {step.origin} ({step.spec_path}) needs"
                    f" {node.path}: MIG, which gVisor's nvproxy does not support",
                    code=ErrorCode.FAILED_PRECONDITION,
                )


def check_nvproxy(info: RunscInfo) -> None:
    """A GPU sandbox needs a runsc with --nvproxy (pure over the probe)."""
    if not info.supports_nvproxy:
        raise AteomError(
            f"this actor needs GPUs but runsc {info.path} (version {info.version}) has no"
            " --nvproxy; install a runsc built with nvproxy",
            code=ErrorCode.FAILED_PRECONDITION,
        )


def check_nvproxy_driver(info: RunscInfo, driver: str) -> None:
    """The driver ABI a GPU sandbox's nvproxy will use must be one this runsc knows
    (pure over the probe). Outside its list the sentry dies at boot with a FATAL
    only its debug log shows, and the CLI says just "waiting for sandbox to start:
    EOF"; so the actor is refused before anything is created. `driver` is
    ``--nvproxy-driver-version`` or the node's; "" (unknown) and a runsc that
    lists nothing pass, and runsc decides."""
    known = info.supported_drivers
    if not driver or not known or driver in known:
        return
    raise AteomError(
        f"this actor needs GPUs, and runsc {info.path} (version {info.version}) does not"
        f" support NVIDIA driver {driver}: its nvproxy knows {len(known)} driver(s),"
        f" {known[0]} to {known[-1]}; set --nvproxy-driver-version to one it supports"
        f" (the ABI closest to the node's driver) or install a newer runsc",
        code=ErrorCode.FAILED_PRECONDITION,
    )


def gpu_node_path(minor: int) -> str:
    """A GPU's device node, as the NVIDIA driver names it (``/dev/nvidia<minor>``)."""
    return f"/dev/nvidia{minor}"


def node_minor(path: str) -> int | None:
    """The minor `path` names when it is a GPU node (``/dev/nvidia3`` -> 3), else None."""
    prefix = gpu_node_path(0)[:-1]
    rest = path.removeprefix(prefix)
    return int(rest) if rest != path and rest.isdigit() else None


def keep_saved_paths(resolution: Resolution, saved_paths: Mapping[str, str]) -> Resolution:
    """`resolution` with each GPU node in `saved_paths` back at the path it was saved
    at, its host node unchanged (pure).

    A restore onto other GPUs than the saved ones: runsc validates a restore's
    devices by container path against the checkpoint's ("Devices does not match
    across checkpoint restore"), while nvproxy remaps the saved GPUs onto the
    host nodes the restore spec points at, by minor. So the container keeps
    ``/dev/nvidia<saved minor>`` and its host node is the target GPU's."""
    if not saved_paths:
        return resolution
    steps = []
    for step in resolution.steps:
        nodes = tuple(
            replace(n, path=saved_paths[n.path], host_path=n.host_path or n.path)
            if n.path in saved_paths else n for n in step.edits.device_nodes)
        steps.append(replace(step, edits=replace(step.edits, device_nodes=nodes))
                     if nodes != step.edits.device_nodes else step)
    return replace(resolution, steps=tuple(steps))


@dataclass(frozen=True, slots=True)
class DeviceView:
    """The devices an actor's containers choose among: the registry, whether the
    Pod has GPUs, the GPUs this actor was granted (what "the Pod's GPUs" means
    for it), per-container choices that replace the request's (a restore puts
    each container back on the GPUs its checkpoint had) and, for a restore onto
    other GPUs, the container paths their nodes keep (`keep_saved_paths`)."""

    registry: Registry | None  # None when no container can get devices
    gpu_present: bool
    pod_default: tuple[str, ...]  # the actor's GPUs: the Pod's, or those it was granted
    pod_gpus: tuple[str, ...] = ()  # every whole GPU of the Pod
    per_container: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    saved_paths: Mapping[str, str] = field(default_factory=dict)  # target node -> saved

    def granted(self, names: Sequence[str],
                per_container: Mapping[str, tuple[str, ...]] | None = None,
                saved_paths: Mapping[str, str] | None = None) -> DeviceView:
        return DeviceView(self.registry, self.gpu_present, tuple(names), self.pod_gpus,
                          dict(per_container or {}), dict(saved_paths or {}))


@dataclass(frozen=True, slots=True)
class GpuTools:
    """What ateom adds to each GPU container for GPU checkpoints."""

    cuda_checkpoint: str = ""  # host path, bind-mounted read-only; "" when not found
    args_prefix: tuple[str, ...] = ()  # cuda-checkpoint --launch-job, when needed
