"""The facts of this worker's GPUs: parsed from the NVIDIA kernel module's
/proc files and from nvidia-smi, then joined (pure; `gather.py` reads them).

Which source owns which fact, and why:

- ``/proc/driver/nvidia/version``: the driver version of the *kernel module*.
  nvproxy asks the module for it, and runsc refuses a restore when it changed
  ("nvidia driver version changed during restore"), so this is the one a
  checkpoint must match; nvidia-smi's is the user-space library's.
- ``/proc/driver/nvidia/gpus/<bus id>/information``: model name, UUID, bus
  location and device minor (the N of ``/dev/nvidiaN``). procfs is not
  namespaced: a Pod sees the host's every GPU here, so the Pod's own are
  picked by the minors of the device nodes the device plugin gave it.
- ``nvidia-smi --query-gpu``: what /proc lacks: the PCI vendor/device id
  (``0xDDDDVVVV``: device id in the high 16 bits, vendor in the low), total
  memory, and the NVML index (inside a Pod, NVML numbers only the Pod's GPUs).

The two are joined by PCI bus id. A GPU whose sources disagree on its UUID or
name is left out and reported (`FactConflict`), not guessed: restoring GPU
state onto the wrong card is worse than refusing. When the driver versions
disagree (user-space libraries of another release than the loaded module) the
module's is kept, for the reason above, and the conflict is reported.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ateom.errors import AteomError, ErrorCode, quote

# The exact nvidia-smi query ateom runs. pci.sub_device_id (the board maker's
# subsystem id) is left out: runsc's remap and ateom's checks compare the
# chip's vendor/device id only, and every extra field is one more to go wrong.
SMI_FIELDS = ("index", "uuid", "name", "pci.bus_id", "pci.device_id", "memory.total",
              "driver_version")
SMI_ARGS = (f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits")
# The device memory each process holds: a checkpoint moves a GPU actor's into its
# image (cuda-checkpoint copies it to the sandbox's memory before runsc saves).
COMPUTE_APPS_ARGS = ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")



class GpuInfoError(AteomError):
    """A GPU fact source could not be read or parsed. str(): ``source: reason``."""

    code = ErrorCode.FAILED_PRECONDITION

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """One GPU. None where no source could say (minor without /proc; PCI ids and
    memory without nvidia-smi)."""

    index: int  # NVML's index (nvidia-smi), else the PCI bus order NVML would give
    minor: int | None  # /dev/nvidia<minor>
    uuid: str  # GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
    name: str  # "NVIDIA H200"
    pci_bus_id: str  # canonical "0000:59:00.0"
    pci_vendor_id: int | None = None  # 0x10de
    pci_device_id: int | None = None  # 0x2335
    memory_mib: int | None = None

    @property
    def model(self) -> tuple[int, int] | None:
        """(vendor, device): what "the same GPU model" means for a restore."""
        if self.pci_vendor_id is None or self.pci_device_id is None:
            return None
        return (self.pci_vendor_id, self.pci_device_id)

    @property
    def pci_id(self) -> str:
        """``10de:2335`` as lspci writes it, ``?`` when unknown."""
        model = self.model
        return "?" if model is None else f"{model[0]:04x}:{model[1]:04x}"


@dataclass(frozen=True, slots=True)
class FactConflict:
    """Two sources disagree about one fact of one GPU (or of the driver: bus id "")."""

    pci_bus_id: str
    field: str
    proc: str
    smi: str

    def describe(self) -> str:
        where = f"GPU {self.pci_bus_id}" if self.pci_bus_id else "driver"
        return (f"{where}: {self.field} is {self.proc!r} in /proc/driver/nvidia but "
                f"{self.smi!r} in nvidia-smi")


@dataclass(frozen=True, slots=True)
class WorkerGpus:
    """This worker's (this Pod's) GPUs whose facts agree, by index."""

    driver_version: str  # "" when no source said
    gpus: tuple[GpuFacts, ...]
    sources: tuple[str, ...] = ()  # where the facts came from, for humans
    conflicts: tuple[FactConflict, ...] = ()  # GPUs left out (and a driver disagreement)
    problems: tuple[str, ...] = ()  # sources that failed, GPUs that could not be placed

    def by_uuid(self, uuid: str) -> GpuFacts | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


@dataclass(frozen=True, slots=True)
class ProcGpu:
    """What one /proc/driver/nvidia/gpus/<bus>/information file says."""

    pci_bus_id: str
    name: str
    uuid: str
    minor: int
    excluded: bool = False  # "GPU Excluded: Yes": the driver will not use it


@dataclass(frozen=True, slots=True)
class SmiGpu:
    """One row of ateom's nvidia-smi query."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    pci_vendor_id: int | None
    pci_device_id: int | None
    memory_mib: int | None
    driver_version: str


