"""The worker's capacity: the CPU and memory limits of its container.

Substrate's controller projects them into the worker container from the downward
API, in milli-cores and bytes, one number per file (``/run/ateom-capacity/cpu_milli``
and ``memory_bytes``). They are read once at start, as Substrate's own workers do
(the Pod is not resized in place). A file that is missing or does not hold a
number counts as zero, "not known", and says why: better to report nothing than
to invent a size for a worker that cannot say what it has.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_CAPACITY_DIR = "/run/ateom-capacity"
CPU_FILE = "cpu_milli"
MEMORY_FILE = "memory_bytes"
# A downward-API file holds one decimal number; anything longer is not one.
_MAX_FILE_BYTES = 64


@dataclass(frozen=True, slots=True)
class Capacity:
    """The worker container's limits (0: not known) and, per unknown one, why."""

    cpu_milli: int = 0
    memory_bytes: int = 0
    problems: tuple[str, ...] = ()


def parse_limit(raw: bytes) -> int | None:
    """A downward-API resource file's number, None when it holds none (pure)."""
    text = raw.decode("ascii", errors="replace").strip()
    return int(text) if text.isdigit() else None


def _read_limit(directory: str, name: str) -> tuple[int, str]:
    path = os.path.join(directory, name)
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return 0, f"{path}: missing (the controller's downward-API volume is not mounted?)"
    except OSError as exc:
        return 0, f"{path}: cannot read: {exc.strerror}"
    value = parse_limit(raw) if len(raw) <= _MAX_FILE_BYTES else None
    if value is None:
        return 0, f"{path}: not a whole number ({raw[:_MAX_FILE_BYTES]!r})"
    return value, ""


def read_capacity(directory: str) -> Capacity:
    """The limits in `directory` (reads two small files)."""
    cpu, cpu_problem = _read_limit(directory, CPU_FILE)
    memory, memory_problem = _read_limit(directory, MEMORY_FILE)
    return Capacity(cpu, memory, tuple(p for p in (cpu_problem, memory_problem) if p))


def _meminfo_bytes(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name == key and rest.split() and rest.split()[0].isdigit():
            return int(rest.split()[0]) * 1024  # /proc/meminfo counts kB
    return 0


def memory_bound(capacity: Capacity, meminfo: str = "/proc/meminfo") -> int:
    """The most memory any one sandbox of this worker can hold: the worker's limit
    (its cgroup enforces it; swap may come on top), and at most the machine's RAM and
    swap; 0 when neither can be read. What a checkpoint image can need at most."""
    try:
        with open(meminfo, encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    total, swap = _meminfo_bytes(text, "MemTotal"), _meminfo_bytes(text, "SwapTotal")
    bounds = [b for b in (total and total + swap,
                          capacity.memory_bytes and capacity.memory_bytes + swap) if b]
    return min(bounds, default=0)
