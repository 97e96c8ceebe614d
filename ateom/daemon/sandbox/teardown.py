"""Tear a sandbox down, leaving nothing, or saying what it left.

TERM, a grace, KILL, delete (the sandbox root first: that destroys the
sandbox); then any runsc process still running with the actor's ``-root`` is
killed (a container a failed flow left ``created`` keeps its sandbox after
``delete -force``) and the state dir goes, with what runsc mounted in it
(`state_dir`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence

import structlog

from ateom.daemon.calls.phases import phase
from ateom.daemon.sandbox.state_dir import remove_state_dir
from ateom.errors import AteomError, ErrorCode
from ateom.process.exits import wait_exited
from ateom.runsc.commands import Runsc

log = structlog.get_logger("ateom.sandbox")

# A checkpointed sandbox, killed (`kill_stopped_sandbox`), is gone within
# milliseconds; one still there after this long (stuck in the kernel) is killed
# again with the rest below, and its GPUs wait for that.
EXIT_WAIT = 5.0


class TeardownIncomplete(AteomError):
    """The sandbox is gone, but its runsc state dir (or a mount in it) could not be
    removed: what stays is named. Terminate reports it; a completed save does not
    turn into a failure for it (see `AteomService.checkpoint_workload`)."""

    code = ErrorCode.INTERNAL


def sandbox_processes(root: str) -> list[int]:
    """Pids of runsc processes (sandbox, gofer...) run with ``--root=<root>`` (reads /proc)."""
    marker = f"--root={root}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if marker in args:
            found.append(int(entry))
    return found


def _stop(runsc: Runsc, ordered: Sequence[str], grace: float) -> None:
    """TERM each container, wait up to `grace` for all to stop, then KILL."""
    if grace > 0 and ordered:
        for name in ordered:
            runsc.kill(name, "TERM")
        deadline = time.monotonic() + grace
        waiting = list(ordered)
        while waiting and time.monotonic() < deadline:
            waiting = [n for n in waiting if runsc.status(n) not in ("stopped", "")]
            if waiting:
                time.sleep(0.05)
    for name in ordered:
        runsc.kill(name, "KILL")


def _sigkill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def kill_stopped_sandbox(pids: Sequence[int]) -> None:
    """SIGKILL a checkpointed sandbox's processes (`pids`, just listed).

    Once runsc checkpoint has returned, the image is whole and every container
    stopped: what the sandbox and its gofer have left is their exit, which they
    take 5-50 ms to reach by themselves and which the root's `runsc delete`
    forces (SIGKILL) only once that runsc has started and loaded its state,
    20-30 ms on. A GPU hand-over waits for that exit (the next actor gets the
    GPUs then): killed now, they are gone within the kernel's teardown, 0.1-6 ms
    (docs/performance.md, "GPU hand-over")."""
    _sigkill(pids)


def kill_sandbox_processes(root: str) -> None:
    """SIGKILL every runsc process run with ``--root=<root>``; wait (5 s) for them to go."""
    leftovers = sandbox_processes(root)
    _sigkill(leftovers)
    if leftovers:
        log.warning("sandbox_processes_killed", pids=leftovers)
    wait_exited(leftovers, 5)


def teardown(runsc: Runsc, runsc_ids: Sequence[str], grace: float, *,
             after_checkpoint: bool = False,
             on_exited: Callable[[], None] | None = None) -> None:
    """Stop and delete apps then the sandbox root; clean the state dir.

    Skips what `runsc list` no longer shows; containers runsc lists that
    `runsc_ids` does not name are killed and deleted too. `after_checkpoint`:
    runsc checkpoint has just stopped every container, so neither a list nor
    a kill is asked; each is still deleted, the root first (a sub-container's
    delete removes its rootfs overlay's ``.gvisor.filestore.*`` file, which a
    later start or restore of the bundle refuses to find there).
    The stopped sandbox's processes are killed first (`kill_stopped_sandbox`).
    `on_exited` (after a checkpoint only): called on this thread as soon as
    every process of the sandbox has exited, before any delete: from then on
    no process of the actor holds a device, so its GPUs can go to another
    actor before the rest of the teardown is done, and the deletes wait until
    it returns (the daemon lets the starts in flight go first there). Not
    called when they are still running after `EXIT_WAIT` (the caller frees
    them at the end).
    Raises `TeardownIncomplete` when the state dir (or a mount in it) could
    not be removed: a teardown leaves nothing, or says what it left.
    """
    left: list[str] = []
    with phase("teardown"):
        try:
            if after_checkpoint:
                _delete_checkpointed(runsc, runsc_ids, on_exited)
            else:
                _stop_and_delete(runsc, runsc_ids, grace)
        finally:
            # Whatever failed above, no process of this actor may outlive it
            # unseen (not shown, not counted, still holding its GPUs).
            kill_sandbox_processes(runsc.target.root)
            left = remove_state_dir(runsc.target.root)
    if left:
        raise TeardownIncomplete(f"teardown left {len(left)} thing(s) behind in the actor's"
                                 f" runsc state dir: {'; '.join(left[:5])}")


def _delete_checkpointed(runsc: Runsc, runsc_ids: Sequence[str],
                         on_exited: Callable[[], None] | None) -> None:
    # Listed before the first delete: that runsc runs with the actor's --root too.
    pids = sandbox_processes(runsc.target.root)
    kill_stopped_sandbox(pids)
    if on_exited is not None:
        # Waited for before the first delete, not beside it: the deletes are
        # bookkeeping that `on_exited` may hold back while the next actor boots.
        with phase("sandbox.exit"):
            running = wait_exited(pids, EXIT_WAIT)
        if not running:
            on_exited()
    for name in runsc_ids:
        with phase("runsc.delete", container=runsc.log_names.get(name, name)):
            runsc.delete(name)


def _stop_and_delete(runsc: Runsc, runsc_ids: Sequence[str], grace: float) -> None:
    listed = runsc.list()
    known = set(runsc_ids) if listed is None else set(listed)
    present = [n for n in runsc_ids if n in known]
    _stop(runsc, list(reversed(present)), grace)  # apps first, sandbox root last
    # Deleted the sandbox root first: that destroys the sandbox and its
    # containers. A sub-container's own delete then may exit 128 ("no control
    # socket found", "connection refused") on runsc 20240729+; that is
    # tolerated, and the state dir goes below either way.
    for name in present:
        with phase("runsc.delete", container=runsc.log_names.get(name, name)):
            runsc.delete(name)
    for name in sorted(known - set(present)):  # containers we never asked for
        runsc.kill(name, "KILL")
        runsc.delete(name)
