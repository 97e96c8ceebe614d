"""Typed, immutable CDI data: what a parsed spec is.

These dataclasses mirror the CDI spec's JSON (field names in snake_case; the
JSON names are in `ateom.cdi.parse`). They are frozen so a loaded registry can
be shared between concurrent actors without copying. Optional JSON fields are
None when absent, so "absent" and "zero" stay distinguishable (a device node
with `major: 0` is not one whose major must be stat'ed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

EMPTY_ANNOTATIONS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str
    host_path: str | None = None
    type: str | None = None  # "b", "c", "u", "p", or None/"" when left to stat
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None  # cgroup access: combination of "rwm", or "none"
    uid: int | None = None
    gid: int | None = None

    @property
    def host(self) -> str:
        """The host node to stat: hostPath when set, else the container path."""
        return self.host_path or self.path

    @property
    def cgroup_access(self) -> str:
        """The access the device cgroup rule for this node grants.

        Unset or empty permissions mean "rwm"; the CDI spec's "none" means
        empty access (the reference's NoPermissions), so an injector must not
        write the word itself into the OCI rule.
        """
        if not self.permissions:
            return "rwm"
        return "" if self.permissions == "none" else self.permissions


@dataclass(frozen=True, slots=True)
class Mount:
    host_path: str
    container_path: str
    type: str | None = None
    options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Hook:
    hook_name: str  # one of the six OCI hook names
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclass(frozen=True, slots=True)
class IntelRdt:
    clos_id: str | None = None
    l3_cache_schema: str | None = None
    mem_bw_schema: str | None = None
    # None when absent or null; () when written as []. The difference is the
    # reference's: any schemata, even empty, needs cdiVersion 1.1.0.
    schemata: tuple[str, ...] | None = None
    enable_monitoring: bool = False


@dataclass(frozen=True, slots=True)
class NetDevice:
    host_interface_name: str
    name: str


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    intel_rdt: IntelRdt | None = None
    additional_gids: tuple[int, ...] = ()
    net_devices: tuple[NetDevice, ...] = ()

    def is_empty(self) -> bool:
        return not (
            self.env
            or self.device_nodes
            or self.mounts
            or self.hooks
            or self.intel_rdt is not None
            or self.additional_gids
            or self.net_devices
        )


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    container_edits: ContainerEdits
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY_ANNOTATIONS)


@dataclass(frozen=True, slots=True)
class Spec:
    """One CDI spec file, parsed. `path` is the file it came from."""

    version: str  # as declared, e.g. "0.5.0" (a leading "v" is kept as written)
    kind: str  # "vendor/class"
    devices: tuple[Device, ...]
    container_edits: ContainerEdits = field(default_factory=ContainerEdits)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY_ANNOTATIONS)
    path: str = ""

    @property
    def vendor(self) -> str:
        return self.kind.partition("/")[0]

    @property
    def device_class(self) -> str:
        return self.kind.partition("/")[2]

    def device(self, name: str) -> Device | None:
        for d in self.devices:
            if d.name == name:
                return d
        return None


@dataclass(frozen=True, slots=True)
class EditStep:
    """One block of edits to apply, and where it came from.

    `origin` is the qualified device name for device edits, or
    ``"<kind> (spec-level)"`` for a spec's own containerEdits; `spec_path` is
    the file either came from. Kept so an injector's logs and errors can say
    which spec asked for a mount or hook.
    """

    origin: str
    spec_path: str
    edits: ContainerEdits

    @property
    def vendor(self) -> str:
        """The vendor of the spec the edits came from (``nvidia.com``)."""
        return self.origin.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class Resolution:
    """The outcome of resolving requested devices: what to apply, in order.

    `devices` are the requested qualified names, deduplicated, in request
    order. `steps` hold each spec's spec-level edits once (before that spec's
    first requested device), then each device's edits.
    """

    devices: tuple[str, ...]
    steps: tuple[EditStep, ...]
