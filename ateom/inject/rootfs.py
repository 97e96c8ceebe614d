"""Filesystem access confined to a container's rootfs.

The rootfs is the image's, so any of its path components may be a symlink
pointing outside it (``usr -> /``, ``usr/lib -> /etc``). Every path here is
resolved *as if the rootfs were /*: with ``openat2(RESOLVE_IN_ROOT |
RESOLVE_NO_MAGICLINKS)`` when the kernel has it, else with a walk that opens
one component at a time with ``O_NOFOLLOW`` and resolves symlinks itself,
clamping ``..`` and absolute targets at the rootfs. Final components are only
ever touched with ``*at`` calls that do not follow them (``symlinkat``,
``renameat``, ``fstatat(AT_SYMLINK_NOFOLLOW)``), so no write lands outside.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import uuid
from dataclasses import dataclass

from ateom.errors import InjectionError
from ateom.inject.linkpool import LinkPool

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_MAX_SYMLINK_HOPS = 40  # the kernel's own limit
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine())


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
# None until probed: True when openat2 works, False when the kernel or a
# seccomp filter refuses it (ENOSYS / EPERM), in which case the walk is used.
_openat2_works: bool | None = None if _SYS_OPENAT2 is not None else False


def _openat2_dir(root_fd: int, path: str) -> int:
    """openat2(root_fd, path, O_PATH|O_DIRECTORY, RESOLVE_IN_ROOT); raises OSError."""
    assert _SYS_OPENAT2 is not None
    how = _OpenHow(os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0,
                   _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    encoded = os.fsencode(path or ".")
    for _ in range(8):  # EAGAIN: a concurrent rename raced the lookup; retry
        fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(root_fd),
                           ctypes.c_char_p(encoded), ctypes.byref(how),
                           ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def _walk_dir(root_fd: int, path: str, create: bool) -> int | None:
    """Open directory `path` inside `root_fd` one O_NOFOLLOW component at a time.

    Symlinks met on the way are read and their targets resolved from the
    rootfs (absolute) or the current directory (relative); ``..`` never climbs
    above the rootfs. Missing directories are made when `create`. Returns an
    O_PATH fd, or None when a component is missing and not `create`.
    """
    pending = [c for c in reversed(path.split("/")) if c not in ("", ".")]
    stack = [os.dup(root_fd)]
    hops = 0
    try:
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            here = stack[-1]
            try:
                st = os.stat(name, dir_fd=here, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    return None
                try:
                    os.mkdir(name, 0o755, dir_fd=here)
                except FileExistsError:
                    pass  # raced with another creator: look again
                st = os.stat(name, dir_fd=here, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > _MAX_SYMLINK_HOPS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                target = os.readlink(name, dir_fd=here)
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                pending.extend(c for c in reversed(target.split("/")) if c not in ("", "."))
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
            # O_NOFOLLOW: if the entry was swapped for a symlink since the
            # stat, the open fails instead of following it.
            stack.append(os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
                                 | os.O_CLOEXEC, dir_fd=here))
        return stack.pop()
    finally:
        for fd in stack:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class Entry:
    """What sits at a name in a directory (never following it)."""

    kind: str  # "missing", "symlink", "dir" or "other"
    link_target: str | None = None


_MISSING = Entry("missing")


class ConfinedRoot:
    """A rootfs opened once; every lookup below it stays inside it.

    Use as a context manager. `use_openat2=False` forces the O_NOFOLLOW walk
    (tests run both resolvers).
    """

    def __init__(self, rootfs: str, *, use_openat2: bool | None = None) -> None:
        self.rootfs = rootfs
        self._use_openat2 = use_openat2
        try:
            self._fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise InjectionError(f"{rootfs}: cannot open rootfs: {e.strerror}") from e

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ConfinedRoot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open_dir(self, path: str, *, create: bool = False) -> int | None:
        """An O_PATH fd of directory `path` (rootfs-relative, "/" = the rootfs).

        None when it is missing and not `create`; with `create`, missing
        directories are made (mode 0755) inside the rootfs. Raises
        InjectionError when a component is not a directory or symlinks loop.
        The caller closes the fd.
        """
        global _openat2_works
        rel = path.lstrip("/")
        try:
            if self._use_openat2 is not False and _openat2_works is not False:
                try:
                    fd = _openat2_dir(self._fd, rel)
                    _openat2_works = True
                    return fd
                except OSError as e:
                    if e.errno in (errno.ENOSYS, errno.EPERM) and not _openat2_works:
                        _openat2_works = False  # kernel < 5.6 or seccomp: walk instead
                    elif e.errno == errno.ENOENT:
                        if not create:
                            return None
                    else:
                        raise
            return _walk_dir(self._fd, rel, create)
        except OSError as e:
            raise InjectionError(
                f"{self.rootfs}: cannot open directory {path} inside the rootfs: {e.strerror}"
            ) from e

    @staticmethod
    def entry(dir_fd: int, name: str) -> Entry:
        """What is at `name` in `dir_fd`, without following it."""
        # faccessat first: a fresh rootfs has none of the links, and "missing"
        # as a bool costs a third of a stat that raises FileNotFoundError.
        if not os.access(name, os.F_OK, dir_fd=dir_fd, follow_symlinks=False):
            return _MISSING
        try:
            return Entry("symlink", os.readlink(name, dir_fd=dir_fd))
        except FileNotFoundError:
            return _MISSING  # removed since
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
        # Not a symlink (EINVAL): a directory, or something a link may replace.
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return _MISSING
        return Entry("dir" if stat.S_ISDIR(st.st_mode) else "other")

    @staticmethod
    def place_symlink(dir_fd: int, name: str, target: str,
                      pool: LinkPool | None = None) -> bool:
        """Make `name` in `dir_fd` a symlink to `target`, atomically; True if changed.

        A link already pointing at `target` is left alone. A file or a
        symlink elsewhere is replaced by rename (the old name never dangles);
        a directory is refused. `name` must be a bare file name. With a
        `pool`, the link is a hard link to the pool's symlink inode when the
        filesystems allow it (see `ateom.inject.linkpool`).
        """

        def make(at: str) -> None:
            if pool is None or not bare_target or not pool.link(target, dir_fd, at):
                os.symlink(target, at, dir_fd=dir_fd)

        bare_target = "/" not in target and target not in ("", ".", "..")
        if "/" in name or name in ("", ".", ".."):
            raise InjectionError(f"refusing symlink name {name!r}: not a bare file name")
        # Create first, look only if something is there: the planner already
        # looked, so the name is almost always free and one syscall does it.
        try:
            make(name)
            return True
        except FileExistsError:
            pass
        current = ConfinedRoot.entry(dir_fd, name)
        if current.kind == "symlink" and current.link_target == target:
            return False
        if current.kind == "dir":
            raise InjectionError(f"cannot place symlink {name} -> {target}: a directory is there")
        # Named after the link for whoever finds a leftover, cut so that a
        # name near NAME_MAX still leaves room for the suffix.
        tmp = f".{os.fsdecode(os.fsencode(name)[:200])}.ateom-{uuid.uuid4().hex[:8]}"
        make(tmp)
        try:
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            os.unlink(tmp, dir_fd=dir_fd)
            raise
        return True
