"""A simulated GPU node: the NVIDIA module's /proc files, /dev/nvidiaN nodes and a
stand-in nvidia-smi, in a temp dir (writes files; no GPU, no root needed).

The trees come from recorded fixtures (``tests/fixtures/gpu/<name>/``: real
outputs with scrubbed UUIDs, see its PROVENANCE.md) or are generated in the
same layout by `write_sim_fixture`. `ateom.gpuinfo.gather_worker_gpus` reads a
node written here exactly as it reads a real one:

    node = write_gpu_node(tmp, recorded_fixture("h200-8gpu"), pod_minors=[2, 3])
    gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                       nvidia_smi=node.nvidia_smi)

A fixture dir holds ``proc/driver/nvidia/{version,gpus/<bus>/information}``
and ``nvidia-smi/query-gpu.csv``, what nvidia-smi prints for
`ateom.gpuinfo.inventory.SMI_ARGS`. The stand-in answers only that query, as
the real tool would (``smi="ok"``), or misbehaves on purpose: ``"hang"``
(sleeps), ``"fail"`` (the driver-not-loaded message, exit 9), ``"missing"``
(no file at `nvidia_smi`).
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ateom.gpuinfo.inventory import SMI_ARGS

SMI_BEHAVIOURS = ("ok", "hang", "fail", "missing")
_SMI_CSV = Path("nvidia-smi") / "query-gpu.csv"
_PROC = Path("proc") / "driver" / "nvidia"
# What nvidia-smi prints when the kernel module is not loaded (its exit code is 9).
_NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.")


def recorded_fixture(name: str) -> Path:
    """``tests/fixtures/gpu/<name>`` of this source tree (the package is installed
    editable from it; the fixtures are test data, not shipped)."""
    path = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "gpu" / name
    if not (path / _PROC / "version").is_file():
        raise FileNotFoundError(f"no recorded GPU fixture {name!r} at {path}")
    return path


@dataclass(frozen=True)
class SimGpu:
    """One generated GPU: what its information file and nvidia-smi row say."""

    index: int
    minor: int
    uuid: str
    name: str = "NVIDIA H200"
    pci_bus_id: str = ""  # "0000:59:00.0"; default derived from the minor
    pci_device_word: int = 0x233510DE  # nvidia-smi's pci.device_id: device << 16 | vendor
    memory_mib: int = 143771

    @property
    def bus(self) -> str:
        return self.pci_bus_id or f"0000:{0x18 + self.minor:02x}:00.0"


def _information(g: SimGpu, firmware: str) -> str:
    # Key/tab layout as kernel-open/nvidia/nv-procfs.c prints it.
    return (f"Model: \t\t {g.name}\nIRQ:   \t\t {100 + g.minor}\nGPU UUID: \t {g.uuid}\n"
            f"Video BIOS: \t 96.00.A5.00.03\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
            f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {g.bus}\n"
            f"Device Minor: \t {g.minor}\nGPU Firmware: \t {firmware}\nGPU Excluded:\t No\n")


def write_sim_fixture(directory: str | os.PathLike[str], gpus: Sequence[SimGpu], *,
                      driver_version: str = "580.95.05") -> Path:
    """Write a generated fixture dir in the recorded layout (open kernel module)."""
    base = Path(directory)
    proc = base / _PROC
    (proc / "gpus").mkdir(parents=True, exist_ok=True)
    (proc / "version").write_text(
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {driver_version}  Release "
        f"Build  (sim@ateom)  Thu Jan  1 00:00:00 UTC 2026\nGCC version:  gcc version 12.2.0 \n")
    rows = []
    for g in gpus:
        (proc / "gpus" / g.bus).mkdir(exist_ok=True)
        (proc / "gpus" / g.bus / "information").write_text(_information(g, driver_version))
        domain, rest = g.bus.split(":", 1)
        rows.append(f"{g.index}, {g.uuid}, {g.name}, 0000{domain.upper()}:{rest.upper()}, "
                    f"0x{g.pci_device_word:08X}, {g.memory_mib}, {driver_version}\n")
    (base / _SMI_CSV).parent.mkdir(exist_ok=True)
    (base / _SMI_CSV).write_text("".join(rows))
    return base


@dataclass(frozen=True)
class GpuNode:
    """Where a simulated node lies; pass these to `gather_worker_gpus`."""

    root: Path
    proc_root: str
    dev_dir: str
    nvidia_smi: str

    @property
    def gpu_glob(self) -> str:
        return os.path.join(self.dev_dir, "nvidia[0-9]*")


def _fixture_minors(fixture: Path) -> dict[int, str]:
    """Device minor -> bus id (lower case, 4-digit domain) of every fixture GPU."""
    minors = {}
    for info in sorted((fixture / _PROC / "gpus").glob("*/information")):
        minor = next(int(value) for key, _, value in
                     (line.partition(":") for line in info.read_text().splitlines())
                     if key.strip() == "Device Minor")
        minors[minor] = info.parent.name.lower()
    return minors


def _pod_view(csv_text: str, buses: set[str]) -> str:
    """The host's nvidia-smi rows as NVML inside the Pod prints them: only the
    Pod's GPUs (those whose device nodes it can open), numbered from 0."""
    rows: list[str] = []
    for line in csv_text.splitlines():
        fields = line.split(", ")
        if len(fields) > 3 and fields[3].lower()[-12:] in buses:
            rows.append(", ".join([str(len(rows)), *fields[1:]]) + "\n")
    return "".join(rows)


