"""Boot a sandbox's containers in order: the sandbox root (``<uid>_pause``) first,
then each app container, created and started, or restored from an image (a GPU
sandbox's runsc carries the nvproxy flags on every call). `Sandbox` is what the
daemon keeps per hosted actor; `teardown` undoes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ateom.daemon.bundles.plan import ContainerPlan, SandboxPlan
from ateom.daemon.calls.phases import phase
from ateom.runsc.commands import Runsc


@dataclass
class Sandbox:
    """What the daemon keeps per hosted actor: its runsc, its plan, and which of its
    containers' configs ateom has written (its own bundle dirs, removed on release)."""

    runsc: Runsc
    plan: SandboxPlan
    applied: list[ContainerPlan] = field(default_factory=list)
    pid: int = 0  # the sandbox process, once its root is up


def pid_file(runsc: Runsc, runsc_id: str) -> str:
    return os.path.join(runsc.target.root, f"{runsc_id}.pid")


def read_pid(path: str) -> int:
    """The pid runsc wrote, 0 when none (reads a file)."""
    try:
        with open(path) as f:
            return max(int(f.read().strip() or 0), 0)
    except (OSError, ValueError):
        return 0


def boot(sandbox: Sandbox, containers: Sequence[ContainerPlan], image_path: str | None,
         on_sandbox_pid: Callable[[int], None], *,
         meanwhile: Callable[[], None] | None = None) -> None:
    """runsc create+start (or restore from `image_path`) each of `containers`, in
    order; `on_sandbox_pid` gets the sandbox's pid once the root is up.
    `meanwhile` runs (on this thread) while the first runsc command runs."""
    runsc = sandbox.runsc
    os.makedirs(runsc.target.root, mode=0o700, exist_ok=True)
    for c in containers:
        pids = pid_file(runsc, c.runsc_id)
        if image_path is not None:
            if runsc.target.info.restore_needs_create:
                with phase("runsc.create", container=c.name):
                    runsc.create(c.runsc_id, c.own_bundle, pids, meanwhile=meanwhile)
                meanwhile = None
            with phase("runsc.restore", container=c.name):
                runsc.restore(c.runsc_id, c.own_bundle, image_path, pids, meanwhile=meanwhile)
        else:
            with phase("runsc.create", container=c.name):
                runsc.create(c.runsc_id, c.own_bundle, pids, meanwhile=meanwhile)
            with phase("runsc.start", container=c.name):
                runsc.start(c.runsc_id)
        meanwhile = None
        if c.is_sandbox:
            pid = read_pid(pids)
            if pid:
                sandbox.pid = pid
                on_sandbox_pid(pid)


