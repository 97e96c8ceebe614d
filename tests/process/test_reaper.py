"""The reaper with real processes: every child spawned, waited for and reaped,
each wait bounded."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ateom.process.reaper import Reaper


def test_run_appends_to_log_and_reports_exit_codes(tmp_path: Path) -> None:
    reaper = Reaper()
    log = tmp_path / "c.log"
    log.write_text("before\n")
    done = reaper.run(["sh", "-c", "echo out; echo err >&2; read x || exit 3"],
                      log_path=str(log))
    assert done.returncode == 3  # stdin is an empty pipe, not a terminal or /dev/null
    assert log.read_text() == "before\nout\nerr\n"
    killed = reaper.run(["sh", "-c", "kill -9 $$"], log_path=str(log))
    assert killed.returncode == -9


def _fd_sizes(log: Path) -> list[int]:
    return [int(line.split()[1]) for line in log.read_text().splitlines()
            if line.startswith("FDSize:")]


def test_fd_table_is_presized_for_the_child_and_what_it_forks(tmp_path: Path) -> None:
    # sh's own table, then a child sh forks (grep): sized by sh's highest open fd,
    # so that one must have stayed open across sh's exec.
    script = "grep FDSize /proc/$$/status; grep FDSize /proc/self/status; true"
    log = tmp_path / "l"
    done = Reaper().run(["sh", "-c", script], log_path=str(log), fd_table=512)
    assert done.returncode == 0
    assert _fd_sizes(log) == [512, 512]
    # Stdin is still the empty pipe (the fd at 511 is a copy of it).
    done = Reaper().run(["sh", "-c", "read x || exit 3"], log_path=str(log), fd_table=512)
    assert done.returncode == 3


def test_timeout_kills(tmp_path: Path) -> None:
    done = Reaper().run(["sleep", "30"], log_path=str(tmp_path / "l"), timeout=0.2)
    assert done.timed_out and done.returncode == -9


def test_a_child_that_does_not_take_its_kill_does_not_hold_the_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As a process stuck in uninterruptible I/O: its SIGKILL lands only later.
    import signal
    import time

    from ateom.process import reaper as reaper_module

    monkeypatch.setattr(reaper_module, "KILLED_EXIT_WAIT", 0.3)
    r = Reaper()
    spawned: list[int] = []
    spawn = r.spawn
    monkeypatch.setattr(r, "spawn", lambda *a, **k: spawned.append(spawn(*a, **k)) or spawned[-1])
    real_kill = os.kill
    monkeypatch.setattr(reaper_module.os, "kill", lambda pid, sig: None)
    started = time.monotonic()
    try:
        done = r.run(["sleep", "30"], log_path=str(tmp_path / "log"), timeout=0.2)
        assert done.timed_out and time.monotonic() - started < 5
    finally:
        real_kill(spawned[0], signal.SIGKILL)


def test_meanwhile_runs_while_the_child_runs(tmp_path: Path) -> None:
    # The child exits only once `meanwhile` has written to the FIFO it reads: so
    # `meanwhile` ran after the spawn and before the wait (else: the timeout).
    fifo, out = tmp_path / "fifo", tmp_path / "out"
    os.mkfifo(fifo)

    def meanwhile() -> None:
        with open(fifo, "w") as f:
            f.write("written meanwhile\n")

    done = Reaper().run(["sh", "-c", f"read line < {fifo}; echo \"$line\" > {out}"],
                        log_path=str(tmp_path / "l"), timeout=30, meanwhile=meanwhile)
    assert not done.timed_out and done.returncode == 0
    assert out.read_text() == "written meanwhile\n"


def test_meanwhile_failing_still_reaps_the_child(tmp_path: Path) -> None:
    reaper = Reaper()
    marker = tmp_path / "ran"

    def meanwhile() -> None:
        raise OSError("bundle write failed")

    with pytest.raises(OSError, match="bundle write failed"):
        reaper.run(["sh", "-c", f"sleep 0.1; touch {marker}"], log_path=str(tmp_path / "l"),
                   timeout=30, meanwhile=meanwhile)
    # Raised only after the child ran to its end and was reaped: nothing left behind.
    assert marker.exists()
    assert not reaper._pending and not reaper._exited


def test_meanwhile_counts_against_the_timeout(tmp_path: Path) -> None:
    # The timeout runs from the spawn: a `meanwhile` that outlasts it leaves
    # the child killed at once (sleep 30 would otherwise hold the test).
    never = threading.Event()

    def meanwhile() -> None:
        never.wait(0.5)

    done = Reaper().run(["sleep", "30"], log_path=str(tmp_path / "l"), timeout=0.2,
                        meanwhile=meanwhile)
    assert done.timed_out and done.returncode == -9


def test_capture_separates_stderr(tmp_path: Path) -> None:
    err = tmp_path / "err.log"
    done = Reaper().run_capture(["sh", "-c", "echo out; echo noise >&2"],
                                stderr_path=str(err))
    assert done.output == "out\n" and err.read_text() == "noise\n"


PID_REUSE = """
import os, sys, time
from ateom.process.reaper import Reaper

d = sys.argv[1]
reaper = Reaper().start(reap_all=True)
# An orphan (a backgrounded sleep whose shell exits) is reaped by us: its exit recorded.
reaper.run(["sh", "-c", f"sleep 0.2 & echo $! > {d}/old"], log_path="/dev/null")
old = int(open(f"{d}/old").read())
time.sleep(0.6)
# A new long-lived orphan given the same pid, as pids wrap (this namespace's own counter).
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(old - 2))  # sh takes old - 1, its backgrounded sleep old
reaper.run(["sh", "-c", f"sleep 30 & echo $! > {d}/new"], log_path="/dev/null")
new = int(open(f"{d}/new").read())
seen = []
reaper.watch(new, lambda pid, code: seen.append(code))  # as a sandbox's pid is watched
at_once = list(seen)
os.kill(new, 9)
deadline = time.monotonic() + 10
while not seen and time.monotonic() < deadline:
    time.sleep(0.05)
print(old, new, at_once, seen)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a pid namespace of its own")
def test_a_live_process_with_a_reaped_orphans_pid_is_watched_not_taken_for_exited(
        tmp_path: Path) -> None:
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                           "-c", PID_REUSE, str(tmp_path)], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    old, new, at_once, seen = done.stdout.splitlines()[-1].split(maxsplit=3)
    assert old == new, "the pid was not reused: the test could not stage a wrap"
    assert at_once == "[]"  # the earlier process's exit is not this one's
    assert seen.strip() == "[-9]"  # its own exit, when it came
