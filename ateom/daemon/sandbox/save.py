"""Checkpointing a hosted actor's sandbox into the node agent's checkpoint_dir.

runsc saves the whole sandbox through its root container and leaves it
running or stopped depending on the release; ateom then tears it down and
reports the files the save wrote (new or changed), not what an earlier call
left in the same directory.

Before: `check_room`, the image must fit (nothing is paused for a save that
cannot). After a failed save, the answer follows what became of the sandbox,
found out, not guessed from runsc's exit code (`fate`): a save that failed
after runsc paused the sandbox (a full disk, runsc killed) makes it exit by
itself (release-20260817; a large one takes the kernel a while to free, and
runsc state says "running" until it is gone); one that failed before (its
image file could not even be created) leaves it running. Either way the
files the failed save wrote are removed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Callable, Sequence

import structlog

from ateom import safefs
from ateom.daemon.calls.phases import phase
from ateom.daemon.calls.progress import progress
from ateom.daemon.sandbox.boot import Sandbox
from ateom.errors import AteomError, ErrorCode, quote
from ateom.process.exits import exiting, wait_exited
from ateom.runsc.commands import RunscError, RunscTimeout

log = structlog.get_logger("ateom.save")

MiB = 1 << 20

# What an image needs beyond the actor's memory as runsc reports it. The image
# measured a little smaller than the reported usage at every size
# (benchmarks/bench_faults.py, docs/performance.md "Faults"), so the usage alone
# covers it; the margin is for what the actor allocates between the sample and
# the pause, and the filesystem's own blocks.
IMAGE_MARGIN_BYTES = 16 * MiB
IMAGE_MARGIN_SHARE = 0.05

# How long a failed save's sandbox is watched for its exit to begin before it is
# judged alive: ten times the slowest exit measured after a save that failed
# once runsc had paused the sandbox (benchmarks/bench_faults.py, docs/
# performance.md "Faults"); one that failed before the pause runs on and never
# exits.
SETTLE_AFTER_FAILED_SAVE = 3.0
# Once it is exiting, how long its exit is waited for (a large sandbox's memory
# takes the kernel a while to free; its GPUs are not free before).
EXIT_AFTER_FAILED_SAVE = 60.0
_POLL = 0.05

FileVersion = tuple[int, int, int, int]  # inode, size, mtime, ctime


def make_image_dir(path: str) -> None:
    """Create the checkpoint dir if needed (FAILED_PRECONDITION when it cannot be one)."""
    try:
        os.makedirs(path, mode=0o750, exist_ok=True)
    except OSError as exc:
        raise AteomError(
            f"actor_dirs.checkpoint_dir {quote(path)}: cannot make it a directory:"
            f" {exc.strerror}; the actor keeps running",
            code=ErrorCode.FAILED_PRECONDITION) from None


# A consumed restore image, renamed aside: ".<name>.ateom-discarded-<hex>".
_ASIDE = ".{name}.ateom-discarded-"


def set_aside(image: str, *, beneath: str) -> bool:
    """Rename a consumed restore image to a unique sibling, so the node agent's
    restore_dir is free at once; `remove_set_aside` deletes it. Its directory
    is walked from `beneath` without following a symlink, and a symlink at
    `image` would be moved, never followed. False when it could not be renamed
    (the caller removes it in place)."""
    parent, name = os.path.split(os.path.normpath(image))
    try:
        with safefs.open_dir(parent, beneath=beneath) as fd:
            os.rename(name, _ASIDE.format(name=name) + secrets.token_hex(6),
                      src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        return False
    return True


def remove_set_aside(image: str, *, beneath: str, uid: str = "") -> None:
    """Remove every image set aside beside `image` (this restore's, and any a
    crashed daemon left), through its directory's fd walked from `beneath`;
    never follows a symlink (shutil.rmtree refuses one). Its progress is told
    for actor `uid` (a large image takes a while to remove)."""
    parent, name = os.path.split(os.path.normpath(image))
    prefix = _ASIDE.format(name=name)
    try:
        with safefs.open_dir(parent, beneath=beneath) as fd:
            aside = [e for e in os.listdir(fd) if e.startswith(prefix)]
            if not aside:
                return
            paths = [os.path.join(parent, e) for e in aside]
            size = sum(image_size(p) for p in paths)
            with progress("image.remove", uid, expected_bytes=size, images=paths,
                          measure=lambda: size - sum(image_size(p) for p in paths)):
                for entry in aside:
                    shutil.rmtree(entry, dir_fd=fd, ignore_errors=True)
    except OSError:
        return  # the actor's dir went meanwhile: nothing left to remove


def _remove_in_place(image: str, *, beneath: str) -> None:
    parent, name = os.path.split(os.path.normpath(image))
    try:
        with safefs.open_dir(parent, beneath=beneath) as fd:
            shutil.rmtree(name, dir_fd=fd, ignore_errors=True)
    except OSError:
        return


def discard(image: str, *, beneath: str, uid: str = "") -> None:
    """Actor `uid`'s consumed restore image, removed before the call answers: the
    actor's dirs are the node agent's once it has its answer, so nothing of ateom's
    may still be deleting in them then (docs/daemon.md, "The actor's dirs"). Renamed
    aside first (a rename frees the node agent's restore_dir name at once, whatever
    happens next), then removed with any a crashed daemon left beside it; removed in
    place when it cannot be renamed. The restored sandbox may still hold the image's
    files open (a background restore reads them lazily): unlinking them then frees
    nothing yet and costs microseconds; their blocks go when it closes them.
    Everything through directory fds walked from `beneath` (--actors-root)."""
    with phase("image.discard"):
        if not set_aside(image, beneath=beneath):
            _remove_in_place(image, beneath=beneath)
            return
        remove_set_aside(image, beneath=beneath, uid=uid)


def image_size(top: str) -> int:
    """Bytes in the files under `top` (stats, never follows links; 0 when absent)."""
    return sum(v[1] for v in file_versions(top).values())


def file_versions(top: str) -> dict[str, FileVersion]:
    """Relative path -> version of each file under `top` (stats, never follows links)."""
    versions = {}
    for d, _, names in os.walk(top):
        for name in names:
            path = os.path.join(d, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            versions[os.path.relpath(path, top)] = (st.st_ino, st.st_size, st.st_mtime_ns,
                                                    st.st_ctime_ns)
    return versions


def written_files(before: dict[str, FileVersion],
                  after: dict[str, FileVersion]) -> tuple[str, ...]:
    """The files new or changed between two `file_versions` (pure)."""
    return tuple(sorted(f for f, v in after.items() if before.get(f) != v))


def image_bytes_needed(memory_bytes: int, gpu_memory_bytes: int = 0) -> int:
    """What a checkpoint image of an actor using this much memory (and GPU memory,
    which cuda-checkpoint moves into the sandbox's memory before the save) needs
    on disk (pure)."""
    held = memory_bytes + gpu_memory_bytes
    return held + IMAGE_MARGIN_BYTES + int(held * IMAGE_MARGIN_SHARE)


def free_bytes(path: str) -> tuple[int, str]:
    """The free space (for an unprivileged writer: the root-reserved blocks are
    not counted) of the filesystem `path` will be on, and the existing directory
    it was measured at (`path` itself, or its nearest existing parent)."""
    at = os.path.abspath(path)
    while not os.path.isdir(at) and os.path.dirname(at) != at:
        at = os.path.dirname(at)
    st = os.statvfs(at)
    return st.f_bavail * st.f_frsize, at


def check_room(image_path: str, need: int, uid: str, *, what: str) -> None:
    """RESOURCE_EXHAUSTED, naming both sizes and the dir, when the checkpoint dir's
    filesystem has less free space than `need` (stats the filesystem; writes nothing)."""
    try:
        free, at = free_bytes(image_path)
    except OSError as exc:
        raise AteomError(f"actor_dirs.checkpoint_dir {quote(image_path)}: cannot measure its"
                         f" free space: {exc.strerror}; actor {uid} keeps running",
                         code=ErrorCode.FAILED_PRECONDITION) from None
    if free < need:
        raise AteomError(
            f"checkpoint of actor {uid} refused before anything was paused, it keeps running:"
            f" its image needs about {need / MiB:.1f} MiB ({what}) and"
            f" {quote(image_path)} has {free / MiB:.1f} MiB free (measured at {quote(at)})",
            code=ErrorCode.RESOURCE_EXHAUSTED)


class SaveRefused(AteomError):
    """runsc would not save the sandbox and it is still running: nothing is lost."""

    code = ErrorCode.FAILED_PRECONDITION


class SandboxLost(AteomError):
    """A save failed and the sandbox did not survive it (it exited, or it no longer
    answers runsc): the actor's state is lost. The caller tears it down."""

    code = ErrorCode.DATA_LOSS


def fate(sandbox: Sandbox, reaped: Callable[[], bool], *, settle: float | None = None) -> str:
    """After a failed save: "" when the sandbox runs on, else what became of it.

    Watches the sandbox process (up to `settle` s) for its exit, as it exits
    after a save that failed once runsc had paused it; one seen exiting is
    waited for until it is gone (`EXIT_AFTER_FAILED_SAVE` at most: its memory
    and devices go with it). Then asks runsc that every container is running,
    not paused, its process alive (each call bounded). `reaped`: whether the
    daemon's reaper has seen the sandbox exit.
    """
    settle = SETTLE_AFTER_FAILED_SAVE if settle is None else settle
    started = time.monotonic()
    gone = _exited(sandbox.pid, started + settle, reaped)
    if gone:
        return (f"its sandbox exited {time.monotonic() - started:.1f} s after the failed"
                " save")
    for c in sandbox.plan.containers:
        try:
            why = sandbox.runsc.not_running(c.runsc_id)
        except RunscTimeout:
            return "its sandbox no longer answers runsc after the failed save"
        if why:
            return f"its container {c.name} {why} after the failed save"
    return ""


def _exited(pid: int, settle_until: float, reaped: Callable[[], bool]) -> bool:
    """Whether `pid` exits (or begins to) before `settle_until`; one that begins is
    waited for until it is gone (woken by a pidfd, bounded)."""
    if reaped():
        return True
    while pid and time.monotonic() < settle_until:
        if reaped() or not wait_exited([pid], _POLL):
            return True
        if exiting(pid):
            wait_exited([pid], EXIT_AFTER_FAILED_SAVE)
            return True
    return False


def remove_written(image_path: str, before: dict[str, FileVersion], *, beneath: str) -> list[str]:
    """Remove what a failed save wrote into `image_path` (new or changed files since
    `before`), each through its directory's fd walked from `beneath`, never
    following a symlink; the names removed."""
    removed = []
    for name in written_files(before, file_versions(image_path)):
        parent, base = os.path.split(os.path.join(os.path.normpath(image_path), name))
        try:
            with safefs.open_dir(parent, beneath=beneath) as fd:
                os.unlink(base, dir_fd=fd)
            removed.append(name)
        except OSError as exc:
            log.warning("failed_save_file_left", file=name, error=exc.strerror)
    return removed


def save(sandbox: Sandbox, image_path: str, uid: str, *, beneath: str,
         flags: Sequence[str] = (), timeout: float | None = None,
         while_saving: Callable[[], None] | None = None,
         reaped: Callable[[], bool] = lambda: False) -> tuple[str, ...]:
    """runsc checkpoint of the sandbox root into `image_path`; the files it wrote.

    `flags`: a GPU save's (runsc runs cuda-checkpoint in the sandbox first: the
    phase is ``cuda-checkpoint``, else ``runsc.checkpoint``). `while_saving`:
    called once runsc checkpoint has started, while it runs (`Reaper.run`); what
    it writes into `image_path` is listed too.

    A failed save (a timeout included) removes what it wrote and is judged by
    what became of the sandbox (`fate`): still running, `SaveRefused` (e.g. a
    checkpoint dir runsc cannot write, a live CUDA context it cannot save: the
    actor keeps running and can try again); dead or not answering,
    `SandboxLost`, carrying runsc's reason.
    """
    runsc = sandbox.runsc
    root = sandbox.plan.root_id
    before = file_versions(image_path)
    try:
        with phase("cuda-checkpoint" if flags else "runsc.checkpoint", container=root):
            runsc.checkpoint(root, image_path, flags=flags, timeout=timeout,
                             meanwhile=while_saving)
    except RunscError as exc:
        with phase("image.clear"):
            removed = remove_written(image_path, before, beneath=beneath)
        with phase("save.settle"):
            lost = fate(sandbox, reaped)
        said = str(exc) if exc.timed_out else (
            exc.reason or exc.tail.strip().rsplit("\n", 1)[-1][-300:] or "no reason logged")
        cleared = (f"; the {len(removed)} file(s) it wrote were removed from"
                   f" {quote(image_path)}" if removed else "")
        if not lost:
            raise SaveRefused(f"runsc refused to checkpoint actor {uid}; it keeps running:"
                              f" {said}{cleared}\n{exc.tail}") from exc
        raise SandboxLost(f"checkpoint of actor {uid} failed and the actor was lost: {lost};"
                          f" runsc: {said}{cleared}; nothing was saved, and its GPUs and slot"
                          " are free") from exc
    with phase("image.list"):
        return written_files(before, file_versions(image_path))
