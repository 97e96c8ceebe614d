"""What runsc needs of the host it runs on, as read from the host (reads files).

runsc makes a cgroup per sandbox unless told ``--ignore-cgroups``: on a read-only or
absent cgroupfs (every container that is not privileged gets one read-only) each
create fails. Read here once for both who judge it: the daemon's readiness (SERVING
means an actor can run) and ``ateom doctor``'s runsc-cgroups check.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CgroupMount:
    """A cgroup filesystem mounted where the worker runs (from /proc/self/mountinfo)."""

    path: str
    fstype: str  # cgroup (v1) or cgroup2
    readonly: bool


def read_cgroup_mounts(mountinfo: str = "/proc/self/mountinfo"
                       ) -> tuple[CgroupMount, ...] | None:
    """The cgroup filesystems mounted here, and whether each is read-only (reads a
    file; None when it cannot be read)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        # id parent major:minor root mount-point options [optional...] - fstype source super
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or not tail or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(fields[5].split(",")) | set(tail[2].split(",") if len(tail) > 2 else ())
        found.append(CgroupMount(fields[4], tail[0], "ro" in options))
    return tuple(found)

