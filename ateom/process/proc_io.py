"""What a process has read, from the kernel's own count (``/proc/<pid>/io``).

A restore's sandbox reads its image through read(2) and friends; ``rchar`` counts
every byte those calls returned, page cache or disk alike, which is what "how far
is the restore" asks (``read_bytes`` counts only what reached the disk).
"""

from __future__ import annotations

from collections.abc import Iterable


def bytes_read(pids: Iterable[int], *, proc: str = "/proc") -> int:
    """The bytes `pids` have read so far (``rchar``), summed; a process gone or not
    ours to read counts 0 (reads /proc)."""
    total = 0
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/io") as f:
                for line in f:
                    if line.startswith("rchar:"):
                        total += int(line.split()[1])
                        break
        except (OSError, ValueError):
            continue
    return total
