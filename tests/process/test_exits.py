"""`wait_exited`: woken when processes that are not ours exit (pidfds), or by
looking at /proc where pidfds cannot be had; real processes throughout."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from ateom.process import exits
from tests.support.exiting_process import main_thread_gone


@pytest.fixture(params=["pidfd", "proc"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "proc":  # as under a seccomp profile that refuses pidfd_open
        def refused(pid: int, flags: int = 0) -> int:
            raise OSError(errno.ENOSYS, "pidfd_open")
        monkeypatch.setattr(exits.os, "pidfd_open", refused)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("this Python has no os.pidfd_open")
    yield request.param


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "30"])


def test_returns_once_every_process_has_exited(way: str) -> None:
    procs = [_sleeper(), _sleeper()]
    try:
        def kill_later() -> None:
            time.sleep(0.2)
            for p in procs:
                p.kill()
        threading.Thread(target=kill_later).start()
        started = time.monotonic()
        # Not reaped meanwhile: a zombie has exited (its files closed, its memory freed).
        assert exits.wait_exited([p.pid for p in procs], timeout=10) == []
        took = time.monotonic() - started
        assert 0.15 < took < 2, took
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_names_the_processes_still_running_after_the_timeout(way: str) -> None:
    running, done = _sleeper(), subprocess.Popen(["true"])
    try:
        done.wait()
        started = time.monotonic()
        assert exits.wait_exited([running.pid, done.pid], timeout=0.3) == [running.pid]
        assert 0.25 < time.monotonic() - started < 2
        assert exits.alive(running.pid) and not exits.alive(done.pid)
    finally:
        running.kill()
        running.wait()


def test_gone_and_empty_are_exited_at_once(way: str) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process
    started = time.monotonic()
    assert exits.wait_exited([gone.pid], timeout=5) == []
    assert exits.wait_exited([], timeout=5) == []
    assert time.monotonic() - started < 0.5


def test_no_pidfd_is_left_open() -> None:
    before = set(os.listdir("/proc/self/fd"))
    p = _sleeper()
    try:
        assert exits.wait_exited([p.pid], timeout=0.05) == [p.pid]
    finally:
        p.kill()
        p.wait()
    assert exits.wait_exited([p.pid], timeout=1) == []
    assert set(os.listdir("/proc/self/fd")) <= before


def test_a_process_whose_main_thread_is_gone_is_waited_for_until_its_last_thread(
        way: str) -> None:
    # As a checkpointed sandbox exits by itself: the main thread first, then the
    # rest, which still hold its memory and its files (its device nodes).
    with main_thread_gone(1.0) as proc:
        assert exits.alive(proc.pid)
        started = time.monotonic()
        assert exits.wait_exited([proc.pid], timeout=10) == []
        assert time.monotonic() - started > 0.3  # not at the main thread's exit
        assert not exits.alive(proc.pid)


def test_exiting_is_a_process_that_has_begun_to_exit_and_not_finished() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert not exits.exiting(sleeper.pid)  # running
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not exits.exiting(sleeper.pid)  # gone
    with main_thread_gone(1.0) as proc:  # its main thread exited, another still runs
        assert exits.exiting(proc.pid) and exits.alive(proc.pid)