# "NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..." (proprietary) and
# "NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ..." (open):
# the architecture moved from before "Kernel Module" to after it. Versions have
# two components on some branches ("595.84").
_VERSION_RE = re.compile(
    r"^NVRM version:.*?\bKernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)(?=\s|$)",
    re.MULTILINE)
_DRIVER_RE = re.compile(r"^\d+\.\d+(?:\.\d+)?$")
_UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
                      re.IGNORECASE)
_BUS_RE = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
# What nvidia-smi prints in a cell it cannot fill.
_NA = frozenset({"[N/A]", "N/A", "[Not Supported]", "[Unknown Error]",
                 "[Insufficient Permissions]"})


def parse_driver_version(text: str, *, source: str = "/proc/driver/nvidia/version") -> str:
    """The version in the kernel module's version file (pure)."""
    m = _VERSION_RE.search(text)
    if not m:
        raise GpuInfoError(source, f"no 'NVRM version: ... Kernel Module <version>' line in "
                                   f"{quote(text)}")
    return m.group(1)


def driver_major(version: str) -> int | None:
    """550 for "550.54.15"; None for "" or anything else (pure)."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def normalize_bus_id(text: str, *, source: str) -> str:
    """``00000000:59:00.0`` (nvidia-smi) and ``0000:59:00.0`` (/proc) -> ``0000:59:00.0``."""
    m = _BUS_RE.match(text.strip())
    if not m:
        raise GpuInfoError(source, f"PCI bus id {quote(text)} is not DOMAIN:BUS:DEVICE.FUNCTION")
    domain, bus, dev, fn = m.groups()
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def _uuid(text: str, *, source: str) -> str:
    value = text.strip()
    if not _UUID_RE.match(value):
        raise GpuInfoError(source, f"GPU UUID {quote(value)} is not GPU-<8-4-4-4-12 hex>")
    return "GPU-" + value[4:].lower()  # one spelling, so the sources compare equal


def parse_gpu_information(text: str, *, source: str) -> ProcGpu:
    """One ``information`` file (pure). Lines are ``Key: \\t value`` as nv-procfs.c
    prints them; Model, GPU UUID, Bus Location and Device Minor are required."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    missing = [k for k in ("Model", "GPU UUID", "Bus Location", "Device Minor") if k not in fields]
    if missing:
        raise GpuInfoError(source, f"no {', '.join(missing)} line in {quote(text)}")
    minor = fields["Device Minor"]
    if not minor.isdigit():
        raise GpuInfoError(source, f"Device Minor {quote(minor)} is not a number")
    return ProcGpu(
        pci_bus_id=normalize_bus_id(fields["Bus Location"], source=source),
        name=fields["Model"],
        uuid=_uuid(fields["GPU UUID"], source=source),
        minor=int(minor),
        excluded=fields.get("GPU Excluded", "No").lower() == "yes",
    )


