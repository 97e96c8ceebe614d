"""An actor's durable-dir data as snapshot files: written at a checkpoint (FULL
and DATA scope), put back at a restore (I/O).

`capture` writes one ``durable-<volume_name>.tar`` per volume into the
checkpoint directory (the walk is `ateom.volumes.walk`'s: no symlink ever
followed, symlinks stored as links); `restore` checks every volume's tar,
then empties each volume's directory and extracts its tar there
(`ateom.volumes.extract`, confined). The checkpoint and restore directories
are the node agent's and trusted; each volume directory is reached through
`ateom.volumes.confine.open_host_dir`, never through a symlink. A snapshot
file is written under a random name created ``O_EXCL | O_NOFOLLOW`` and
renamed over its final name, so nothing planted in the checkpoint directory
is ever opened.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tarfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from ateom import safefs
from ateom.errors import AteomError, ErrorCode, quote
from ateom.volumes.archive import snapshot_name
from ateom.volumes.confine import durable_label, open_host_dir
from ateom.volumes.extract import check_archive, empty_dir, extract
from ateom.volumes.mounts import DurableVolume, VolumeKind
from ateom.volumes.walk import Skipped, write_tree

_ROOT_FIELD = f"actor_dirs.{VolumeKind.DURABLE_DIR.root_field}"


@dataclass(frozen=True, slots=True)
class CaptureResult:
    """The snapshot files written (names in the checkpoint dir, sorted) and the
    entries left out or changed while read, for the caller to log."""

    files: tuple[str, ...]
    skipped: tuple[Skipped, ...] = ()


def _unique(volumes: Sequence[DurableVolume]) -> list[DurableVolume]:
    found: dict[str, DurableVolume] = {}
    for v in volumes:
        if found.setdefault(v.volume_name, v) != v:
            raise AteomError(f"{durable_label(v.volume_name)}: two host directories"
                             f" ({found[v.volume_name].host_dir}, {v.host_dir})",
                             code=ErrorCode.INTERNAL)
    return [found[name] for name in sorted(found)]


def _os_failure(label: str, what: str, exc: OSError) -> AteomError:
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return AteomError(f"{label}: {what}: {exc.strerror or exc}",
                      code=ErrorCode.RESOURCE_EXHAUSTED if full else ErrorCode.INTERNAL)


@contextmanager
def _trusted_dir(path: str, field: str) -> Iterator[int]:
    """The checkpoint or restore directory: the node agent's, opened normally."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise AteomError(f"actor_dirs.{field} {quote(path)}: cannot be opened"
                         f" ({exc.strerror})", code=ErrorCode.FAILED_PRECONDITION) from None
    try:
        yield fd
    finally:
        os.close(fd)


def _volume_dir(volume: DurableVolume) -> contextlib.AbstractContextManager[int]:
    return open_host_dir(volume.host_dir, root=volume.root, beneath=volume.beneath,
                         label=durable_label(volume.volume_name), root_field=_ROOT_FIELD)


def capture(volumes: Sequence[DurableVolume], checkpoint_dir: str, *,
            mode: int = 0o644, durable: bool = False) -> CaptureResult:
    """One ``durable-<name>.tar`` per volume in `checkpoint_dir`, each replacing
    any file of that name (a symlink there is replaced, never followed).

    On failure no snapshot file of this call is left behind. `durable` fsyncs
    the files and the directory.
    """
    written: list[str] = []
    skipped: list[Skipped] = []
    with _trusted_dir(checkpoint_dir, "checkpoint_dir") as dir_fd:
        try:
            for volume in _unique(volumes):
                name = snapshot_name(volume.volume_name)
                with _volume_dir(volume) as vol_fd:
                    skipped += _capture_one(volume.volume_name, vol_fd, dir_fd, name,
                                            mode=mode, durable=durable)
                written.append(name)
            if durable:
                os.fsync(dir_fd)
        except BaseException:
            for name in written:
                safefs.discard_staged_at(dir_fd, name)
            raise
    return CaptureResult(files=tuple(sorted(written)), skipped=tuple(skipped))


def _capture_one(volume_name: str, vol_fd: int, dir_fd: int, name: str, *,
                 mode: int, durable: bool) -> list[Skipped]:
    # A random temporary name, created O_EXCL | O_NOFOLLOW: nothing planted
    # in the checkpoint dir is ever opened; the rename replaces `name` itself.
    tmp = f".{name}.ateom-{secrets.token_hex(4)}"
    label = durable_label(volume_name)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=dir_fd)
    except OSError as exc:
        raise _os_failure(label, f"creating {name}", exc) from None
    try:
        with open(fd, "wb") as out:  # owns fd from here: closes it
            os.fchmod(fd, mode)  # the umask must not narrow it
            with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
                skipped = write_tree(tar, vol_fd, volume_name)
            out.flush()
            if durable:
                os.fsync(out.fileno())
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        safefs.discard_staged_at(dir_fd, tmp)
        raise _os_failure(label, f"writing {name}", exc) from None
    except BaseException:
        safefs.discard_staged_at(dir_fd, tmp)
        raise
    return skipped


def _open_snapshot(dir_fd: int, name: str, where: str, label: str) -> int:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except FileNotFoundError:
        raise AteomError(f"{label}: {where}: missing (the snapshot holds no data for this"
                         " volume)", code=ErrorCode.FAILED_PRECONDITION) from None
    except OSError as exc:
        raise AteomError(f"{label}: {where}: cannot be opened ({exc.strerror})",
                         code=ErrorCode.FAILED_PRECONDITION) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise AteomError(f"{label}: {where}: not a regular file",
                         code=ErrorCode.INVALID_ARGUMENT)
    return fd


def restore(volumes: Sequence[DurableVolume], restore_dir: str) -> None:
    """Each volume's directory made to hold exactly its snapshot's contents.

    Every tar is opened and checked, and every volume directory reached,
    before any volume is touched: a missing tar (FAILED_PRECONDITION) or a
    bad one (INVALID_ARGUMENT) changes nothing. Tars of volumes not named are
    ignored.
    """
    with _trusted_dir(restore_dir, "restore_dir") as dir_fd, contextlib.ExitStack() as stack:
        ready: list[tuple[DurableVolume, int, str]] = []
        for volume in _unique(volumes):
            name = snapshot_name(volume.volume_name)
            where = os.path.join(restore_dir, name)
            fd = _open_snapshot(dir_fd, name, where, durable_label(volume.volume_name))
            stack.callback(os.close, fd)
            check_archive(fd, where)
            with _volume_dir(volume):
                pass
            ready.append((volume, fd, where))
        for volume, fd, where in ready:
            label = durable_label(volume.volume_name)
            with _volume_dir(volume) as vol_fd:
                try:
                    empty_dir(vol_fd)
                    extract(fd, vol_fd, where)
                except OSError as exc:
                    raise _os_failure(label, f"restoring from {where}", exc) from None
