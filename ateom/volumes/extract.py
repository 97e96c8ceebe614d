"""Reading a durable-dir snapshot tar: checked whole first, then extracted
into an emptied volume directory, confined (I/O).

The tar is untrusted (an actor wrote what went into it; it passed through
object storage) and `tarfile.extractall` is not used: Debian 12's Python
lacks its `filter=`, and the rules here are ateom's own. `check_archive`
reads every header (`ateom.volumes.archive.check_member`) and the end of the
archive before anything is written, so a bad tar changes nothing. `extract`
applies the same rules again as it writes: every parent directory opened
from the volume with ``O_NOFOLLOW | O_DIRECTORY`` (never through a symlink,
one the tar made included), files created ``O_CREAT | O_EXCL | O_NOFOLLOW``
through their parent's fd, symlinks made and never followed after,
setuid/setgid dropped, owners restored only as root (as tar does). Reads are
capped (`_MAX_READ` at once, 64 KiB per data chunk) and tarfile's list of
members is emptied as it goes, so memory does not grow with the tar.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager

from ateom.errors import AteomError, ErrorCode, quote
from ateom.volumes.archive import MemberKind, Meta, check_member, member_meta

_CHUNK = 1 << 16
# tarfile reads a pax or GNU long-name header whole: a tar claiming a 10 GiB
# header would be read into memory. No header ateom writes comes near this.
_MAX_READ = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_END_OF_ARCHIVE = b"\0" * 1024


class _BoundedFile(io.FileIO):
    """The snapshot file for tarfile: an fd (not closed here) whose single reads
    are capped, so no header can make tarfile read megabytes at once."""

    def read(self, size: int | None = -1, /) -> bytes:
        if size is None or size < 0 or size > _MAX_READ:
            raise tarfile.ReadError(f"a read of {size} bytes at once (a malformed header)")
        return super().read(size) or b""


def _corrupt(where: str, why: object) -> AteomError:
    return AteomError(f"{where}: not a readable tar archive ({why})",
                      code=ErrorCode.INVALID_ARGUMENT)


@contextmanager
def _reading(fd: int, where: str) -> Iterator[tarfile.TarFile]:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        with _BoundedFile(fd, "rb", closefd=False) as raw, \
                tarfile.open(fileobj=raw, mode="r:") as tar:
            yield tar
    except (tarfile.TarError, EOFError, UnicodeError, ValueError) as exc:
        raise _corrupt(where, exc) from None


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while (info := tar.next()) is not None:
        yield info
        # tarfile keeps every header it read; a million-member tar would
        # stay in memory whole. The members are used one at a time here.
        tar.members.clear()  # type: ignore[attr-defined]  # not in typeshed


def check_archive(fd: int, where: str) -> None:
    """Every member allowed, and the archive whole (reads headers only)."""
    seen: set[str] = set()
    directories: set[str] = set()
    with _reading(fd, where) as tar:
        for info in _members(tar):
            check_member(where, info, seen, directories)
        end = tar.offset
    # tarfile takes a truncated or garbled header after the first for the end
    # of the archive; a whole one ends in two zero blocks.
    if os.pread(fd, len(_END_OF_ARCHIVE), end) != _END_OF_ARCHIVE:
        raise _corrupt(where, f"no end-of-archive marker at byte {end}: truncated or corrupt")


def empty_dir(vol_fd: int) -> None:
    """Remove everything in the volume directory, following no symlink."""
    for name in os.listdir(vol_fd):
        st = os.stat(name, dir_fd=vol_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            # fd-based: rmtree refuses a symlink and never leaves the tree.
            shutil.rmtree(name, dir_fd=vol_fd)
        else:
            os.unlink(name, dir_fd=vol_fd)


class _Parents:
    """Directory fds of members' parents, each walked from the volume with
    ``O_NOFOLLOW``; the last one kept, as members come directory by directory."""

    def __init__(self, vol_fd: int, where: str) -> None:
        self._vol_fd, self._where = vol_fd, where
        self._path, self._fd = "", vol_fd

    def open(self, path: str) -> int:
        if path == self._path:
            return self._fd
        self.close()
        fd = os.dup(self._vol_fd)
        try:
            for part in path.split("/") if path else []:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except OSError as exc:
            os.close(fd)
            raise AteomError(f"{self._where}: directory {quote(path)}: {exc.strerror}"
                             " (a symlink or a non-directory on the way)",
                             code=ErrorCode.INVALID_ARGUMENT) from None
        self._path, self._fd = path, fd
        return fd

    def close(self) -> None:
        if self._fd != self._vol_fd:
            os.close(self._fd)
        self._path, self._fd = "", self._vol_fd


def _apply(fd: int, meta: Meta) -> None:
    """Owner (as root only, like tar), then mode, then mtime, on an open fd."""
    if os.geteuid() == 0:
        os.fchown(fd, meta.uid, meta.gid)
    os.fchmod(fd, meta.mode)
    os.utime(fd, ns=(meta.mtime_ns, meta.mtime_ns))


def extract(fd: int, vol_fd: int, where: str) -> None:
    """The members of a checked tar, created in the emptied volume directory."""
    seen: set[str] = set()
    directories: set[str] = set()
    made: list[tuple[str, Meta]] = []  # directories: their metadata after their contents
    parents = _Parents(vol_fd, where)
    try:
        with _reading(fd, where) as tar:
            for info in _members(tar):
                # Checked again: the rules must hold for what is written, not
                # only for what was read a moment ago.
                kind = check_member(where, info, seen, directories)
                parent_fd = parents.open(os.path.dirname(info.name))
                base = os.path.basename(info.name)
                if kind is MemberKind.DIRECTORY:
                    os.mkdir(base, 0o700, dir_fd=parent_fd)
                    made.append((info.name, member_meta(info)))
                elif kind is MemberKind.SYMLINK:
                    _make_symlink(info, base, parent_fd)
                else:
                    _make_file(tar, info, base, parent_fd, where)
        # Deepest first, so a read-only directory is closed after what is in it.
        for name, meta in reversed(made):
            dir_fd = parents.open(name)
            _apply(dir_fd, meta)
    finally:
        parents.close()


def _make_symlink(info: tarfile.TarInfo, base: str, parent_fd: int) -> None:
    os.symlink(info.linkname, base, dir_fd=parent_fd)
    meta = member_meta(info)
    if os.geteuid() == 0:
        os.chown(base, meta.uid, meta.gid, dir_fd=parent_fd, follow_symlinks=False)
    os.utime(base, ns=(meta.mtime_ns, meta.mtime_ns), dir_fd=parent_fd,
             follow_symlinks=False)


def _make_file(tar: tarfile.TarFile, info: tarfile.TarInfo, base: str, parent_fd: int,
               where: str) -> None:
    out = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                  0o600, dir_fd=parent_fd)
    try:
        src = tar.extractfile(info)
        if src is None:
            raise _corrupt(where, f"member {quote(info.name)}: no data")
        left = info.size
        while left:
            chunk = src.read(min(_CHUNK, left))
            if not chunk:
                raise _corrupt(where, f"member {quote(info.name)}: unexpected end of data")
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
            left -= len(chunk)
        _apply(out, member_meta(info))
    finally:
        os.close(out)
