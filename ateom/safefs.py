"""The one way ateom creates and replaces files: beneath a trusted directory, never
through a symlink, atomically.

ateom runs as root next to directories other parties write: the node agent
writes bundles, images bring their rootfs, and anyone who can write a
bundle can plant a symlink where ateom is about to write. So every file ateom
writes (bundle configs, kept originals, crash records, generated specs,
checkpoint records, logs) goes through here:

- the directory is opened from a *trusted* directory (`beneath`: the
  operator's --actors-root or --run-dir, opened normally) one component at a
  time with ``O_NOFOLLOW``: a symlink anywhere below it fails the write
  (``ELOOP``/``ENOTDIR``) instead of leading elsewhere;
- the temporary file is created ``O_CREAT | O_EXCL | O_NOFOLLOW`` through that
  directory fd under a random name, so nothing planted at a predictable name
  (``config.json.ateom-tmp``) is ever opened;
- ``rename`` through the directory fd replaces the final name itself (a
  symlink there is replaced, not followed): a reader sees the old or the new
  file, whole, even if ateom is killed at any point.

Durability (``durable``): an fsync of the file and of the directory makes the
rename survive power loss, at a cost per write (docs/performance.md, "Figures
behind the code"). A bundle
config does not need it: its life is the sandbox's, which power loss ends
too, and the node agent writes bundles afresh for every Run. ``kill -9`` of
ateom needs no fsync at all: the page cache outlives the process. Callers
pass ``durable=True`` only for what must outlive the machine (a checkpoint's
compatibility record, which travels with the image).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePathError(OSError):
    """`path` is not beneath the trusted directory it was to be written under."""


def _relative_parts(path: str, beneath: str) -> list[str]:
    """The components of `path` below `beneath` (pure); UnsafePathError if outside."""
    if "\0" in path or "\0" in beneath:
        raise UnsafePathError(errno.EINVAL, "path contains a NUL byte", path)
    base = os.path.normpath(beneath)
    full = os.path.normpath(path)
    rel = os.path.relpath(full, base)
    if not os.path.isabs(path) or rel == ".." or rel.startswith("../") or os.path.isabs(rel):
        raise UnsafePathError(errno.EXDEV, f"not beneath {base}", path)
    return [p for p in rel.split("/") if p not in ("", ".")]


@contextmanager
def open_dir(path: str, *, beneath: str, create: bool = False,
             mode: int = 0o755) -> Iterator[int]:
    """A directory fd of `path`, walked from `beneath` without following symlinks.

    `beneath` itself is opened normally (the operator's own setting may be
    reached through a symlink, like /var/run -> /run); nothing below it may be
    a symlink. With `create`, missing directories are made with `mode`.
    """
    parts = _relative_parts(path, beneath)
    if create:
        # The trusted directory is the operator's setting: made like any
        # directory the daemon needs (its own symlinks followed, as configured).
        os.makedirs(beneath, mode=mode, exist_ok=True)
    fd = os.open(beneath, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts:
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile: open whatever is there, still O_NOFOLLOW
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def makedirs(path: str, *, beneath: str, mode: int = 0o755) -> None:
    """mkdir -p `path` below `beneath`, refusing any symlink on the way."""
    with open_dir(path, beneath=beneath, create=True, mode=mode):
        pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_atomic(path: str, data: bytes, *, beneath: str, mode: int = 0o644,
                 durable: bool = False, make_parents: bool = False) -> None:
    """Replace `path` with `data` atomically; nothing below `beneath` is followed.

    The new file gets exactly `mode` (not narrowed by the umask). Raises
    OSError (UnsafePathError when `path` is outside `beneath`; ELOOP or
    ENOTDIR when a directory on the way is a symlink).
    """
    directory, name = os.path.split(os.path.normpath(path))
    if not name or name in (".", ".."):
        raise UnsafePathError(errno.EINVAL, "not a file name", path)
    with open_dir(directory, beneath=beneath, create=make_parents) as dir_fd:
        write_atomic_at(dir_fd, name, data, mode=mode, durable=durable)


def write_atomic_at(dir_fd: int, name: str, data: bytes, *, mode: int = 0o644,
                    durable: bool = False) -> None:
    """`write_atomic` into an open directory fd (`name` is a bare file name)."""
    staged = stage_at(dir_fd, name, data, mode=mode, durable=durable)
    commit_staged_at(dir_fd, staged, name, durable=durable)


def stage_at(dir_fd: int, name: str, data: bytes, *, mode: int = 0o644,
             durable: bool = False) -> str:
    """The first half of `write_atomic_at`: `data` in a new hidden file beside
    `name` (fsync'd when `durable`), whose name is returned for
    `commit_staged_at`, or for the caller to unlink. Nothing is replaced yet."""
    if "/" in name or "\0" in name or name in ("", ".", ".."):
        raise UnsafePathError(errno.EINVAL, "not a bare file name", name)
    # Named after the file for whoever finds a leftover; cut so a long name
    # still leaves room for the suffix within NAME_MAX.
    tmp = f".{os.fsdecode(os.fsencode(name)[:200])}.ateom-{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not narrow the mode asked for
            _write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        discard_staged_at(dir_fd, tmp)
        raise
    return tmp


def commit_staged_at(dir_fd: int, staged: str, name: str, *, durable: bool = False) -> None:
    """The second half: the staged file replaces `name` (the directory fsync'd
    when `durable`); on failure the staged file is removed."""
    try:
        os.rename(staged, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        discard_staged_at(dir_fd, staged)
        raise
    if durable:
        os.fsync(dir_fd)


def discard_staged_at(dir_fd: int, staged: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staged, dir_fd=dir_fd)


def read_file_at(dir_fd: int, name: str) -> tuple[bytes, int]:
    """The bytes and permission bits of regular file `name` in `dir_fd`, never
    following a symlink there (ELOOP) nor opening a FIFO or device (which could
    block or have side effects: EINVAL)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", name)
        chunks = []
        size = max(st.st_size, 0) + 1  # +1: a file that grew is still read whole
        while chunk := os.read(fd, size):
            chunks.append(chunk)
        return b"".join(chunks), stat.S_IMODE(st.st_mode)
    finally:
        os.close(fd)


def read_file(path: str, *, beneath: str) -> tuple[bytes, int]:
    """`read_file_at` for `path`, its directory walked from `beneath` (no symlinks)."""
    directory, name = os.path.split(os.path.normpath(path))
    with open_dir(directory, beneath=beneath) as dir_fd:
        return read_file_at(dir_fd, name)