def parse_pci_device_id(text: str, *, source: str) -> tuple[int, int] | None:
    """``0x233510DE`` -> (vendor 0x10de, device 0x2335); None for N/A (pure)."""
    value = text.strip()
    if value in _NA:
        return None
    try:
        word = int(value, 16)
    except ValueError:
        word = -1
    if not value.lower().startswith("0x") or not 0 <= word <= 0xFFFFFFFF:
        raise GpuInfoError(source, f"pci.device_id {quote(value)} is not 0xDDDDVVVV")
    return word & 0xFFFF, word >> 16


def parse_compute_apps(text: str, *, source: str = "nvidia-smi") -> dict[int, int]:
    """pid -> MiB of device memory, from ``nvidia-smi`` run with `COMPUTE_APPS_ARGS`,
    summed over a process's GPUs (pure). "No running processes found" is none; a
    row whose memory NVML cannot tell ([N/A]) counts 0."""
    held: dict[int, int] = {}
    for n, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), 1):
        cells = [c.strip() for c in row]
        if not cells or not "".join(cells) or cells[0].lower().startswith("no running"):
            continue
        if len(cells) != 2 or not cells[0].isdigit():
            raise GpuInfoError(f"{source}: line {n}",
                               f"expected pid, used_memory: {quote(','.join(row))}")
        used = int(cells[1]) if cells[1].isdigit() else 0
        held[int(cells[0])] = held.get(int(cells[0]), 0) + used
    return held


def parse_smi_query(text: str, *, source: str = "nvidia-smi") -> tuple[SmiGpu, ...]:
    """The rows of ``nvidia-smi`` run with `SMI_ARGS` (pure)."""
    rows = []
    for n, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), 1):
        if not row or not "".join(row).strip():
            continue
        where = f"{source}: line {n}"
        if len(row) != len(SMI_FIELDS):
            raise GpuInfoError(where, f"{len(row)} fields, expected {len(SMI_FIELDS)} "
                                      f"({','.join(SMI_FIELDS)}): {quote(','.join(row))}")
        index, uuid, name, bus, pci, memory, driver = (c.strip() for c in row)
        if not index.isdigit():
            raise GpuInfoError(where, f"index {quote(index)} is not a number")
        if memory not in _NA and not memory.isdigit():
            raise GpuInfoError(where, f"memory.total {quote(memory)} is not MiB (nounits)")
        if not _DRIVER_RE.match(driver):
            raise GpuInfoError(where, f"driver_version {quote(driver)} is not N.N[.N]")
        ids = parse_pci_device_id(pci, source=where)
        rows.append(SmiGpu(
            index=int(index), uuid=_uuid(uuid, source=where), name=name,
            pci_bus_id=normalize_bus_id(bus, source=where),
            pci_vendor_id=ids[0] if ids else None, pci_device_id=ids[1] if ids else None,
            memory_mib=None if memory in _NA else int(memory), driver_version=driver,
        ))
    return tuple(rows)


@dataclass(frozen=True, slots=True)
class _Joined:
    gpus: list[GpuFacts]
    conflicts: list[FactConflict]
    problems: list[str]


def _join_one(p: ProcGpu, s: SmiGpu | None, out: _Joined) -> None:
    if s is not None:
        clashes = [FactConflict(p.pci_bus_id, f, a, b)
                   for f, a, b in (("uuid", p.uuid, s.uuid), ("name", p.name, s.name)) if a != b]
        if clashes:
            out.conflicts.extend(clashes)
            return
    out.gpus.append(GpuFacts(
        index=s.index if s else -1, minor=p.minor, uuid=p.uuid, name=p.name,
        pci_bus_id=p.pci_bus_id,
        pci_vendor_id=s.pci_vendor_id if s else None,
        pci_device_id=s.pci_device_id if s else None,
        memory_mib=s.memory_mib if s else None,
    ))


