"""Running a tool (runsc, nvidia-ctk, nvidia-smi, cuda-checkpoint) with a time limit.

The gatherers and the doctor never call `subprocess` themselves: they take a
`Runner`, so tests can hand them a stand-in, and the daemon can hand them a
runner over its reaper (`reaper_runner`: its waitpid must be the only one on
the daemon's children). The contract: argv -> (exit code, stdout+stderr),
never raising for a command that could not start (127) or ran out of time
(124), so one code path handles every way a tool can fail.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import Protocol

from ateom.process.reaper import Reaper

# What a runner answers for a command it gave up on (as timeout(1) does) and
# for one it could not start (as a shell does).
TIMED_OUT = 124
NOT_RUN = 127


class Runner(Protocol):
    """argv -> (exit code, stdout+stderr); 124 when it timed out, 127 when not started."""

    def __call__(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60.0
    ) -> tuple[int, str]: ...


def subprocess_runner(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60.0
) -> tuple[int, str]:
    """Run `argv` (starts a process); an exec failure or timeout is exit 127/124 with why.

    The command gets its own process group, killed whole on timeout: a stand-in
    script's children (a hung ``sleep``) must not outlive it.
    """
    try:
        proc = subprocess.Popen(
            list(argv), env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace", start_new_session=True,
        )
    except OSError as exc:
        return NOT_RUN, f"{argv[0]}: {exc.strerror or exc}"
    with proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return TIMED_OUT, f"{argv[0]}: timed out after {timeout:g}s"
        except BaseException:
            _kill_group(proc)
            raise
    return proc.returncode, out


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def reaper_runner(reaper: Reaper) -> Runner:
    """A runner over a `Reaper.run_capture` (the daemon's, whose waitpid must be
    the only one on its children): its timeout is 124, a command it could not
    start 127, as `subprocess_runner`'s."""

    def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            timeout: float = 60.0) -> tuple[int, str]:
        try:
            done = reaper.run_capture(argv, env=env, timeout=timeout)
        except OSError as exc:
            return NOT_RUN, f"{argv[0]}: {exc.strerror or exc}"
        if done.timed_out:
            return TIMED_OUT, f"{argv[0]}: timed out after {timeout:g}s"
        return int(done.returncode), str(done.output)

    return run


def give_up_after_a_timeout(run: Runner, limit: float) -> Runner:
    """`run` with at most `limit` seconds per command, and no command at all once
    one timed out.

    runsc is probed with several commands; a binary that hangs on the first
    hangs on all, so one timeout is the whole cost.
    """
    timed_out: list[str] = []

    def bounded(
        argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = limit
    ) -> tuple[int, str]:
        if timed_out:
            return TIMED_OUT, f"{argv[0]}: not run: {timed_out[0]}"
        code, out = run(argv, env=env, timeout=min(timeout, limit))
        if code == TIMED_OUT:
            timed_out.append(out.strip())
        return code, out

    return bounded
