"""Waiting for processes that are not ours to exit, woken by the kernel.

A checkpointed sandbox, killed once `runsc checkpoint` has returned, is gone
when the kernel has freed its memory and closed its files (0.1-6 ms; 5-50 ms
when left to exit by itself); its GPUs are free once it and its gofer are
gone. Polling /proc for that costs a scan of every process per poll and up to
a poll's interval in latency; a pidfd becomes readable the moment its process
exits (after the kernel closed its files and freed its memory: exit_files and
exit_mm run before the exit is signalled), whoever its parent.
Where pidfds are missing (Linux < 5.3, or a seccomp profile refusing
pidfd_open), /proc is polled instead.
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Iterable

# Between two looks at /proc where pidfds cannot be had.
POLL_INTERVAL = 0.002


def alive(pid: int) -> bool:
    """Whether `pid` exists and has not exited (a zombie has: reads /proc/<pid>/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # The state letter follows the command name's closing parenthesis.
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X", b"")


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


def wait_exited(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait up to `timeout` seconds until every process in `pids` has exited;
    the pids still running after that (empty: all gone)."""
    wanted = list(pids)
    end = time.monotonic() + timeout
    fds = _open_pidfds(wanted) if hasattr(os, "pidfd_open") else None
    if fds is None:
        return _poll_proc(wanted, end)
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    try:
        while fds:
            left = end - time.monotonic()
            if left <= 0:
                break
            for fd, _events in poller.poll(max(1, int(left * 1000))):
                poller.unregister(fd)
                os.close(fd)
                del fds[fd]
        return sorted(fds.values())
    finally:
        for fd in fds:
            os.close(fd)


def _poll_proc(pids: list[int], end: float) -> list[int]:
    running = [p for p in pids if alive(p)]
    while running and time.monotonic() < end:
        time.sleep(POLL_INTERVAL)
        running = [p for p in running if alive(p)]
    return running
