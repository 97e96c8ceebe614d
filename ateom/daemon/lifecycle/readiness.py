"""Whether this daemon can run an actor now, and if not, why: what SERVING means.

The gRPC health service says SERVING only when nothing here stands in the way,
so a readiness probe never passes a worker whose every RunWorkload would fail:
- the configured runsc is there, runs, and answers like runsc (the daemon's
  probe, cached per binary and modification time);
- every ``--runsc-global-flag`` names a flag that runsc knows (a typo would fail
  every runsc call with "flag provided but not defined");
- ``--actors-root`` is a directory, and ``--run-dir``'s ``actors/`` and ``logs/``
  are directories ateom can write (made when missing);
- runsc can make what every sandbox needs of the host (`host_problems`): a cgroup per
  sandbox, unless ``--ignore-cgroups``. (A network namespace per actor is ateom's to
  make, `ateom.network`; the service says when it cannot.)
It is looked at again every `RECHECK_INTERVAL` seconds (`ateom.daemon.rpc.server`)
and by every GetStatus, Run and Restore, so mending a fault needs no restart.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Protocol

from ateom.errors import AteomError
from ateom.runsc.commands import ignores_cgroups, overlay_problem
from ateom.runsc.host import CgroupMount, read_cgroup_mounts
from ateom.runsc.probe import RunscInfo, unknown_global_flags
from ateom.settings import unusable_dir

# Between two looks by the health watcher. A probe of a cached runsc and a few
# stats take well under a millisecond.
RECHECK_INTERVAL = 2.0


class ReadinessConfig(Protocol):
    """What readiness reads of the daemon's settings (`DaemonConfig` has them all)."""

    @property
    def runsc(self) -> str: ...
    @property
    def runsc_global_flags(self) -> tuple[str, ...]: ...
    @property
    def actors_root(self) -> str: ...
    @property
    def state_root(self) -> str: ...
    @property
    def log_root(self) -> str: ...


def flag_problems(runsc: RunscInfo, flags: Sequence[str]) -> list[str]:
    """One line per --runsc-global-flag this runsc does not know, and an --overlay2 that
    would write into the node agent's bundles (`overlay_problem`) (pure)."""
    problems = [f"--runsc-global-flag {flag}: runsc {runsc.path} ({runsc.version}) has no"
                " such flag (`runsc flags` lists those it has); every runsc call would fail"
                for flag in unknown_global_flags(flags, runsc.global_flags)]
    overlay = overlay_problem(flags)
    return [*problems, overlay] if overlay else problems


def host_problems(flags: Sequence[str], cgroups: tuple[CgroupMount, ...] | None) -> list[str]:
    """Why every runsc create would fail on this host with these global flags (pure;
    `cgroups`: `ateom.runsc.host.read_cgroup_mounts`, None when unreadable: not judged)."""
    problems = []
    if not ignores_cgroups(flags) and cgroups is not None:
        readonly = [m.path for m in cgroups if m.readonly]
        if readonly or not cgroups:
            where = f"read-only ({', '.join(readonly[:3])})" if readonly else "not mounted"
            problems.append(f"cgroupfs is {where} and runsc makes a cgroup per sandbox: every"
                            " Run fails at create; add --ignore-cgroups to the global flags")
    return problems


def check(config: ReadinessConfig, probe: Callable[[str], RunscInfo]) -> tuple[str, ...]:
    """Why no actor can run now, one line each; () when one can (probes runsc, stats
    the dirs, makes the run dir's actors/ and logs/ when missing)."""
    problems: list[str] = []
    try:
        problems += flag_problems(probe(config.runsc), config.runsc_global_flags)
    except AteomError as exc:  # names the binary and why
        problems.append(str(exc))
    problems += host_problems(config.runsc_global_flags, read_cgroup_mounts())
    why = unusable_dir(config.actors_root)
    if why:
        problems.append(f"--actors-root {config.actors_root}: {why}")
    for path in (config.state_root, config.log_root):
        try:
            os.makedirs(path, mode=0o700 if path == config.state_root else 0o750,
                        exist_ok=True)
        except OSError:
            pass  # said below
        why = unusable_dir(path, writable=True)
        if why:
            problems.append(f"--run-dir: {path}: {why}")
    return tuple(problems)
