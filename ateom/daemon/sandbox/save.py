"""Checkpointing a hosted actor's sandbox into the node agent's checkpoint_dir.

runsc saves the whole sandbox through its root container and leaves it
running or stopped depending on the release; ateom then tears it down and
reports the files the save wrote (new or changed), not what an earlier call
left in the same directory.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
from collections.abc import Callable, Sequence

from ateom import safefs
from ateom.daemon.calls.answer import after_answer
from ateom.daemon.calls.phases import phase
from ateom.daemon.sandbox.boot import Sandbox
from ateom.errors import AteomError, ErrorCode, quote
from ateom.runsc.commands import RunscError

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
    restore_dir is free at once (a rename: microseconds, where removing a large
    image takes tens of ms); `remove_set_aside` deletes it later. Its directory
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


def remove_set_aside(image: str, *, beneath: str) -> None:
    """Remove every image set aside beside `image` (this restore's, and any a
    crashed daemon left), through its directory's fd walked from `beneath`;
    never follows a symlink (shutil.rmtree refuses one)."""
    parent, name = os.path.split(os.path.normpath(image))
    prefix = _ASIDE.format(name=name)
    try:
        with safefs.open_dir(parent, beneath=beneath) as fd:
            for entry in os.listdir(fd):
                if entry.startswith(prefix):
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


def discard(image: str, *, beneath: str) -> None:
    """A consumed restore image: renamed aside now, removed once the call has its
    answer (`calls.answer`); removed in place, now, when it cannot be renamed.
    Everything through directory fds walked from `beneath` (--actors-root)."""
    with phase("image.discard"):
        if not set_aside(image, beneath=beneath):
            _remove_in_place(image, beneath=beneath)
            return
    after_answer(threading.Thread(target=remove_set_aside, args=(image,),
                                  kwargs={"beneath": beneath}, name="discard-image",
                                  daemon=True).start)


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


class SaveRefused(AteomError):
    """runsc would not save the sandbox and it is still running: nothing is lost."""

    code = ErrorCode.FAILED_PRECONDITION


def save(sandbox: Sandbox, image_path: str, uid: str, *, flags: Sequence[str] = (),
         phase_name: str = "runsc.checkpoint", timeout: float | None = None,
         meanwhile: Callable[[], None] | None = None) -> tuple[str, ...]:
    """runsc checkpoint of the sandbox root into `image_path`; the files it wrote.

    `meanwhile`: called once runsc checkpoint has started, while it runs
    (`Reaper.run`); what it writes into `image_path` is listed too.

    A failure with the sandbox still running is `SaveRefused` (e.g. a live CUDA
    context runsc cannot save, or cuda-checkpoint failing and undone: the actor
    keeps running and can try again); any other failure, a timeout included,
    is the RunscError, the sandbox in a state no one should resume.
    """
    runsc = sandbox.runsc
    root = sandbox.plan.root_id
    before = file_versions(image_path)
    try:
        with phase(phase_name, container=root):
            runsc.checkpoint(root, image_path, flags=flags, timeout=timeout,
                             meanwhile=meanwhile)
    except RunscError as exc:
        # Keep or terminate follows what happened to the sandbox, not runsc's
        # exit code: 20260817 refuses some saves and keeps the sandbox; 20240729
        # kills it for the same cause (nvproxy.frontendFD is not saveable).
        if not exc.timed_out and runsc.running(root):
            raise SaveRefused(f"runsc refused to checkpoint actor {uid}; it keeps running:"
                              f" {exc.reason}\n{exc.tail}") from exc
        raise
    with phase("image.list"):
        return written_files(before, file_versions(image_path))
