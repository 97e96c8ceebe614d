"""Waiting for processes that are not ours to exit, woken by the kernel.

A checkpointed sandbox is gone when the kernel has freed its memory and closed
its files; its GPUs are free once it and its gofers are gone. Polling /proc
for that costs a scan of every process per poll and up to a poll's interval in
latency; a pidfd becomes readable the moment its process has exited, every
thread of it (after the kernel closed its files and freed its memory), whoever
its parent. A process whose main thread has exited while others still run (a
sandbox exiting by itself) is not exited yet. `HeldProcesses` holds pidfds from
the moment processes are listed, so that what is signalled and waited for is
what was listed. Where pidfds are missing (Linux < 5.3, or a seccomp profile
refusing pidfd_open), /proc is polled instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import time
from collections.abc import Iterable

# Between two looks at /proc where pidfds cannot be had.
POLL_INTERVAL = 0.002


def alive(pid: int) -> bool:
    """Whether `pid` exists and has not exited (reads /proc/<pid>/stat): a zombie
    has, unless it is a main thread gone before the others, which still run
    (and still hold the process's memory and files)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # The state letter follows the command name's closing parenthesis.
        state = stat[stat.rfind(b")") + 2:][:1]
        if state in (b"Z", b"X"):
            return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False
    return state != b""


# task->flags bit set once a thread has begun to exit (include/linux/sched.h).
_PF_EXITING = 0x4


def exiting(pid: int) -> bool:
    """Whether `pid` has begun to exit and has not finished (reads /proc/<pid>/stat):
    its main thread is exiting, or gone before its other threads. Such a process
    may still hold its memory and files for a while (a large one: seconds)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # After the command name's closing parenthesis: state, ppid, pgrp, session,
    # tty_nr, tpgid, flags.
    fields = stat[stat.rfind(b")") + 2:].split()
    if len(fields) < 7 or not fields[6].isdigit():
        return False
    return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & _PF_EXITING)


def _open_pidfds(pids: Iterable[int]) -> dict[int, int] | None:
    """pidfd -> pid for the pids still running; None when pidfds cannot be had here."""
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            continue  # exited already
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
                return None
            raise
    return fds


class HeldProcesses:
    """Processes held by pidfds from the moment they were listed: signalled and
    waited for as the processes they were then, never one that took a pid freed
    meanwhile. `open` gives None where pidfds cannot be had (the caller then
    lists and signals by pid at the moment it acts)."""

    def __init__(self, fds: dict[int, int]) -> None:
        self._fds = fds  # pidfd -> pid, those not yet seen to exit

    @classmethod
    def open(cls, pids: Iterable[int]) -> HeldProcesses | None:
        fds = _open_pidfds(pids) if hasattr(os, "pidfd_open") else None
        return None if fds is None else cls(fds)

    def kill(self) -> None:
        """SIGKILL each (one that has exited already is skipped)."""
        for fd in self._fds:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)

    def wait(self, timeout: float) -> list[int]:
        """Wait up to `timeout` seconds until every one has exited; the pids still
        running after that (empty: all gone)."""
        end = time.monotonic() + timeout
        poller = select.poll()
        for fd in self._fds:
            poller.register(fd, select.POLLIN)
        while self._fds:
            left = end - time.monotonic()
            if left <= 0:
                break
            for fd, _events in poller.poll(max(1, int(left * 1000))):
                poller.unregister(fd)
                os.close(fd)
                del self._fds[fd]
        return sorted(self._fds.values())

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = {}

    def __enter__(self) -> HeldProcesses:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def wait_exited(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait up to `timeout` seconds until every process in `pids` has exited;
    the pids still running after that (empty: all gone)."""
    wanted = list(pids)
    held = HeldProcesses.open(wanted)
    if held is None:
        return _poll_proc(wanted, time.monotonic() + timeout)
    with held:
        return held.wait(timeout)


def _poll_proc(pids: list[int], end: float) -> list[int]:
    running = [p for p in pids if alive(p)]
    while running and time.monotonic() < end:
        time.sleep(POLL_INTERVAL)
        running = [p for p in running if alive(p)]
    return running
