"""Which CDI devices each container gets, and the one resolve step a container's
devices go through for gVisor (pure but for reading the registry's specs): what
gVisor can give is decided by `ateom.gpuinfo.nvproxy`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import structlog

from ateom.cdi.model import Resolution
from ateom.cdi.registry import Registry
from ateom.daemon.calls import refusals
from ateom.daemon.calls.requests import ContainerRequest, DevicePolicy
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.mps import REFUSAL_REASON as MPS_REFUSAL
from ateom.gpuinfo.mps import MpsRefused, check_no_mps
from ateom.gpuinfo.nvproxy import (
    ALL_GPUS_NAME,
    GPU_KIND,
    check_gvisor_devices,
    check_nvproxy,
    check_resolution_for_gvisor,
    is_mig_name,
)
from ateom.runsc.probe import RunscInfo

log = structlog.get_logger("ateom.devices")


def pod_default_devices(available: Iterable[str]) -> tuple[str, ...]:
    """Every whole GPU the Pod was given: nvidia.com/gpu devices but `all` and MIG."""
    return tuple(
        sorted(
            (q for q in available
             if q.startswith(GPU_KIND + "=") and q != ALL_GPUS_NAME and not is_mig_name(q)),
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
