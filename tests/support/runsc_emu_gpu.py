"""A release's GPU rules, as pure functions over flags, OCI specs and simulated GPUs.

What each rule models, and from which release (the release files'
``nvproxy.enable``, ``gpu_launcher_features`` and ``notable_messages``):

- nvproxy is on for a sandbox when ``--nvproxy`` is given (20230529+), or the
  ``dev.gvisor.internal.nvproxy`` annotation parses true with Go's ParseBool
  (20240422+; an invalid value counts as false), or (20260525+) the spec asks
  for GPU functionality: ``/dev/nvidiactl`` in ``linux.devices``, or an NVIDIA
  hook (legacy prestart ``.../nvidia-container-runtime-hook``, ``--nvproxy-docker``,
  or a createContainer ``.../nvidia-cdi-hook``) with ``NVIDIA_VISIBLE_DEVICES``
  neither empty nor ``void``.
- A container of an nvproxy sandbox whose spec asks for GPU functionality is
  a *GPU container*: its processes are the sandbox's GPU clients.
- The driver the sandbox uses (``--nvproxy-driver-version``, else the host's)
  must be one the release supports; from 20260706 a known-but-unsupported
  one passes with ``--nvproxy-allow-unsupported-driver`` and a warning.
- From 20260706 a checkpoint with GPU device files open records the GPUs;
  a restore maps them onto the GPUs present then (at least as many, one
  model: "can't remap ...").

Devices are rendered by `SimGpu.describe`, the emulator's own short form of
gVisor's DeviceRemapID.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tests.support.runsc_release import FlagParse, Release, go_sprintf

NVPROXY_ANNOTATION = "dev.gvisor.internal.nvproxy"
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
_PROC_VERSION = re.compile(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)\s")
# The CDI hook counts from release-20260406.0 (the first one here: 20260525).
_CDI_HOOK_FROM = 20260406


@dataclass(frozen=True, slots=True)
class SimGpu:
    """A GPU the emulated host has (identity only: what remapping compares)."""

    uuid: str
    minor: int = 0
    pci_vendor_id: int = 0x10DE  # NVIDIA
    pci_device_id: int = 0x2330  # H100 SXM5

    def describe(self) -> str:
        return (f"{{Minor:{self.minor} PCIVendorID:0x{self.pci_vendor_id:04x} "
                f"PCIDeviceID:0x{self.pci_device_id:04x} UUID:{self.uuid}}}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SimGpu:
        return cls(uuid=str(data["uuid"]), minor=int(data.get("minor", 0)),
                   pci_vendor_id=int(data.get("pci_vendor_id", 0x10DE)),
                   pci_device_id=int(data.get("pci_device_id", 0x2330)))


def sim_gpus(count: int, *, pci_device_id: int = 0x2330) -> tuple[SimGpu, ...]:
    """`count` identical simulated GPUs, minors 0.., stable UUIDs."""
    return tuple(SimGpu(uuid=f"GPU-00000000-0000-0000-0000-{i:012d}", minor=i,
                        pci_device_id=pci_device_id) for i in range(count))


def driver_version_from_proc(text: str) -> str | None:
    """The version in a ``/proc/driver/nvidia/version`` text (pure)."""
    m = _PROC_VERSION.search(text)
    return m.group(1) if m else None


def proc_version_text(version: str) -> str:
    """A ``/proc/driver/nvidia/version`` text for `version`, as the kernel module writes it."""
    return (f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  "
            "Sun Jul 27 07:09:36 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")


def _env(spec: Mapping[str, Any], name: str) -> list[str]:
    process = spec.get("process") or {}
    return [e.split("=", 1)[1] for e in process.get("env") or ()
            if isinstance(e, str) and e.startswith(name + "=")]


def _hooks(spec: Mapping[str, Any], kind: str) -> list[str]:
    hooks = (spec.get("hooks") or {}).get(kind) or ()
    return [str(h.get("path", "")) for h in hooks if isinstance(h, Mapping)]


def lists_nvidia_devices(spec: Mapping[str, Any]) -> bool:
    """Whether `spec`'s ``linux.devices`` names an NVIDIA node (``/dev/nvidia*``; pure)."""
    devices = ((spec.get("linux") or {}).get("devices")) or ()
    return any(isinstance(d, Mapping) and str(d.get("path", "")).startswith("/dev/nvidia")
               for d in devices)


