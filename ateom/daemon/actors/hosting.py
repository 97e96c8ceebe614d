"""Hosting an actor: a planned sandbox put up (bundles written, runsc booted) and
taken down (runsc torn down, bundles given back), all or nothing.

The sandbox root never gets devices, and its runsc create+start (or restore)
takes far longer than writing an app bundle (SONAME links staged, config.json
written; docs/performance.md, "Figures behind the code"). So the app bundles are
written while the root's runsc create (or restore) runs, on the calling
thread between that command's spawn and its wait (`Reaper.run(meanwhile=)`):
a worker thread would contend for the GIL with the spawn it should overlap.
Every write is finished before `host` returns or raises: a rollback sees all
of them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import structlog

from ateom.daemon.actors.table import Actor, ActorTable
from ateom.daemon.bundles.plan import ContainerPlan, Injector, SandboxPlan
from ateom.daemon.bundles.store import BundleStore
from ateom.daemon.calls.phases import phase
from ateom.daemon.sandbox.boot import Sandbox, boot
from ateom.daemon.sandbox.state_dir import remove_state_dir
from ateom.daemon.sandbox.teardown import StoppedSandbox, kill_sandbox_processes, teardown
from ateom.process.reaper import Reaper
from ateom.runsc.commands import Runsc, RunscTarget, RunscTimeout, sandbox_root_id
from ateom.runsc.probe import RunscInfo
from ateom.settings import GpuSettings

log = structlog.get_logger("ateom.hosting")


class HostingConfig(Protocol):
    """What hosting reads of the daemon's settings (`DaemonConfig` has them all)."""

    @property
    def log_root(self) -> str: ...
    @property
    def state_root(self) -> str: ...
    @property
    def runsc_global_flags(self) -> tuple[str, ...]: ...
    @property
    def runsc_timeout(self) -> float: ...
    @property
    def pause_container(self) -> str: ...
    @property
    def gpu(self) -> GpuSettings: ...
    @property
    def lock_wait(self) -> float: ...


class Hosting:
    """`table`: where a hosted actor's sandbox exit is reported (the reaper's thread)
    and where a booted actor becomes RUNNING."""

    def __init__(self, config: HostingConfig, reaper: Reaper, store: BundleStore,
                 injector: Injector, table: ActorTable) -> None:
        self.config = config
        self.reaper = reaper
        self.store = store
        self.injector = injector
        self.table = table

    def runsc_for(self, uid: str, info: RunscInfo, *, gpu: bool = False) -> Runsc:
        """The actor's runsc: its state root, its log dir (made here), the flags
        (`gpu`: a GPU sandbox, the nvproxy flags on every call)."""
        config = self.config
        log_dir = os.path.join(config.log_root, uid)
        os.makedirs(log_dir, mode=0o750, exist_ok=True)
        target = RunscTarget(info=info, root=os.path.join(config.state_root, uid),
                             global_flags=config.runsc_global_flags,
                             nvproxy=config.gpu.nvproxy,
                             gpu=gpu)
        return Runsc(target, self.reaper, log_dir, config.runsc_timeout,
                     log_names={sandbox_root_id(uid, config.pause_container):
                                config.pause_container}, actor=uid)

    def host(self, actor: Actor, plan: SandboxPlan, runsc: Runsc,
             image_path: str | None) -> None:
        """Write the bundles and boot (restore from `image_path` when given); the
        actor is RUNNING after. On any failure: roll back, re-raise."""
        sandbox = Sandbox(runsc, plan)
        actor.sandbox = sandbox
        try:
            self._apply_and_boot(actor, sandbox, image_path)
        except BaseException:
            with phase("rollback"):
                self.take_down(actor, grace=0)
            raise
        actor.epoch_unix_nano = time.time_ns()
        self.table.up(actor)

    def _apply(self, uid: str, sandbox: Sandbox, containers: Sequence[ContainerPlan]) -> None:
        # Recorded as applied before the write: one that fails halfway is given back too.
        for c in containers:
            sandbox.applied.append(c)
            context = (phase("inject", container=c.name, devices=list(c.devices))
                       if c.injection is not None else phase("bundle.write", container=c.name))
            with context:
                self.store.apply(uid, c, self.injector.stage)

    def _apply_and_boot(self, actor: Actor, sandbox: Sandbox, image_path: str | None) -> None:
        uid = actor.ref.actor_uid
        root, apps = sandbox.plan.containers[0], sandbox.plan.containers[1:]
        self._apply(uid, sandbox, [root])
        if image_path is not None or not apps:
            # A restore's root brings the whole sandbox's memory and GPU state
            # back; a root without apps is the workload itself.
            actor.succession.wait_for_predecessors(self.config.lock_wait)
        failed: list[Exception] = []

        def write_apps() -> None:
            try:
                self._apply(uid, sandbox, apps)
            except Exception as exc:  # raised once the root booted; runsc's error first
                failed.append(exc)

        boot(sandbox, [root], image_path, lambda pid: self._watch(actor, pid),
             meanwhile=write_apps if apps else None)
        if failed:
            raise failed[0]
        actor.succession.wait_for_predecessors(self.config.lock_wait)
        boot(sandbox, apps, image_path, lambda pid: self._watch(actor, pid))

    def _watch(self, actor: Actor, pid: int) -> None:
        actor.sandbox_pid = pid
        uid = actor.ref.actor_uid

        def exited(pid: int, code: int) -> None:
            log.info("sandbox_exited", actor_uid=uid, pid=pid, exit_code=code)
            self.table.sandbox_exited(actor, code)

        self.reaper.watch(pid, exited)

    def take_down(self, actor: Actor, grace: float, *, stopped: StoppedSandbox | None = None,
                on_exited: Callable[[], None] | None = None) -> None:
        """Tear the sandbox down (TERM, `grace`, KILL) and give its bundles back.
        `stopped`: runsc checkpoint has just stopped every container, these are
        its processes; `on_exited`: as for `teardown`."""
        sandbox = actor.sandbox
        if sandbox is None:
            return
        try:
            teardown(sandbox.runsc, sandbox.plan.runsc_ids, grace, stopped=stopped,
                     on_exited=on_exited)
        finally:
            with phase("bundles.give_back"):
                self.store.give_back(actor.ref.actor_uid, sandbox.applied)
            sandbox.applied.clear()
            if actor.sandbox_pid:
                self.reaper.unwatch(actor.sandbox_pid)

    def clean_leftovers(self, uid: str, info: RunscInfo | None) -> None:
        """What a dead daemon left of an actor it hosted: its sandbox (every
        container runsc lists under its root, then any process still running
        with that root) and its bundles' originals. Without a usable runsc
        (`info` None) the processes are killed and the state dir removed."""
        root = os.path.join(self.config.state_root, uid)
        if os.path.isdir(root):
            listed = None
            if info is not None:
                runsc = self.runsc_for(uid, info)
                try:
                    listed = runsc.list() or []
                except RunscTimeout as exc:  # a sandbox that does not answer
                    log.warning("leftover_sandbox_unresponsive", error=str(exc))
            if info is not None and listed is not None:
                teardown(runsc, sorted(listed), 0)
            else:
                kill_sandbox_processes(root)
                remove_state_dir(root)  # logs what it could not remove
        self.store.give_back_kept(uid)

    def leftover_uids(self) -> list[str]:
        """Actors with runsc state or edited bundles on disk (reads the run dir)."""
        try:
            with_state = os.listdir(self.config.state_root)
        except FileNotFoundError:
            with_state = []
        return sorted({*with_state, *self.store.uids_with_records()})
