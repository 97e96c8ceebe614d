"""Child processes: spawn, wait, and reap every child (ateom may be PID 1).

runsc `create` forks the sandbox and gofer and exits, so those become our
children once we are PID 1 or a child subreaper. `runsc wait` misses fast
exits; the reliable news of a sandbox's exit is reaping it ourselves. So one
thread owns `waitpid(-1)`: it hands exit codes to whoever spawned the
process, and reports orphans (sandboxes) to watchers. Nothing else in the
daemon may wait on children: `subprocess` would race it, so every process
the daemon runs goes through `Reaper.run`.
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog

log = structlog.get_logger("ateom.reaper")

_PR_SET_CHILD_SUBREAPER = 36
# How long a child killed at its time limit is waited for before the call goes on.
KILLED_EXIT_WAIT = 10.0


def become_subreaper() -> bool:
    """Make orphaned descendants our children (prctl). True when set or when PID 1."""
    if os.getpid() == 1:
        return True
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def presize_fd_table(fd: int, size: int) -> list[tuple[int, int, int]]:
    """posix_spawn file actions that give the child an fd table of `size`
    entries (none for `size` <= 64, the table every process starts with):
    `fd` (the child's stdin: nothing new to it) dup'ed to `size` - 1, not
    close-on-exec.

    Why: growing the fd table of a process that has threads waits for an RCU
    grace period (the kernel's expand_fdtable: synchronize_rcu while the
    table is shared: docs/performance.md, "Figures behind the code"); growing
    it in the child before its exec (one thread) does not. A forked child's table is
    sized by its parent's highest open fd, so that fd stays open across the
    exec, for the processes the child forks in turn (runsc's sandbox, see
    `ateom.runsc.commands.FD_TABLE`).
    """
    if size <= 64:
        return []
    return [(os.POSIX_SPAWN_DUP2, fd, size - 1)]


@dataclass(frozen=True, slots=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int  # negative: killed by that signal (like subprocess)
    output: str = ""  # only for run_capture
    timed_out: bool = False


def _exists(pid: int) -> bool:
    """Whether a process (or a zombie not reaped yet) has `pid`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Reaper:
    """Owns every child of this process."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._spawned = 0  # generation: bumped on every spawn (wakes an idle reaper)
        self._pending: set[int] = set()
        self._exited: dict[int, int] = {}
        self._watchers: dict[int, Callable[[int, int], None]] = {}
        self._orphans: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._thread: threading.Thread | None = None
        self.subreaper = False
        self._per_pid = False

    def start(self, *, reap_all: bool = True) -> Reaper:
        """Start reaping. `reap_all` (the daemon) makes us subreaper and waits on every
        child; without it (embedding, tests sharing a process with `subprocess`
        users) only the processes this reaper spawned are waited for, each by pid.
        """
        with self._cond:
            if self._thread is None and not self._per_pid:
                if reap_all:
                    self.subreaper = become_subreaper()
                    self._thread = threading.Thread(target=self._loop, name="reaper",
                                                    daemon=True)
                    self._thread.start()
                else:
                    self._per_pid = True
        return self

    def _wait_one(self, pid: int) -> None:
        _, status = os.waitpid(pid, 0)
        with self._cond:
            self._pending.discard(pid)
            self._exited[pid] = os.waitstatus_to_exitcode(status)
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                generation = self._spawned
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                with self._cond:
                    if self._spawned == generation:
                        self._cond.wait(timeout=5.0)
                continue
            except InterruptedError:
                continue
            code = os.waitstatus_to_exitcode(status)
            with self._cond:
                if pid in self._pending:
                    self._pending.discard(pid)
                    self._exited[pid] = code
                    self._cond.notify_all()
                    continue
                watcher = self._watchers.pop(pid, None)
                self._orphans[pid] = code
                while len(self._orphans) > 1024:
                    self._orphans.popitem(last=False)
            if watcher is not None:
                watcher(pid, code)
            else:
                log.debug("reaped", pid=pid, exit_code=code)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdin: int,
        stdout: int,
        stderr: int,
        env: Mapping[str, str] | None = None,
        fd_table: int = 0,
    ) -> int:
        """Start `argv` with the given fds as its stdio; returns the pid.

        `fd_table` > 64: the child starts with room for that many fds, and so
        do the processes it forks while it keeps them (`presize_fd_table`).
        """
        actions = [
            (os.POSIX_SPAWN_DUP2, stdin, 0),
            (os.POSIX_SPAWN_DUP2, stdout, 1),
            (os.POSIX_SPAWN_DUP2, stderr, 2),
            *presize_fd_table(stdin, fd_table),
        ]
        with self._cond:
            if self._thread is None:
                self._per_pid = True  # never started: wait for our own children only
            # Holding the lock across spawn: the reaper cannot process this
            # pid's exit before it is registered as pending.
            pid = os.posix_spawnp(
                argv[0], list(argv), dict(os.environ if env is None else env),
                file_actions=actions,
            )
            self._pending.add(pid)
            self._spawned += 1
            self._cond.notify_all()
        if self._per_pid:
            threading.Thread(target=self._wait_one, args=(pid,), daemon=True).start()
        return pid

    def wait(self, pid: int, timeout: float | None = None) -> int | None:
        """Exit code of a process we spawned, or None if still running after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while pid not in self._exited:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(timeout=remaining)
            return self._exited.pop(pid)

    def watch(self, pid: int, callback: Callable[[int, int], None]) -> None:
        """Call `callback(pid, exit_code)` when orphan `pid` (e.g. a sandbox) is reaped.

        An exit already recorded for `pid` counts only if no process has the pid now:
        pids wrap (every few minutes on a busy worker), and the record may be an earlier
        process's, which would make a live sandbox look dead. A process that has the pid
        cannot have been reaped since it started (we reap it), so the record is stale."""
        with self._cond:
            if pid in self._orphans and not _exists(pid):
                code = self._orphans[pid]
            else:
                self._orphans.pop(pid, None)
                self._watchers[pid] = callback
                return
        callback(pid, code)

    def unwatch(self, pid: int) -> None:
        with self._cond:
            self._watchers.pop(pid, None)

    def run(
        self,
        argv: Sequence[str],
        *,
        log_path: str,
        stdout_path: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        meanwhile: Callable[[], None] | None = None,
        fd_table: int = 0,
    ) -> Completed:
        """Run `argv` to completion; stderr (and stdout unless `stdout_path`) append to `log_path`.

        Files are opened O_APPEND and stdin is an empty pipe: runsc hands its
        stdio to long-lived sandbox processes (so a pipe we read to EOF would
        never end) and chowns it to the sandbox user (so /dev/null would end
        up owned by nobody).

        `meanwhile`, when given, is called on this thread once the child is
        started, before waiting for it: work that can overlap the child's
        run without a second Python thread contending for the GIL on the way
        to the spawn (a worker thread submitted first can hold up this one's
        spawn by a switch interval per syscall). The child is
        waited for (and the timeout, counted from the spawn, applies) even
        when `meanwhile` raises; its exception is raised after that.
        `fd_table`: as for `spawn`.
        """
        # O_NOFOLLOW: the log dirs are ateom's own, a symlink there is not.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        err = os.open(log_path, flags, 0o640)
        out = os.open(stdout_path, flags, 0o640) if stdout_path else err
        r, w = os.pipe()
        try:
            os.close(w)
            pid = self.spawn(argv, stdin=r, stdout=out, stderr=err, env=env,
                             fd_table=fd_table)
        finally:
            os.close(err)
            if out != err:
                os.close(out)
            os.close(r)
        spawned = time.monotonic()
        try:
            if meanwhile is not None:
                meanwhile()
        finally:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - spawned))
            completed = self._finish(argv, pid, left, timeout)
        return completed

    def _finish(self, argv: Sequence[str], pid: int, left: float | None,
                timeout: float | None) -> Completed:
        """Wait up to `left` for `pid`; SIGKILL and reap it when it is still running."""
        code = self.wait(pid, left)
        if code is None:
            log.warning("timeout", argv=list(argv), timeout=timeout)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            # Bounded too: a process stuck in the kernel (uninterruptible I/O) takes
            # its SIGKILL only when it comes back; the reaper collects it then.
            code = self.wait(pid, KILLED_EXIT_WAIT)
            if code is None:
                log.error("killed_process_not_exited", argv=list(argv)[:6], pid=pid,
                          waited_s=KILLED_EXIT_WAIT)
                with self._cond:  # reaped as an orphan whenever it does exit
                    self._pending.discard(pid)
            return Completed(tuple(argv), code if code is not None else -9, timed_out=True)
        return Completed(tuple(argv), code)

    def run_capture(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
        timeout: float | None = 60.0, stderr_path: str | None = None,
    ) -> Completed:
        """Run `argv` and return its stdout (via a temp file, not a pipe).

        stderr goes to `stderr_path` when given, else into the output too.
        """
        with tempfile.NamedTemporaryFile(prefix="ateom-out-") as tmp:
            if stderr_path:
                done = self.run(argv, log_path=stderr_path, stdout_path=tmp.name, env=env,
                                timeout=timeout)
            else:
                done = self.run(argv, log_path=tmp.name, env=env, timeout=timeout)
            with open(tmp.name, encoding="utf-8", errors="replace") as f:
                output = f.read()
        return Completed(done.argv, done.returncode, output, done.timed_out)


_default: Reaper | None = None
_default_lock = threading.Lock()


def default_reaper() -> Reaper:
    """The process-wide reaper, started on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Reaper().start()
        return _default