def gpu_requested(release: Release, spec: Mapping[str, Any], flags: FlagParse) -> bool:
    """Whether `spec` asks for GPUs the way `release` recognises (pure)."""
    devices = ((spec.get("linux") or {}).get("devices")) or ()
    if any(isinstance(d, Mapping) and d.get("path") == "/dev/nvidiactl" for d in devices):
        return True
    cdi_hook = release.date >= _CDI_HOOK_FROM and any(
        p.endswith("/nvidia-cdi-hook") for p in _hooks(spec, "createContainer"))
    legacy = any(p.endswith("/nvidia-container-runtime-hook") for p in _hooks(spec, "prestart"))
    if not (cdi_hook or legacy or flags.is_true("nvproxy-docker")):
        return False
    visible = _env(spec, "NVIDIA_VISIBLE_DEVICES")
    if cdi_hook and len(visible) > 1 and visible[-1] == "void":
        visible = visible[:-1]  # the CDI spec's own trailing "void"
    return bool(visible) and visible[-1] not in ("", "void")


def nvproxy_decision(release: Release, flags: FlagParse, spec: Mapping[str, Any]
                     ) -> tuple[bool, str, str]:
    """(nvproxy on?, why, warning) for a sandbox created from `spec` (pure)."""
    if release.feature("nvproxy_flag") and flags.is_true("nvproxy"):
        return True, "--nvproxy", ""
    warning = ""
    if release.feature("nvproxy_annotation"):
        value = (spec.get("annotations") or {}).get(NVPROXY_ANNOTATION)
        if isinstance(value, str) and value in _TRUE:
            return True, f"annotation {NVPROXY_ANNOTATION}={value}", ""
        if isinstance(value, str) and value not in _FALSE:
            warning = f"annotation {NVPROXY_ANNOTATION}={value!r} is not a bool: nvproxy off"
    if release.feature("nvproxy_auto_enable_on_dev_nvidiactl") and gpu_requested(
            release, spec, flags):
        return True, "spec requests GPUs (auto-enable)", warning
    return False, "", warning


def driver_in_use(flags: FlagParse, host_version: str | None) -> str | None:
    """The driver ABI the sandbox uses: ``--nvproxy-driver-version`` or the host's."""
    requested = flags.value("nvproxy-driver-version") or ""
    return requested or host_version


def driver_check(release: Release, flags: FlagParse, host_version: str | None
                 ) -> tuple[str, str]:
    """(error, warning) of nvproxy starting with the host's driver (pure)."""
    version = driver_in_use(flags, host_version)
    if version is None:
        return go_sprintf(release.message("failed to get Nvidia driver version"),
                          "open /proc/driver/nvidia/version: no such file or directory"), ""
    if version == "latest" or version in release.supported_drivers:
        return "", ""
    allow = flags.is_true("nvproxy-allow-unsupported-driver")
    if allow and version in release.unsupported_drivers:
        return "", go_sprintf(release.message("NVIDIA driver version %s is not officially"),
                              version)
    return go_sprintf(release.message("unsupported Nvidia driver version",
                                      "unknown Nvidia driver version"), version), ""


def driver_major(version: str | None) -> int:
    try:
        return int((version or "0").split(".", 1)[0])
    except ValueError:
        return 0


def _heterogeneous(release: Release, gpus: Sequence[SimGpu]) -> str:
    for other in gpus[1:]:
        if (other.pci_vendor_id, other.pci_device_id) != (gpus[0].pci_vendor_id,
                                                          gpus[0].pci_device_id):
            return go_sprintf(release.message("can't remap with heterogeneous GPUs"),
                              gpus[0].describe(), other.describe())
    return ""


def save_remap_error(release: Release, gpus: Sequence[SimGpu]) -> str:
    """Why a checkpoint cannot record `gpus` for remapping ("" when it can; pure)."""
    if not release.feature("gpu_device_remap_on_restore"):
        return ""
    why = _heterogeneous(release, gpus)
    return go_sprintf(release.message("nvproxy device is not remappable"), why) if why else ""


def restore_remap_error(release: Release, saved: Sequence[SimGpu],
                        present: Sequence[SimGpu]) -> str:
    """Why the saved GPUs cannot be mapped onto `present` ("" when they can; pure)."""
    if not release.feature("gpu_device_remap_on_restore") or not saved:
        return ""
    if len(saved) > len(present):
        return go_sprintf(release.message("can't remap %d saved devices"),
                          len(saved), len(present))
    return _heterogeneous(release, present)


def driver_changed_error(release: Release, saved: str | None, now: str | None) -> str:
    """The release's refusal to restore onto another driver ("" when it restores; pure)."""
    if not release.feature("restore_fails_if_driver_version_changed") or not saved:
        return ""
    if saved == now:
        return ""
    return go_sprintf(release.message("nvidia driver version changed during restore"),
                      saved, now or "unknown")
