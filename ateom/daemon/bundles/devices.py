"""Which CDI devices each container gets, and whether gVisor can give them (pure).

nvproxy proxies NVIDIA's driver ioctls and exposes only /dev/nvidiactl,
/dev/nvidia-uvm and /dev/nvidiaN: no other vendor, and no MIG (whose
instances are reached through /dev/nvidia-caps/*). Such requests fail
before anything is created, naming the device and why.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import structlog

from ateom.cdi.model import Resolution
from ateom.cdi.names import parse_qualified_name
from ateom.cdi.registry import Registry
from ateom.daemon.calls import refusals
from ateom.daemon.calls.requests import ContainerRequest, DevicePolicy
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.mps import REFUSAL_REASON as MPS_REFUSAL
from ateom.gpuinfo.mps import MpsRefused, check_no_mps
from ateom.runsc.probe import RunscInfo

log = structlog.get_logger("ateom.devices")

GPU_KIND = "nvidia.com/gpu"
PROXIED_VENDOR = "nvidia.com"


def is_mig_name(qualified: str) -> bool:
    """nvidia-ctk names MIG devices ``<gpu>:<instance>`` or by a ``MIG-`` UUID."""
    name = qualified.partition("=")[2]
    return ":" in name or name.lower().startswith("mig-")


def pod_default_devices(available: Iterable[str]) -> tuple[str, ...]:
    """Every whole GPU the Pod was given: nvidia.com/gpu devices but `all` and MIG."""
    return tuple(
        sorted(
            (q for q in available
             if q.startswith(GPU_KIND + "=") and q != f"{GPU_KIND}=all" and not is_mig_name(q)),
            key=_natural,
        )
    )


def _natural(q: str) -> tuple[int, int | str]:
    name = q.partition("=")[2]
    return (0, int(name)) if name.isdigit() else (1, name)


def choose_devices(
    container: ContainerRequest, *, gpu_present: bool, pod_default: Sequence[str]
) -> tuple[str, ...]:
    """The qualified names `container` gets (pure)."""
    choice = container.devices
    if choice.policy is DevicePolicy.NONE:
        return ()
    if choice.policy is DevicePolicy.EXPLICIT:
        return tuple(dict.fromkeys(choice.names))
    return tuple(pod_default) if gpu_present else ()


def check_within_grant(container: str, names: Sequence[str], granted: Sequence[str],
                       pod_gpus: Sequence[str]) -> None:
    """A container's explicit GPUs must be among its actor's (pure): a GPU by
    index must be granted; ``=all`` or a UUID name only when the actor holds
    every GPU of the Pod (ateom cannot tell which GPU a UUID name is)."""
    granted_set = set(granted)
    holds_all = set(pod_gpus) <= granted_set
    for name in names:
        if not name.startswith(GPU_KIND + "=") or name in granted_set:
            continue
        if holds_all and not is_mig_name(name) and name.partition("=")[2] not in (
                g.partition("=")[2] for g in pod_gpus):
            continue  # =all or a UUID name, and the actor has every GPU
        held = ", ".join(granted) or "none"
        raise AteomError(
            f"container {container!r}: device {name!r} is not one of this actor's GPUs"
            f" ({held}); ask for it in the request's gpus, or name a granted one",
            code=ErrorCode.FAILED_PRECONDITION)


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
            if node.path.startswith("/dev/nvidia-caps"):
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


def resolve_for_gvisor(container: str, names: Sequence[str], registry: Registry,
                       info: RunscInfo) -> Resolution:
    """The one resolve step a container's devices go through, for RunWorkload and
    Inspect/PlanInjection alike (reads the registry's specs): only devices gVisor
    can proxy, resolved, the resolution checked, no MPS, a runsc with nvproxy.

    One function so an operator's dry run refuses exactly what a Run would.
    """
    check_gvisor_devices(container, names)
    resolution = registry.resolve(list(names))
    check_resolution_for_gvisor(container, resolution)
    # MPS clients talk to a host daemon through a pipe dir: gVisor cannot.
    try:
        verdict = check_no_mps(container, resolution)
    except MpsRefused:
        refusals.refused("mps", MPS_REFUSAL)
        raise
    for finding in verdict.findings:
        log.info("mps_edit_not_used", container=container, finding=finding.describe())
    check_nvproxy(info)  # before any library is read
    return resolution