def _from_proc(proc: Sequence[ProcGpu], smi: Sequence[SmiGpu] | None,
               minors: Collection[int] | None, out: _Joined) -> None:
    by_bus = {s.pci_bus_id: s for s in smi or ()}
    by_minor = {p.minor: p for p in proc}
    if minors is not None:
        for minor in sorted(set(minors) - by_minor.keys()):
            out.problems.append(f"/dev/nvidia{minor}: no /proc/driver/nvidia/gpus entry has "
                                f"Device Minor {minor}; GPU left out")
    for p in sorted(proc, key=lambda g: g.pci_bus_id):
        if minors is not None and p.minor not in minors:
            continue  # another Pod's GPU
        if p.excluded:
            out.problems.append(f"GPU {p.pci_bus_id}: the driver excludes it (GPU Excluded: Yes)")
            continue
        s = by_bus.get(p.pci_bus_id)
        if smi is not None and s is None:
            # One source sees a GPU the other does not: a disagreement, not a guess.
            out.problems.append(f"GPU {p.pci_bus_id} (minor {p.minor}): nvidia-smi does not "
                                f"list it; GPU left out")
            continue
        _join_one(p, s, out)
    proc_buses = {p.pci_bus_id for p in proc}
    for s in smi or ():
        if s.pci_bus_id not in proc_buses:
            out.problems.append(f"GPU {s.pci_bus_id}: nvidia-smi lists it but /proc/driver/"
                                f"nvidia/gpus does not; GPU left out")


def _pci_order(gpus: list[GpuFacts]) -> list[GpuFacts]:
    """Without nvidia-smi every index is unknown (-1): number the GPUs in PCI bus
    order, the order NVML enumerates them in (among the GPUs it can open)."""
    ordered = sorted(gpus, key=lambda g: g.pci_bus_id)
    return [g if g.index >= 0 else GpuFacts(i, g.minor, g.uuid, g.name, g.pci_bus_id,
                                            g.pci_vendor_id, g.pci_device_id, g.memory_mib)
            for i, g in enumerate(ordered)]


def _driver(proc_driver: str, smi: Sequence[SmiGpu] | None, out: _Joined) -> str:
    smi_versions = sorted({s.driver_version for s in smi or ()})
    if len(smi_versions) > 1:
        out.problems.append(f"nvidia-smi reports several driver versions: {smi_versions}")
    if proc_driver and smi_versions and proc_driver not in smi_versions:
        out.conflicts.append(FactConflict("", "driver_version", proc_driver, smi_versions[0]))
    return proc_driver or (smi_versions[0] if len(smi_versions) == 1 else "")


def combine(*, proc_driver: str, proc_gpus: Sequence[ProcGpu] | None,
            smi: Sequence[SmiGpu] | None, minors: Collection[int] | None,
            sources: Sequence[str] = (), problems: Sequence[str] = ()) -> WorkerGpus:
    """Join the parsed sources into this Pod's GPUs (pure).

    `proc_gpus` None: /proc had no gpus directory; `smi` None: nvidia-smi gave
    nothing; `minors` None: no scoping (every GPU the sources list). Without
    /proc, nvidia-smi's GPUs are taken as they are (inside a Pod NVML sees only
    the Pod's own) with unknown minors.
    """
    out = _Joined([], [], list(problems))
    if proc_gpus is not None:
        _from_proc(proc_gpus, smi, minors, out)
    elif smi is not None and (minors is None or minors):  # no device nodes: no GPUs
        out.problems.append("no /proc/driver/nvidia/gpus: device minors unknown, GPUs not "
                            "matched to the Pod's device nodes")
        out.gpus.extend(GpuFacts(s.index, None, s.uuid, s.name, s.pci_bus_id, s.pci_vendor_id,
                                 s.pci_device_id, s.memory_mib) for s in smi)
    driver = _driver(proc_driver, smi, out)
    gpus = sorted(_pci_order(out.gpus), key=lambda g: (g.index, g.pci_bus_id))
    return WorkerGpus(driver, tuple(gpus), tuple(sources), tuple(out.conflicts),
                      tuple(out.problems))
