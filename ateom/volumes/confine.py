"""Whether each planned volume's host directory is really there (I/O: opens
directories, writes nothing).

A volume's host directory is a bind-mount source runsc hands the sandbox,
read-write for durable and CSI volumes. The directories around it belong to
other parties (the node agent writes them; a CSI driver mounts there), so a
symlink anywhere between the trusted directory and the volume could point
the sandbox at the host's /etc or at another actor's data. Each component is
opened ``O_NOFOLLOW | O_DIRECTORY`` from the trusted directory
(`ateom.safefs.open_dir`), which alone is opened normally. Runs before any
runsc call; `open_host_dir` is also how `ateom.volumes.durable` reaches a
volume.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from ateom import safefs
from ateom.errors import AteomError, ErrorCode, quote
from ateom.volumes.mounts import MountPlan, VolumeKind

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _what_is(name: str, dir_fd: int) -> str:
    """What `name` is, for a message (lstat; never follows)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        return exc.strerror or "cannot be opened"
    if stat.S_ISLNK(st.st_mode):
        try:
            return f"a symlink (to {quote(os.readlink(name, dir_fd=dir_fd))}), not a directory"
        except OSError:
            return "a symlink, not a directory"
    return "not a directory"


def _refused(exc: OSError, label: str, path: str, hint: str) -> AteomError:
    if isinstance(exc, FileNotFoundError):
        return AteomError(f"{label}: {path}: missing ({hint})",
                          code=ErrorCode.FAILED_PRECONDITION)
    if exc.errno in (errno.ENOTDIR, errno.ELOOP, errno.EXDEV):
        return AteomError(f"{label}: {path}: a symlink or a non-directory on the way"
                          f" ({exc.strerror}); {hint}", code=ErrorCode.INVALID_ARGUMENT)
    return AteomError(f"{label}: {path}: cannot be opened ({exc.strerror})",
                      code=ErrorCode.FAILED_PRECONDITION)


@contextmanager
def open_host_dir(host_dir: str, *, root: str, beneath: str, label: str,
                  root_field: str) -> Iterator[int]:
    """A directory fd of `host_dir` (``root/<volume name>``), never through a symlink.

    `root` is walked from `beneath` (the trusted directory) one component at a
    time with ``O_NOFOLLOW``, then the volume's own directory. `label` names the
    volume in messages, `root_field` the ActorDirs field of `root`. Missing:
    FAILED_PRECONDITION; a symlink or a non-directory: INVALID_ARGUMENT.
    """
    parent, name = os.path.split(host_dir)
    if parent != root or name in ("", ".", ".."):
        raise AteomError(f"{label}: {host_dir}: not a directory of {root_field} {root}",
                         code=ErrorCode.INTERNAL)
    hint = f"the node agent prepares one directory per volume under {root_field}"
    try:
        with safefs.open_dir(root, beneath=beneath) as root_fd:
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
            except FileNotFoundError as exc:
                raise _refused(exc, label, host_dir, hint) from None
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    # O_NOFOLLOW | O_DIRECTORY says ENOTDIR for a symlink too:
                    # look, so the message says which.
                    raise AteomError(f"{label}: {host_dir}: {_what_is(name, root_fd)}"
                                     " (a volume must be a directory of its own, never"
                                     " a symlink)", code=ErrorCode.INVALID_ARGUMENT) from None
                raise _refused(exc, label, host_dir, hint) from None
    except OSError as exc:  # the walk to `root` itself
        raise _refused(exc, f"{label}: {root_field}", root,
                       f"walked from {beneath} without following symlinks") from None
    try:
        yield fd
    finally:
        os.close(fd)


def check_host_dirs(plan: MountPlan) -> None:
    """Every host directory of `plan` is a directory reached from its trusted
    directory without a symlink (opens each; writes nothing)."""
    for volume in plan.volumes:
        with open_host_dir(volume.host_dir, root=volume.root, beneath=volume.beneath,
                           label=volume.describe(),
                           root_field=f"actor_dirs.{volume.kind.root_field}"):
            pass


def durable_label(volume_name: str) -> str:
    """How durable.py's messages name a volume (no container: a snapshot is the actor's)."""
    return f"{VolumeKind.DURABLE_DIR.value} volume {quote(volume_name)}"