def _smi_script(csv_path: Path, behaviour: str, also: Sequence[tuple[str, Path]] = ()) -> str:
    query = shlex.quote(" ".join(SMI_ARGS))
    if behaviour == "hang":
        answer = "sleep 600"
    elif behaviour == "fail":
        answer = f"echo {shlex.quote(_NO_DRIVER)}; exit 9"
    else:
        answer = f"exec cat {shlex.quote(str(csv_path))}"
    return ("#!/bin/sh\n"
            "# Stand-in nvidia-smi (tests.support.gpu_node): answers ateom's query (and\n"
            "# what a test adds) only.\n"
            f'if [ "$*" = {query} ]; then\n  {answer}\nfi\n'
            + "".join(f'if [ "$*" = {shlex.quote(args)} ]; then\n'
                      f"  exec cat {shlex.quote(str(out))}\nfi\n" for args, out in also)
            + 'echo "stand-in nvidia-smi: unsupported arguments: $*" >&2\nexit 2\n')


def write_gpu_node(root: str | os.PathLike[str], fixture: str | os.PathLike[str], *,
                   pod_minors: Iterable[int] | None = None, smi: str = "ok",
                   also: Mapping[str, str] | None = None) -> GpuNode:
    """Lay out a node under `root` from `fixture` (a recorded or generated dir).

    ``proc/`` is copied whole (procfs shows the host's every GPU); ``dev/``
    gets ``nvidiactl``, ``nvidia-uvm`` and ``nvidia<minor>`` for `pod_minors` only (default:
    every GPU of the fixture), as regular files standing in for the Pod's
    device nodes; ``bin/nvidia-smi`` behaves as `smi` says and, like NVML in
    a Pod, lists only the Pod's GPUs, indexed from 0 in the recorded order;
    `also` gives it more answers: its arguments, space-joined, -> what it prints.
    """
    if smi not in SMI_BEHAVIOURS:
        raise ValueError(f"smi must be one of {SMI_BEHAVIOURS}, not {smi!r}")
    base, source = Path(root), Path(fixture)
    shutil.copytree(source / "proc", base / "proc", dirs_exist_ok=True)
    dev = base / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    for control in ("nvidiactl", "nvidia-uvm"):
        (dev / control).touch()
    host = _fixture_minors(source)
    minors = sorted(host) if pod_minors is None else sorted(set(pod_minors))
    for minor in minors:
        (dev / f"nvidia{minor}").touch()
    bin_dir = base / "bin"
    bin_dir.mkdir(exist_ok=True)
    csv_path = base / _SMI_CSV
    csv_path.parent.mkdir(exist_ok=True)
    buses = {host[m] for m in minors if m in host}
    csv_path.write_text(_pod_view((source / _SMI_CSV).read_text(), buses))
    smi_path = bin_dir / "nvidia-smi"
    answers = []
    for n, (args, text) in enumerate((also or {}).items()):
        answers.append((args, csv_path.parent / f"also-{n}.txt"))
        answers[-1][1].write_text(text)
    if smi != "missing":
        smi_path.write_text(_smi_script(csv_path, smi, answers))
        smi_path.chmod(0o755)
    return GpuNode(base, str(base / "proc"), str(dev), str(smi_path))
