"""What a release's sentry does with ``--cuda-checkpoint-path``, through ``runsc exec``.

gVisor (release-20260608.0 on) runs NVIDIA's ``cuda-checkpoint`` *inside the
sandbox*, in the container of each CUDA process: ``invokeCudaCheckpoint`` in
google/gvisor ``pkg/sentry/control/state_cuda.go`` (read at commit 045164de)
execs the file ``--cuda-checkpoint-path`` names with argv
``["cuda-checkpoint", <op...>, "--pid", <pid>]`` in that container's mount and
PID namespaces, stdin /dev/null, stdout and stderr collected:

- which processes: those holding an NVIDIA device FD, filtered by driver: a
  driver older than R550 gets a warning and all of them; R550-R554 keep the
  ones with a ``cuda<11 hex>`` thread (here: all; a sandbox's thread names
  are not visible through runsc); R555+ keep those for which ``cuda-checkpoint
  --get-state --pid N`` succeeds (others are skipped with a warning);
- before the save: ``--toggle`` on each, in parallel or, with
  ``--cuda-checkpoint-sequential``, one at a time; if any fails, the ones
  that succeeded are toggled back and the checkpoint fails with every
  failure ("%q failed with exit status %d; output: %q", errors.Join);
- after a restore (or a save with --leave-running): ``--toggle`` again.

Here each is a real ``runsc exec <container> <path> <op...> --pid <pid>``
of Debian's runsc (the PID as ``runsc ps`` reports it); ``run_exec`` is
the emulator's runner. Like the sentry, nothing times out.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tests.support.runsc_release import Release, go_sprintf

# (container, pid) of a process in the sandbox.
Proc = tuple[str, int]
# Starts `runsc exec <container> <path> <args...>`; returns the running process.
StartExec = Callable[[str, Sequence[str]], "subprocess.Popen[bytes]"]


@dataclass(frozen=True, slots=True)
class OpResult:
    proc: Proc
    desc: str  # "cuda-checkpoint toggle for PID 1 in container \"app\""
    status: int
    output: str


def _desc(op: str, proc: Proc) -> str:
    # The sentry's own description of each run (state_cuda.go, invokeCudaCheckpoint).
    return f'cuda-checkpoint {op} for PID {proc[1]} in container "{proc[0]}"'


def run_op(start: StartExec, path: str, op: str, args: Sequence[str],
           procs: Sequence[Proc], *, sequential: bool) -> list[OpResult]:
    """Run ``<path> <args> --pid N`` in each proc's container (runs processes)."""
    results: list[OpResult] = []
    running: list[tuple[Proc, subprocess.Popen[bytes]]] = []
    for proc in procs:
        child = start(proc[0], [path, *args, "--pid", str(proc[1])])
        if sequential:
            out, _ = child.communicate()
            results.append(OpResult(proc, _desc(op, proc), child.returncode,
                                    out.decode(errors="replace")))
        else:
            running.append((proc, child))
    for proc, child in running:
        out, _ = child.communicate()
        results.append(OpResult(proc, _desc(op, proc), child.returncode,
                                out.decode(errors="replace")))
    return results


def select_procs(release: Release, start: StartExec, path: str, procs: Sequence[Proc],
                 driver_major: int, warn: Callable[[str], None]) -> list[Proc]:
    """The CUDA processes among the GPU clients, by the sentry's driver rule (runs processes)."""
    if driver_major < 550:
        warn(go_sprintf(release.message("cuda-checkpoint requires driver >=R550"),
                        driver_major))
        return list(procs)
    if driver_major < 555:
        return list(procs)
    keep = []
    for r in run_op(start, path, "get-state", ["--get-state"], procs, sequential=False):
        if r.status != 0:
            warn(go_sprintf(release.message("%q failed with exit status %d, skipping CUDA"),
                            r.desc, r.status, r.proc[1], r.output))
            continue
        if r.output.strip() != "running":
            warn(go_sprintf(release.message("CUDA PID %d in unexpected state"),
                            r.proc[1], r.output.strip()))
        keep.append(r.proc)
    return keep


def toggle_before_save(release: Release, start: StartExec, path: str, procs: Sequence[Proc],
                       *, sequential: bool, warn: Callable[[str], None]) -> str:
    """``--toggle`` each proc; if any fails, undo the others and return the errors (runs them)."""
    results = run_op(start, path, "toggle", ["--toggle"], procs, sequential=sequential)
    failed = [r for r in results if r.status != 0]
    if not failed:
        return ""
    errors = [go_sprintf(release.message("%q failed with exit status %d; output: %q"),
                         r.desc, r.status, r.output) for r in failed]
    done = [r.proc for r in results if r.status == 0]
    for undo in run_op(start, path, "toggle", ["--toggle"], done, sequential=sequential):
        if undo.status != 0:
            warn(go_sprintf(release.message("Undoing %q failed with exit status %d; output:"),
                            undo.desc, undo.status, undo.output))
    return "\n".join(errors)


def toggle_after_restore(release: Release, start: StartExec, path: str, procs: Sequence[Proc],
                         *, sequential: bool) -> str:
    """``--toggle`` the saved procs back to running; the joined errors, "" if none."""
    results = run_op(start, path, "toggle", ["--toggle"], procs, sequential=sequential)
    return "\n".join(
        go_sprintf(release.message("%q failed with exit status %d; output: %q"),
                   r.desc, r.status, r.output) for r in results if r.status != 0)
