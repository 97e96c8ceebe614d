"""Removing an actor's runsc state dir, with whatever runsc mounted inside it (mounts, files).

runsc from release-2026 on pins one empty network namespace for its gofers at
``<-root>/null-netns``: an nsfs bind mount it unmounts only when asked
(``UnmountNullNetNS``, `--shared-root`). A plain ``rmtree`` cannot remove a
mount point, and with ``ignore_errors`` it says nothing: every actor would
leave a mount and a network namespace behind for the life of the worker. So
the mounts under the dir are detached first (deepest first), then the dir is
removed, and what could not be removed is returned, never ignored.

Only mounts whose mount point lies under the actor's own state dir are
touched, and the walk never follows a symlink (``rmtree`` does not).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import sys

import structlog

log = structlog.get_logger("ateom.sandbox")

_MNT_DETACH = 2
_UMOUNT_NOFOLLOW = 8
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes are octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mounts_under(root: str, mountinfo: str) -> list[str]:
    """Mount points strictly under `root` in a ``/proc/self/mountinfo`` text, deepest
    first (pure)."""
    prefix = os.path.normpath(root) + os.sep
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = _unescape(fields[4])
            if point.startswith(prefix):
                points.append(point)
    return sorted(set(points), key=lambda p: (-p.count(os.sep), p))


def _read_mountinfo() -> str:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


def unmount_under(root: str) -> list[str]:
    """Detach every mount under `root` (umount2 MNT_DETACH|UMOUNT_NOFOLLOW); returns
    the mount points that would not go, each with its errno."""
    failed = []
    for point in mounts_under(root, _read_mountinfo()):
        if _libc.umount2(os.fsencode(point), _MNT_DETACH | _UMOUNT_NOFOLLOW) != 0:
            err = ctypes.get_errno()
            failed.append(f"{point} (umount: {os.strerror(err)})")
    return failed


def remove_state_dir(root: str) -> list[str]:
    """Remove the actor's runsc state dir `root` and everything mounted or written in
    it; returns what is left (empty when nothing is), and logs it."""
    if not os.path.lexists(root):
        return []
    problems = unmount_under(root)
    errors: list[str] = []

    def note(_fn: object, path: str, exc: object) -> None:
        error = exc[1] if isinstance(exc, tuple) else exc  # onerror: exc_info; onexc: exc
        errors.append(f"{path} ({error.strerror if isinstance(error, OSError) else error})")

    if sys.version_info >= (3, 12):
        shutil.rmtree(root, onexc=note)
    else:
        shutil.rmtree(root, onerror=note)
    problems += errors
    if os.path.lexists(root) and not problems:
        problems.append(f"{root} (still present)")
    if problems:
        log.error("state_dir_left_behind", root=root, left=problems[:20])
    return problems
