"""Tear a sandbox down, leaving nothing, or saying what it left.

TERM, a grace, KILL, delete (the sandbox root first: that destroys the
sandbox); then any runsc process still running with the actor's ``-root`` is
killed (a container a failed flow left ``created`` keeps its sandbox after
``delete -force``) and the state dir goes, with what runsc mounted in it
(`state_dir`).

Whatever the sandbox does, a teardown ends: every runsc call in it is bounded
(`ateom.runsc.commands.CONTROL_TIMEOUT`), and a sandbox that does not answer
one (its processes stopped, a wedged sentry: runsc's list, kill and delete
then all hang on it) is SIGKILLed by pid, after which runsc's deletes answer
at once. So a Terminate takes at most its grace plus a few seconds.
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
from ateom.process.exits import HeldProcesses, wait_exited
from ateom.runsc.commands import Runsc, RunscTimeout

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
        if entry.isdigit() and marker in _cmdline(entry):
            found.append(int(entry))
    return found


def _cmdline(pid: str) -> list[bytes]:
    """A process's argv; empty for a kernel thread or a process gone.

    A sandbox exiting by itself (as runsc 20260817's does once checkpointed)
    loses its main thread first: a zombie leader whose other threads are still
    tearing its memory down, and still holding its files. The leader's cmdline
    reads empty then; a thread still running reads it.
    """
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read()
        if not args:  # a kernel thread, or a process whose main thread is gone
            threads = [t for t in os.listdir(f"/proc/{pid}/task") if t != pid]
            if not threads:
                return []
            with open(f"/proc/{pid}/task/{threads[0]}/cmdline", "rb") as f:
                args = f.read()
    except OSError:
        return []
    return args.split(b"\0")


def _stop(runsc: Runsc, ordered: Sequence[str], grace: float) -> None:
    """TERM each container, wait up to `grace` for all to stop, then KILL.
    `RunscTimeout` when the sandbox does not answer (the caller kills it by pid)."""
    if grace > 0 and ordered:
        end = time.monotonic() + grace
        for name in ordered:
            runsc.kill(name, "TERM", timeout=max(end - time.monotonic(), _MIN_CALL))
        waiting = list(ordered)
        # Looked at soon, then less often: most apps stop soon after TERM, and a fixed
        # long sleep was most of a quick Terminate (docs/performance.md, "An actor's own
        # network"); each look is a runsc process, so not often for one that lingers.
        pause = 0.01
        while waiting and time.monotonic() < end:
            waiting = [n for n in waiting if runsc.status(n) not in ("stopped", "")]
            if waiting:
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
    for name in ordered:
        runsc.kill(name, "KILL")


# The least time a runsc call in a teardown is given, however little of the
# grace is left: runsc's own start-up takes part of it.
_MIN_CALL = 0.5


def _sigkill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class StoppedSandbox:
    """A sandbox being checkpointed: its processes listed and held while runsc
    saves it (`hold`, the save's ``meanwhile``), killed the moment the save has
    returned (`kill`, before the answer), waited for by its release (`teardown`).

    Listed while runsc saves, not after: once runsc checkpoint has returned, the
    sandbox is often exiting by itself already (release-20260817: its main
    thread gone, a zombie whose other threads are still tearing its memory down
    and still hold its files, the device nodes among them, for a while after
    the save's return, with or without a kill: docs/performance.md, "GPU
    hand-over"). Held by pidfd from before that, it is waited for until its
    last thread has gone (a pidfd turns readable only then): its GPUs are not
    handed over while it still has them open. Held, the kill never reaches a
    process that took a freed pid meanwhile. The kill ends what would not exit
    by itself (the root's gofer waits for `runsc delete` otherwise); the scan of
    /proc is off the call's path.

    Where pidfds cannot be had, `kill` lists them itself, by pid, right before
    it signals them (`sandbox_processes` sees a process whose main thread is
    gone through its other threads).
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._held: HeldProcesses | None = None
        self._pids: list[int] = []  # by pid, where pidfds cannot be had
        self.killed = False

    def hold(self) -> None:
        """List the sandbox's processes and hold them (reads /proc). Never raises:
        it runs beside a save that must not fail for it; `kill` lists them then."""
        try:
            self._held = HeldProcesses.open(sandbox_processes(self.root))
        except OSError as exc:
            log.warning("sandbox_processes_not_held", root=self.root, error=str(exc))

    def kill(self) -> None:
        """SIGKILL them (once; listed now, by pid, when `hold` held none)."""
        if self.killed:
            return
        self.killed = True
        if self._held is not None:
            self._held.kill()
        else:
            self._pids = sandbox_processes(self.root)
            _sigkill(self._pids)

    def wait_exited(self, timeout: float) -> list[int]:
        """Wait up to `timeout` s until they have all exited; the pids still running."""
        if self._held is not None:
            return self._held.wait(timeout)
        return wait_exited(self._pids, timeout)

    def close(self) -> None:
        if self._held is not None:
            self._held.close()


def kill_sandbox_processes(root: str) -> None:
    """SIGKILL every runsc process run with ``--root=<root>``; wait (5 s) for them to go."""
    leftovers = sandbox_processes(root)
    _sigkill(leftovers)
    if leftovers:
        log.warning("sandbox_processes_killed", pids=leftovers)
    wait_exited(leftovers, 5)


def teardown(runsc: Runsc, runsc_ids: Sequence[str], grace: float, *,
             stopped: StoppedSandbox | None = None,
             on_exited: Callable[[], None] | None = None) -> None:
    """Stop and delete apps then the sandbox root; clean the state dir.

    Skips what `runsc list` no longer shows; containers runsc lists that
    `runsc_ids` does not name are killed and deleted too. `stopped` (after a
    checkpoint): runsc checkpoint has just stopped every container, so neither
    a list nor a runsc kill is asked; its processes are killed (if they were
    not yet) and each container is still deleted, the root first (a
    sub-container's delete removes its rootfs overlay's
    ``.gvisor.filestore.*`` file, which a later start or restore of the bundle
    refuses to find there); `stopped` is closed once done with.
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
            if stopped is not None:
                _delete_checkpointed(runsc, runsc_ids, stopped, on_exited)
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


def _delete(runsc: Runsc, name: str) -> None:
    """runsc delete --force, bounded; one that does not answer is logged and left
    to the state dir's removal (the sandbox's processes are killed by then)."""
    with phase("runsc.delete", container=runsc.log_names.get(name, name)):
        try:
            runsc.delete(name)
        except RunscTimeout as exc:
            log.warning("runsc_delete_unanswered", container=name, error=str(exc))


def _delete_checkpointed(runsc: Runsc, runsc_ids: Sequence[str], stopped: StoppedSandbox,
                         on_exited: Callable[[], None] | None) -> None:
    try:
        stopped.kill()  # before the first delete: that runsc runs with the actor's --root too
        if on_exited is not None:
            # Waited for before the first delete, not beside it: the deletes are
            # bookkeeping that `on_exited` may hold back while the next actor boots.
            with phase("sandbox.exit"):
                running = stopped.wait_exited(EXIT_WAIT)
            if not running:
                on_exited()
    finally:
        stopped.close()
    for name in runsc_ids:
        _delete(runsc, name)


def _stop_and_delete(runsc: Runsc, runsc_ids: Sequence[str], grace: float) -> None:
    try:
        listed = runsc.list()
        known = set(runsc_ids) if listed is None else set(listed)
        present = [n for n in runsc_ids if n in known]
        _stop(runsc, list(reversed(present)), grace)  # apps first, sandbox root last
    except RunscTimeout as exc:
        # The sandbox does not answer runsc (stopped, wedged): nothing asked of it
        # through runsc would end. Killed by pid, its deletes answer at once.
        log.warning("sandbox_unresponsive", error=str(exc))
        with phase("sandbox.kill"):
            kill_sandbox_processes(runsc.target.root)
        known = set(runsc_ids)
        present = list(runsc_ids)
    # Deleted the sandbox root first: that destroys the sandbox and its
    # containers. A sub-container's own delete then may exit 128 ("no control
    # socket found", "connection refused") on runsc 20240729+; that is
    # tolerated, and the state dir goes below either way.
    for name in present:
        _delete(runsc, name)
    for name in sorted(known - set(present)):  # containers we never asked for
        try:
            runsc.kill(name, "KILL")
        except RunscTimeout:
            kill_sandbox_processes(runsc.target.root)
        _delete(runsc, name)
