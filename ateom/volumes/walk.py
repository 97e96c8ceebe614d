"""A volume directory written into a tar, never through a symlink (I/O: reads
the volume, writes only to the tar it is given).

The walk holds one directory fd per level and names every entry relative to
the directory fd it was listed from, so a directory renamed or replaced by a
symlink mid-walk never moves the walk elsewhere. Each entry is ``lstat``ed,
then opened ``O_NOFOLLOW`` (files also ``O_NONBLOCK``: a FIFO swapped in
must not block the checkpoint) and described by the ``fstat`` of the fd its
bytes are read from. An entry that changed between the two is looked at
once more and taken for what it is then; FIFOs, sockets and devices are left
out and reported, as are entries that vanish or keep changing.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
from dataclasses import dataclass

from ateom.errors import AteomError, ErrorCode, quote
from ateom.volumes.archive import MemberKind, member_info

# One fd per level is held open; a tree deeper than this (no real one is) is
# refused rather than risk the daemon's fd limit.
MAX_DEPTH = 256
_CHANGED = (errno.ELOOP, errno.ENOTDIR, errno.EINVAL)


@dataclass(frozen=True, slots=True)
class Skipped:
    """An entry left out of (or changed while written into) a snapshot."""

    volume_name: str
    path: str  # relative to the volume's directory
    reason: str


class _SizedReader:
    """Exactly `size` bytes of an fd for tarfile, in the chunks it asks for: a
    file that shrank while read is padded with zero bytes (the archive stays
    well formed) and says so in `short`."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd, self._left, self.short = fd, size, False

    def read(self, n: int = -1, /) -> bytes:
        want = self._left if n < 0 else min(n, self._left)
        parts: list[bytes] = []
        got = 0
        while got < want and (chunk := os.read(self._fd, want - got)):
            parts.append(chunk)
            got += len(chunk)
        if got < want:
            self.short = True
            parts.append(b"\0" * (want - got))
        self._left -= want
        return b"".join(parts)


def open_entry(name: str, dir_fd: int, *, directory: bool) -> int:
    """`name` in `dir_fd`, never through a symlink (ELOOP, or ENOTDIR for a directory)."""
    kind = os.O_DIRECTORY if directory else os.O_NONBLOCK
    return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | kind, dir_fd=dir_fd)


def _type_name(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "an entry of unknown type"


def write_tree(tar: tarfile.TarFile, vol_fd: int, volume_name: str) -> list[Skipped]:
    """Everything under `vol_fd` into `tar`, parents before their contents,
    names sorted; returns what was left out. `vol_fd` stays open."""
    skipped: list[Skipped] = []
    stack = [(vol_fd, "", iter(sorted(os.listdir(vol_fd))))]
    try:
        while stack:
            fd, prefix, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if fd != vol_fd:
                    os.close(fd)
                continue
            rel = prefix + name
            child = _add(tar, fd, name, rel, volume_name, skipped)
            if child is None:
                continue
            if len(stack) > MAX_DEPTH:
                os.close(child)
                raise AteomError(f"durable-dir volume {quote(volume_name)}: {quote(rel)}:"
                                 f" deeper than {MAX_DEPTH} directories; not captured",
                                 code=ErrorCode.FAILED_PRECONDITION)
            stack.append((child, rel + "/", iter(sorted(os.listdir(child)))))
    finally:
        for fd, _, _ in stack:
            if fd != vol_fd:
                os.close(fd)
    return skipped


def _add(tar: tarfile.TarFile, dir_fd: int, name: str, rel: str, volume_name: str,
         skipped: list[Skipped], *, again: bool = True) -> int | None:
    """Entry `name` of `dir_fd` into `tar`; a directory's fd is returned to walk."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=dir_fd)
            tar.addfile(member_info(rel, MemberKind.SYMLINK, st, linkname=target))
            return None
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            skipped.append(Skipped(volume_name, rel, f"{_type_name(st.st_mode)}: only files,"
                                   " directories and symlinks are captured"))
            return None
        fd = open_entry(name, dir_fd, directory=stat.S_ISDIR(st.st_mode))
    except FileNotFoundError:
        skipped.append(Skipped(volume_name, rel, "removed while captured"))
        return None
    except OSError as exc:
        if exc.errno not in _CHANGED:
            raise
        if again:  # replaced after the lstat: take it for what it is now
            return _add(tar, dir_fd, name, rel, volume_name, skipped, again=False)
        skipped.append(Skipped(volume_name, rel, "kept changing while captured"))
        return None
    return _add_open(tar, fd, st, rel, volume_name, skipped, again=again, dir_fd=dir_fd,
                     name=name)


def _add_open(tar: tarfile.TarFile, fd: int, st: os.stat_result, rel: str,
              volume_name: str, skipped: list[Skipped], *, again: bool, dir_fd: int,
              name: str) -> int | None:
    """The opened entry into `tar`, described by its own fstat; `fd` is closed
    unless it is a directory's, returned for the caller to walk and close."""
    keep = False
    try:
        fst = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode) and stat.S_ISDIR(fst.st_mode):
            tar.addfile(member_info(rel, MemberKind.DIRECTORY, fst))
            keep = True
            return fd
        if stat.S_ISREG(st.st_mode) and stat.S_ISREG(fst.st_mode):
            reader = _SizedReader(fd, fst.st_size)
            tar.addfile(member_info(rel, MemberKind.FILE, fst), reader)
            if reader.short or os.fstat(fd).st_size != fst.st_size:
                skipped.append(Skipped(volume_name, rel, "changed size while captured"
                                       f" (stored as {fst.st_size} bytes)"))
            return None
    finally:
        if not keep:
            os.close(fd)
    if again:  # something else was there by the time it was opened
        return _add(tar, dir_fd, name, rel, volume_name, skipped, again=False)
    skipped.append(Skipped(volume_name, rel, "kept changing while captured"))
    return None
