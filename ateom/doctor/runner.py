"""How the doctor runs commands (runsc, nvidia-ctk, nvidia-smi, cuda-checkpoint).

One contract for every command: argv -> (exit code, stdout+stderr), 124 for
a command given up on, 127 for one that could not start, never raising. It
is `ateom.process.runner`'s, so the GPU gatherers take the doctor's runner
as they are. The CLI runs commands with `subprocess`; inside the daemon,
which reaps every child itself, the doctor must go through the daemon's
reaper (`reaper_runner`), or its waitpid would race the reaper's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ateom.process.runner import NOT_RUN, TIMED_OUT, reaper_runner, subprocess_runner
from ateom.process.runner import Runner as CommandRunner


def give_up_after_a_timeout(run: CommandRunner, limit: float) -> CommandRunner:
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


__all__ = ["NOT_RUN", "TIMED_OUT", "CommandRunner", "give_up_after_a_timeout", "reaper_runner",
           "subprocess_runner"]
