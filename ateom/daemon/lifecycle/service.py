"""AteomService: admission and the actor lifecycle calls, each a short sequence of
named steps over the daemon's parts.

    validate (pure, then the few stats that must be) -> admit -> plan -> host
    (write bundles, boot runsc) ... checkpoint (save, release) / terminate
    (release)

The parts, one job each: `admission` (draining, calls in flight), `actors`
(the hosting table and the state machine), `plan` (what each bundle
becomes), `bundle_store` (ateom's own config.json per container, in its run dir),
`hosting` (bundles + runsc, all or nothing), `sandbox` (runsc boot and
teardown), `release` (an actor given back; after a checkpoint on a thread
of its own: the GPU hand-over), `starts` (Run/Restore calls in flight,
which that release lets go first), `checkpoints` (a checkpoint's steps),
`reach` (the actor's network, route and wakeup probes), `stats`.
Operators' questions are `inspect`'s. The gRPC servicer
(`ateom.daemon.rpc.server`) only translates to and from this object; tests
drive it directly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import structlog

from ateom.daemon.actors import stats
from ateom.daemon.actors.admission import Admission
from ateom.daemon.actors.hosting import Hosting
from ateom.daemon.actors.sampling import StatsSampler
from ateom.daemon.actors.succession import yielders_of
from ateom.daemon.actors.table import Actor, ActorTable, Asks, Op
from ateom.daemon.bundles.catalog import DeviceCatalog
from ateom.daemon.bundles.plan import CdiInjector, Injector, SandboxPlan, SandboxPlanner
from ateom.daemon.bundles.store import BundleStore, bundles_root
from ateom.daemon.calls import sandbox_exits, validation
from ateom.daemon.calls.phases import phase
from ateom.daemon.calls.progress import progress
from ateom.daemon.calls.requests import (
    ActorRef,
    CheckpointRequest,
    CheckpointResult,
    RestoreRequest,
    RunRequest,
    SnapshotScope,
    StatsSample,
    TerminateRequest,
)
from ateom.daemon.gpus.lifecycle import GpuActors
from ateom.daemon.gpus.placement import GpuPool
from ateom.daemon.lifecycle import readiness
from ateom.daemon.lifecycle.checkpoint import Checkpoints
from ateom.daemon.lifecycle.config import DaemonConfig
from ateom.daemon.lifecycle.reach import Reach
from ateom.daemon.lifecycle.release import Releases
from ateom.daemon.sandbox import save
from ateom.daemon.sandbox.janitor import LogJanitor
from ateom.daemon.sandbox.teardown import sandbox_processes
from ateom.errors import AteomError, ErrorCode, quote
from ateom.gpuinfo.nvidia_ctk import SpecGenerator
from ateom.gpuinfo.nvproxy import DeviceView
from ateom.gpuinfo.placement import PlacementSnapshot
from ateom.network import ActorNetworks
from ateom.process.proc_io import bytes_read
from ateom.process.reaper import Reaper, default_reaper
from ateom.process.runner import reaper_runner
from ateom.runsc.commands import RunscError
from ateom.runsc.probe import PROBE_TIMEOUT, RunscInfo, probe_runsc
from ateom.settings import parse_placement
from ateom.volumes import restore as restore_durable
from ateom.worker.capacity import memory_bound, read_capacity

log = structlog.get_logger("ateom.service")

# Terminations at once when the daemon drains (docs/operations.md: the Pod's grace).
DRAIN_PARALLEL = 16


def _durable_back(plan: SandboxPlan, snapshot: str, uid: str) -> None:
    """The actor's durable-dir volumes emptied and filled from the snapshot's tars
    (`ateom.volumes.restore`: every tar checked whole first, extraction confined),
    before its sandbox boots: the app starts, or resumes, on its own data."""
    try:
        with phase("volumes.restore"):
            restore_durable(plan.durable, snapshot)
    except OSError as exc:
        raise AteomError(f"actor {uid}: putting its durable-dir data back from {snapshot}"
                         f" failed: {exc.strerror or exc}",
                         code=ErrorCode.FAILED_PRECONDITION) from exc


def _still_running(actor: Actor, op: Op) -> None:
    """A Run or Restore answers OK only for an actor that runs: one whose sandbox
    ended on its own before the answer (the reaper saw it) fails the call instead."""
    if actor.sandbox_exit is not None:
        raise AteomError(f"actor {actor.ref.actor_uid}: {actor.exit_note}, before the"
                         f" {op.value} could answer; it was cleaned up",
                         code=ErrorCode.INTERNAL)


class AteomService:
    def __init__(self, config: DaemonConfig, *, reaper: Reaper | None = None,
                 injector: Injector | None = None) -> None:
        self.config = config
        self.reaper = reaper or default_reaper()
        self.environ: Mapping[str, str] = dict(config.env or os.environ)
        self.admission = Admission(config.lifecycle_slots)
        # Read once, as Substrate's workers do: the Pod is not resized in place.
        self.capacity = read_capacity(config.capacity_dir)
        self.actors = ActorTable(config.max_actors, on_exited=self._exited_on_its_own,
                                 capacity=Asks(self.capacity.cpu_milli,
                                               self.capacity.memory_bytes))
        self.injector: Injector = injector or CdiInjector(config.node)
        self.catalog = DeviceCatalog(config.node, SpecGenerator(
            self.reaper, config.node, config.generated_cdi_dir, self.environ,
            beneath=config.run_dir))
        self.planner = SandboxPlanner(actors_root=config.actors_root,
                                      pause_container=config.pause_container,
                                      catalog=self.catalog, injector=self.injector,
                                      bundles_root=bundles_root(config.run_dir))
        self.bundles = BundleStore(config.actors_root, config.run_dir)
        self.networks = ActorNetworks(
            config.run_dir, egress_port=config.egress_port, runner=reaper_runner(self.reaper),
            warm=config.warm_networks) if config.actor_networks else None
        self.hosting = Hosting(config, self.reaper, self.bundles, self.injector, self.actors,
                               self.networks)
        self.reach = Reach(config, self.networks, self.reaper)
        pool = GpuPool(parse_placement(config.gpu.placement), lambda: GpuActors.gatherer(
            self.reaper, config.node, config.gpu.proc_root, self.environ))
        self.gpus = GpuActors(pool, config.node, config.gpu, actors_root=config.actors_root,
                              environ=self.environ, reaper=self.reaper)
        self.releases = Releases(self.hosting, self.gpus, self.actors)
        self.sampler = StatsSampler(self.actors, stats.actor_stats,
                                    interval=config.stats_interval)
        self.checkpoints = Checkpoints(config, self.gpus, self.releases,
                                       memory_bound=memory_bound(self.capacity),
                                       latest_memory=self.sampler.memory_of)
        self.janitor = LogJanitor(
            config.log_root, max_bytes=config.log_max_bytes, retention=config.log_retention,
            hosted=lambda: [a.ref.actor_uid for a in self.actors.snapshot()])

    @property
    def state(self) -> str:
        return self.admission.state

    @state.setter
    def state(self, value: str) -> None:
        self.admission.state = value

    # -- steps shared by the calls ----------------------------------------------

    def probe(self, path: str) -> RunscInfo:
        """What `path` (a runsc) can do; cached per binary (runs it through the reaper)."""
        def runner(argv: Sequence[str]) -> tuple[int, str]:
            done = self.reaper.run_capture(argv, timeout=PROBE_TIMEOUT)
            return done.returncode, done.output

        return probe_runsc(path, runner)

    def _allowed_runsc(self, requested: str, assets: Mapping[str, str]) -> str:
        """The runsc a request may run (PERMISSION_DENIED otherwise), its runtime assets
        checked against it (`validation.check_runtime_assets`); stats PATH."""
        configured = self.config.runsc
        resolved = "" if os.path.isabs(configured) else shutil.which(configured) or ""
        runsc = validation.check_runsc_path(requested, configured, self.config.runsc_dir,
                                            resolved=resolved)
        validation.check_runtime_assets(assets, runsc, requested)
        return runsc

    def not_ready(self) -> tuple[str, ...]:
        """Why no actor can run now, one line each (`readiness`; probes runsc, stats
        the dirs); () when one can. Health is SERVING only then."""
        problems = readiness.check(self.config, self.probe)
        extra = self.reach.problems()
        return (*problems, *extra) if extra else problems

    def _validate_start(self, req: RunRequest | RestoreRequest) -> RunscInfo:
        """Request checks before any side effect; the runsc to run, probed."""
        root, pause = self.config.actors_root, self.config.pause_container
        if isinstance(req, RunRequest):
            validation.check_run(req, root, pause=pause)
        else:
            validation.check_restore(req, root, pause=pause)
        info = self.probe(self._allowed_runsc(req.runsc_path, req.runtime_asset_paths))
        problems = [*self.not_ready(),
                    *readiness.flag_problems(info, self.config.runsc_global_flags)]
        if problems:
            raise AteomError("this worker cannot run actors now: "
                             + "; ".join(dict.fromkeys(problems)),
                             code=ErrorCode.FAILED_PRECONDITION)
        validation.check_dirs_on_disk(req.dirs, root)
        self.reach.check_asks(req, info)
        if isinstance(req, RestoreRequest) and req.containers and not info.restores_subcontainers:
            raise AteomError(
                f"runsc {info.path} ({info.version}) restores only a sandbox's root container,"
                f" and actor {req.actor.actor_uid} has {len(req.containers)} app container(s):"
                " restoring it needs a runsc with multi-container restore (release-20240501.0"
                " or newer)", code=ErrorCode.FAILED_PRECONDITION)
        return info

    def _admit_and_host(self, req: RunRequest | RestoreRequest, op: Op, info: RunscInfo,
                        *, image: str | None = None, data: str | None = None,
                        discard: str | None = None) -> SandboxPlan:
        """Admit the actor, plan its bundles, put its durable-dir data back from the
        snapshot in `data` (a Restore's restore_dir), host its sandbox (restored from
        `image` when given, else booted fresh), and remove `discard` (a consumed
        restore_dir), all before the call answers and under the actor's lock.
        Admission, the hosting table's rollback and the actor lock's release live
        here once for Run and Restore."""
        uid = req.actor.actor_uid
        actor = self.admission.admit(self.actors, req.actor, op, max_wait=self.config.lock_wait,
                                     asks=Asks(req.cpu_milli, req.memory_bytes))
        try:
            # What a dead predecessor left of this actor (its sandbox, ateom's bundle
            # dirs) goes before the new sandbox takes the same names.
            if os.path.lexists(self.bundles.actor_dir(uid)):
                self.hosting.clean_leftovers(uid, self._leftover_runsc(uid))
            net = None if self.reach.no_network(info) else self.hosting.network_for(
                uid, egress=req.egress_gateway is not None)
            self.reach.routed(req.actor, net, actor.phase, req.egress_gateway)
            with phase("plan"):
                view = self._book_gpus(actor, req, info, image)
                self.gpus.check_driver(info, view, op.value)
                plan = self.planner.plan(uid, req.dirs, req.containers, info, view,
                                         tools=self.gpus.tools(view), cpu_milli=req.cpu_milli,
                                         memory_bytes=req.memory_bytes,
                                         netns_path=net.netns_path if net else "")
                self.gpus.check_control_nodes(uid, plan.gpu, op.value)
            if data is not None and plan.durable:
                _durable_back(plan, data, uid)
            runsc = self.hosting.runsc_for(uid, info, gpu=plan.gpu, network=net is not None)
            if image is None:
                self.hosting.host(actor, plan, runsc, None)
            else:
                # What the restoring sandbox has read of the image, as its processes count it.
                root = runsc.target.root
                with progress("restore", uid, expected_bytes=save.image_size(image),
                              measure=lambda: bytes_read(sandbox_processes(root)),
                              containers=list(plan.container_names), image=image):
                    self.hosting.host(actor, plan, runsc, image)
            try:
                self.reach.wakeup(req, net)
                _still_running(actor, op)
            except BaseException:
                with phase("rollback"):  # it never became ready: not left running
                    self.hosting.take_down(actor, grace=0)
                raise
            if discard is not None:  # consumed only by a restore that stands
                save.discard(discard, beneath=self.config.actors_root, uid=uid)
            self.reach.running(uid)
            return plan
        except BaseException:
            self.reach.forget(uid)
            self.hosting.remove_network(uid)
            self.gpus.give_back(uid)
            self.actors.remove(actor)
            raise
        finally:
            actor.lock.release()

    def _book_gpus(self, actor: Actor, req: RunRequest | RestoreRequest, info: RunscInfo,
               image: str | None) -> DeviceView:
        """The actor's GPUs booked (its device view narrowed to them). GPUs a
        checkpointed actor yielded are booked at once; while that actor's sandbox
        is still exiting it is one of this one's predecessors (the hand-over,
        `ateom.daemon.actors.succession`: B's Run right after A's Checkpoint
        boots B's sandbox root meanwhile)."""
        uid = actor.ref.actor_uid
        view = self.gpus.book(uid, req, info, self.planner.devices(req.containers), image)
        actor.succession.take(yielders_of(self.gpus.pool.held_by(uid), self.actors.dying()))
        return view

    def _exited_on_its_own(self, actor: Actor) -> None:
        """A running actor's sandbox ended on its own (the reaper saw it, or a call on
        the actor found it so): its GPUs go back at once, since a dead sandbox cannot
        use them; it stays listed as exited, holding its slot, until terminated."""
        uid = actor.ref.actor_uid
        log.warning("actor_exited", actor_uid=uid, exit_code=actor.sandbox_exit)
        sandbox_exits.exited("on_its_own")
        self.gpus.give_back(uid)
        self.reach.exited(uid)

    # -- lifecycle ---------------------------------------------------------------

    def run_workload(self, req: RunRequest) -> None:
        with self.admission.call(Op.RUN, req.actor.actor_uid, admits=True), \
                self.actors.starts.starting():
            with phase("validate"):
                info = self._validate_start(req)
            plan = self._admit_and_host(req, Op.RUN, info)
            log.info("actor_running", containers=list(plan.container_names),
                     devices=list(plan.devices), nvproxy=plan.gpu)

    def restore_workload(self, req: RestoreRequest) -> None:
        uid = req.actor.actor_uid
        with self.admission.call(Op.RESTORE, uid, admits=True), self.actors.starts.starting():
            with phase("validate"):
                info = self._validate_start(req)
                image = req.dirs.restore_dir
                if not os.path.isdir(image) or not os.listdir(image):
                    raise AteomError(f"actor_dirs.restore_dir {quote(image)}: missing or empty",
                                     code=ErrorCode.FAILED_PRECONDITION)
            # A DATA snapshot is the durable dirs alone: fresh containers, the data back.
            memory = image if req.scope is not SnapshotScope.DATA else None
            try:
                plan = self._admit_and_host(
                    req, Op.RESTORE, info, image=memory, data=image,
                    discard=None if req.preserve_restore_dir else image)
            except RunscError as exc:
                raise AteomError(f"restore of actor {uid} failed in runsc and was cleaned"
                                 f" up: {exc}", code=ErrorCode.INTERNAL) from exc
            log.info("actor_restored", containers=list(plan.container_names),
                     devices=list(plan.devices), nvproxy=plan.gpu, scope=req.scope.name,
                     snapshot_uri=req.snapshot_uri)

    def checkpoint_workload(self, req: CheckpointRequest) -> CheckpointResult:
        uid = req.actor.actor_uid
        with self.admission.call(Op.CHECKPOINT, uid, admits=False):
            with phase("validate"):
                validation.check_checkpoint(req, self.config.actors_root,
                                            pause=self.config.pause_container)
                self._allowed_runsc(req.runsc_path, req.runtime_asset_paths)
                validation.check_dirs_on_disk(req.dirs, self.config.actors_root)
            with self.actors.operate(uid, Op.CHECKPOINT, max_wait=self.config.lock_wait) as actor, \
                    structlog.contextvars.bound_contextvars(snapshot_uri=req.snapshot_uri,
                                                            scope=req.scope.name):
                self.reach.checkpointing(uid)
                try:
                    return self.checkpoints.take(actor, req.dirs.checkpoint_dir, req.scope,
                                                 req.snapshot_uri)
                finally:
                    self.reach.after_checkpoint(actor, self.actors)

    def terminate_workload(self, req: TerminateRequest) -> None:
        uid = req.actor.actor_uid
        with self.admission.call(Op.TERMINATE, uid, admits=False):
            with phase("validate"):
                validation.check_terminate(req, self.config.actors_root,
                                           pause=self.config.pause_container)
                self._allowed_runsc(req.runsc_path, {})
            self._terminate(req.actor)

    def _terminate(self, ref: ActorRef) -> None:
        uid = ref.actor_uid
        cleanup = self.actors.admit_cleanup(ref)
        if cleanup is not None:
            # Idempotent: a gone actor is terminated. What a crash left of it
            # is cleared holding its slot, so a Run of it waits its turn.
            try:
                self.hosting.clean_leftovers(uid, self._leftover_runsc(uid))
            finally:
                self.actors.remove(cleanup)
                cleanup.lock.release()
            return
        try:
            with self.actors.operate(uid, Op.TERMINATE, max_wait=self.config.lock_wait) as actor:
                self.reach.terminating(uid)
                try:
                    self.releases.release(actor, grace=self.config.kill_grace)
                finally:
                    self.reach.forget(uid)
                log.info("actor_terminated")
        except AteomError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:  # NOT_FOUND: went away meanwhile
                raise

    def _leftover_runsc(self, uid: str) -> RunscInfo | None:
        """The configured runsc, probed, when `uid` has runsc state left; else None
        (also when it cannot be probed: its leftover processes are killed anyway)."""
        if not os.path.isdir(os.path.join(self.config.state_root, uid)):
            return None
        try:
            return self.probe(self.config.runsc)
        except AteomError as exc:
            log.warning("runsc_unusable_for_cleanup", error=str(exc))
            return None

    # -- stats -------------------------------------------------------------------

    def workload_stats(self, uid: str) -> StatsSample:
        """The verified read: asked of runsc now (and kept as the actor's latest)."""
        with self.admission.slot(f"stats of actor {uid}"):
            actor = self.actors.get(uid)
            sample = stats.actor_stats(actor, uid)
        if actor is not None:
            self.sampler.keep(actor, sample)
        return sample

    def active_workload_stats(self) -> list[StatsSample]:
        """The discovery read: what the sampler has, no runsc and no call slot."""
        return self.sampler.active()

    # -- daemon ------------------------------------------------------------------

    def drain(self, grace: float) -> None:
        """Stop admitting; for up to `grace`, let calls finish and the node agent
        checkpoint or terminate its actors (Checkpoint/Terminate stay open);
        then terminate whatever is still hosted."""
        self.admission.drain(grace, lambda: len(self.actors))
        left = self.actors.snapshot()

        def terminate(actor: Actor) -> None:
            # Not through a call slot: stuck calls may hold them all.
            with contextlib.suppress(AteomError), \
                    structlog.contextvars.bound_contextvars(actor_uid=actor.ref.actor_uid):
                self._terminate(actor.ref)

        # In parallel, DRAIN_PARALLEL at a time: one after another, N actors whose apps
        # ignore SIGTERM would take N kill graces, past any Pod's termination grace.
        # Each Terminate is bounded on its own (its grace, runsc's control timeouts).
        if left:
            with ThreadPoolExecutor(min(len(left), DRAIN_PARALLEL),
                                    thread_name_prefix="ateom-drain") as pool:
                list(pool.map(terminate, left))

    def reconcile(self) -> None:
        """Before serving: clear what a dead predecessor left on these dirs.

        Every sandbox under the runsc state root is torn down and every bundle
        it left edited gets its original back. Not re-adopted: in a Pod the
        worker's PID 1 died with them (their sandboxes died too), and a live one
        found here is one whose plan, devices, GPU placement and exit this
        process never saw: it would be shown and counted on guesses. The node
        agent learns the actor is gone (NOT_FOUND) and runs or restores it again.
        """
        with phase("reconcile"):
            leftovers = self.hosting.leftover_uids()
            for uid in leftovers:
                with structlog.contextvars.bound_contextvars(actor_uid=uid):
                    self.hosting.clean_leftovers(uid, self._leftover_runsc(uid))
            if leftovers:
                log.warning("reconciled", actors=leftovers)
            self.reach.start_networks()

    def placement_snapshot(self) -> PlacementSnapshot | None:
        """Who holds which of the Pod's GPUs (metrics, Inspect); None before any."""
        return self.gpus.pool.snapshot()

    @property
    def placement_policy(self) -> str:
        """The ``--gpu-placement`` in force, as a snapshot names it (``shared:2``)."""
        return str(self.config.gpu.placement_settings)
