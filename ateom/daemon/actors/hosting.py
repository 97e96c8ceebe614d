"""Hosting an actor: a planned sandbox put up (bundles written, runsc booted) and
taken down (runsc torn down, ateom's bundle dirs removed), all or nothing.

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
import shutil
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
from ateom.network import ActorNet, ActorNetworks, NetworkCleanupError
from ateom.process.reaper import Reaper
from ateom.runsc.commands import (
    Runsc,
    RunscTarget,
    RunscTimeout,
    overlay_flags,
    sandbox_root_id,
)
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
    def filestore_root(self) -> str: ...
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
                 injector: Injector, table: ActorTable,
                 networks: ActorNetworks | None = None) -> None:
        self.config = config
        self.reaper = reaper
        self.store = store
        self.injector = injector
        self.table = table
        self.networks = networks  # None: runsc runs with --network=none (or host)

    def network_for(self, uid: str, *, egress: bool) -> ActorNet | None:
        """The actor's own network, made now (a namespace, a veth pair, its /30);
        None when actors run without one."""
        if self.networks is None:
            return None
        with phase("network.create"):
            net = self.networks.create(uid, egress=egress)
        # Links and namespaces are named by their /30, not the actor: this line is
        # how an operator (and `ip link`) tells whose a link is.
        log.info("actor_network", interface=net.host_if, address=net.actor_ip,
                 netns=net.netns_path, egress=egress)
        return net

    def remove_network(self, uid: str) -> None:
        """The actor's network taken down (idempotent). What could not be removed is
        logged (network_left_behind) and swept by the next daemon's start."""
        if self.networks is None:
            return
        with phase("network.remove"):
            try:
                self.networks.remove(uid)
            except NetworkCleanupError as exc:
                log.error("network_left_behind", leftovers=list(exc.leftovers),
                          error=str(exc))

    def filestore_dir(self, uid: str) -> str:
        return os.path.join(self.config.filestore_root, uid)

    def runsc_for(self, uid: str, info: RunscInfo, *, gpu: bool = False,
                  network: bool = True) -> Runsc:
        """The actor's runsc: its state root, its log and overlay filestore dirs (made
        here), the flags (`gpu`: a GPU sandbox, the nvproxy flags on every call;
        `network` False where this worker makes actors networks but this actor has
        none: ``--network=none`` for it)."""
        config = self.config
        log_dir = os.path.join(config.log_root, uid)
        os.makedirs(log_dir, mode=0o750, exist_ok=True)
        overlay = overlay_flags(info.overlay_default, config.runsc_global_flags,
                                self.filestore_dir(uid))
        if overlay:
            os.makedirs(self.filestore_dir(uid), mode=0o700, exist_ok=True)
        no_net = ("--network=none",) if self.networks is not None and not network else ()
        target = RunscTarget(info=info, root=os.path.join(config.state_root, uid),
                             global_flags=(*config.runsc_global_flags, *overlay, *no_net),
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

    def _apply(self, sandbox: Sandbox, containers: Sequence[ContainerPlan]) -> None:
        for c in containers:
            sandbox.applied.append(c)
            context = (phase("inject", container=c.name, devices=list(c.devices))
                       if c.injection is not None else phase("bundle.write", container=c.name))
            with context:
                self.store.apply(c, self.injector.stage)

    def _apply_and_boot(self, actor: Actor, sandbox: Sandbox, image_path: str | None) -> None:
        root, apps = sandbox.plan.containers[0], sandbox.plan.containers[1:]
        self._apply(sandbox, [root])
        if image_path is not None or not apps:
            # A restore's root brings the whole sandbox's memory and GPU state
            # back; a root without apps is the workload itself.
            actor.succession.wait_for_predecessors(self.config.lock_wait)
        failed: list[Exception] = []

        def write_apps() -> None:
            try:
                self._apply(sandbox, apps)
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
        """Tear the sandbox down (TERM, `grace`, KILL) and remove ateom's bundle dirs.
        `stopped`: runsc checkpoint has just stopped every container, these are
        its processes; `on_exited`: as for `teardown`."""
        sandbox = actor.sandbox
        if sandbox is None:
            return
        try:
            teardown(sandbox.runsc, sandbox.plan.runsc_ids, grace, stopped=stopped,
                     on_exited=on_exited)
        finally:
            with phase("bundles.remove"):
                self.store.remove(actor.ref.actor_uid)
                self._remove_filestore(actor.ref.actor_uid)
            self.remove_network(actor.ref.actor_uid)
            sandbox.applied.clear()
            if actor.sandbox_pid:
                self.reaper.unwatch(actor.sandbox_pid)

    def clean_leftovers(self, uid: str, info: RunscInfo | None) -> None:
        """What a dead daemon left of an actor it hosted: its sandbox (every
        container runsc lists under its root, then any process still running
        with that root) and ateom's bundle dirs. Without a usable runsc
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
        self.store.remove(uid)
        self._remove_filestore(uid)
        self.remove_network(uid)

    def _remove_filestore(self, uid: str) -> None:
        """The actor's overlay filestore dir (ateom's run dir), once its sandbox is gone:
        runsc deletes the file in it; what a killed runsc left goes here."""
        shutil.rmtree(self.filestore_dir(uid), ignore_errors=True)

    def leftover_uids(self) -> list[str]:
        """Actors with runsc state, ateom bundle dirs or an overlay filestore dir on
        disk (reads the run dir)."""
        found = set(self.store.uids_with_bundles())
        for parent in (self.config.state_root, self.config.filestore_root):
            try:
                found.update(os.listdir(parent))
            except FileNotFoundError:
                pass
        return sorted(found)
