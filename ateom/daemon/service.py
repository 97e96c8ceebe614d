"""AteomService: the actor lifecycle over runsc (the imperative shell).

Every call runs the same way: validate the request (pure, before any side
effect), probe runsc, reserve the actor, plan the sandbox (read bundles,
choose and resolve devices, plan the injection: still no side effect),
then apply and boot (the sandbox root boots while the app containers'
bundles are written and their devices injected). Any failure after the
first side effect rolls back in reverse: containers killed and deleted,
leftover sandbox processes killed, bundles' config.json restored, state
dir removed.

The gRPC servicer (`ateom.daemon.server`) only translates to and from this
object; tests drive it directly.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import dataclasses
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from ateom import __version__
from ateom.cdi.model import Resolution
from ateom.daemon import bundles, devices, validation
from ateom.daemon.actors import Actor, ActorTable, Op, Phase
from ateom.daemon.config import DaemonConfig
from ateom.daemon.gpu import SpecGenerator, gpu_present
from ateom.daemon.phases import phase
from ateom.daemon.reaper import Reaper, default_reaper
from ateom.daemon.requests import (
    ActorRef,
    CheckpointRequest,
    CheckpointResult,
    ContainerRequest,
    DevicePolicy,
    RestoreRequest,
    RunRequest,
    StatsSample,
    TerminateRequest,
)
from ateom.daemon.runsc import (
    NvproxyOptions,
    Runsc,
    RunscError,
    RunscTarget,
    sandbox_root_id,
)
from ateom.daemon.runsc_probe import PROBE_TIMEOUT, RunscInfo, probe_runsc
from ateom.errors import AteomError, ErrorCode

log = structlog.get_logger("ateom.service")


class Injector(Protocol):
    """How devices get into a bundle: plan (reads only), then apply (writes)."""

    def plan(self, bundle_dir: str, resolution: Resolution) -> Any:
        """An `ateom.inject.injector.InjectionPlan`; raises InjectionError."""

    def apply(self, plan: Any, config: bytes) -> None:
        """Carry out `plan`, writing `config` (the planned config plus ateom's own edits)."""


class CdiInjector:
    """The CDI injector with the gVisor NVIDIA profile (imported on first use).

    The profile's driver root and toolkit dir are the daemon's configured ones
    (``--driver-root``, ``--toolkit-dir``), handed to the injector under its own
    setting names, so a flag given to ``ateom serve`` reaches the injected
    LD_LIBRARY_PATH and the trusted hook binary, not only nvidia-ctk.

    ateom's bundle edits (annotations) are applied to the plan's resulting
    config before it is written, so a bundle is planned once and written
    once: the dry run that validates a request is the plan that is applied.
    """

    def __init__(self, environ: Mapping[str, str], *, driver_root: str,
                 toolkit_dir: str) -> None:
        self.environ = {**environ, "ATEOM_NVIDIA_DRIVER_ROOT": driver_root,
                        "ATEOM_NVIDIA_TOOLKIT_DIR": toolkit_dir}

    def options(self) -> Any:
        """The injector's `InjectOptions` for this daemon (stats the toolkit dir)."""
        from ateom.inject.options import gvisor_nvidia_options

        return gvisor_nvidia_options(self.environ)

    def plan(self, bundle_dir: str, resolution: Resolution) -> Any:
        from ateom.inject.injector import plan_injection

        return plan_injection(bundle_dir, resolution, self.options())

    def apply(self, plan: Any, config: bytes) -> None:
        from ateom.inject.injector import apply_plan

        apply_plan(dataclasses.replace(plan, config_after=config))


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    name: str  # the bundle's name under oci_bundle_dir
    runsc_id: str  # its runsc container id (the sandbox root's carries the uid)
    bundle: str
    original: bytes  # config.json as the node agent left it (restored on clean-up)
    prepared: bytes  # config.json runsc sees (devices injected, ateom's edits made)
    devices: tuple[str, ...]
    injection: Any  # the injector's plan, None without devices
    is_sandbox: bool


@dataclass(frozen=True, slots=True)
class SandboxPlan:
    containers: tuple[ContainerPlan, ...]  # sandbox root first

    @property
    def gpu(self) -> bool:
        return any(c.devices for c in self.containers)

    @property
    def names(self) -> tuple[str, ...]:
        """runsc container ids, sandbox root first."""
        return tuple(c.runsc_id for c in self.containers)

    @property
    def root_id(self) -> str:
        return self.containers[0].runsc_id

    @property
    def container_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.containers)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d for c in self.containers for d in c.devices))


@dataclass
class Sandbox:
    """What the service keeps per hosted actor."""

    runsc: Runsc
    plan: SandboxPlan
    applied: list[ContainerPlan] = field(default_factory=list)
    originals: str = ""  # where the bundles' own config.json are kept while applied


@dataclass(frozen=True, slots=True)
class ActorStatus:
    ref: ActorRef
    phase: str
    containers: tuple[str, ...]
    devices: tuple[str, ...]
    sandbox_exited: bool


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    version: str
    state: str
    actors: tuple[ActorStatus, ...]
    gpu_present: bool
    cdi_spec_source: str
    runsc: RunscInfo | None
    runsc_error: str
    max_actors: int
    spec_dirs: tuple[str, ...]


def _keep_original(kept: str, c: ContainerPlan) -> None:
    """Save the bundle's own config.json before ateom writes it (writes a file), so
    a Terminate can give it back even when the daemon that wrote it died."""
    if not kept:
        return
    os.makedirs(kept, mode=0o700, exist_ok=True)
    record = {"bundle": c.bundle, "config": base64.b64encode(c.original).decode()}
    _write_atomic(os.path.join(kept, f"{c.name}.json"), json.dumps(record).encode())


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.ateom-tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _file_versions(top: str) -> dict[str, tuple[int, int, int, int]]:
    """Relative path -> (inode, size, mtime, ctime) of each file under `top` (stats):
    what a checkpoint wrote is what is new or changed, not what an earlier
    call left in the same directory."""
    versions = {}
    for d, _, names in os.walk(top):
        for name in names:
            path = os.path.join(d, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            versions[os.path.relpath(path, top)] = (st.st_ino, st.st_size, st.st_mtime_ns,
                                                    st.st_ctime_ns)
    return versions


def _sandbox_processes(root: str) -> list[int]:
    """Pids of runsc processes (sandbox, gofer...) run with ``--root=<root>`` (reads /proc)."""
    marker = f"--root={root}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if marker in args:
            found.append(int(entry))
    return found


class AteomService:
    def __init__(
        self,
        config: DaemonConfig,
        *,
        reaper: Reaper | None = None,
        injector: Injector | None = None,
    ) -> None:
        self.config = config
        self.reaper = reaper or default_reaper()
        environ = dict(config.env or os.environ)
        self.injector: Injector = injector or CdiInjector(
            environ, driver_root=config.driver_root, toolkit_dir=config.toolkit_dir)
        self.actors = ActorTable(config.max_actors)
        self.state = "starting"
        self.spec_generator = SpecGenerator(
            self.reaper, config.driver_root, config.generated_cdi_dir, environ,
            toolkit_dir=config.toolkit_dir,
        )
        self._inflight = 0
        self._inflight_cond = threading.Condition()
        self._closed = False  # the drain's grace is over: nothing more is admitted
        self._doctor_lock = threading.Lock()
        # Writes app bundles while the sandbox root boots: one thread per
        # actor that can be booting at once (threads start on first use).
        self._writer = futures.ThreadPoolExecutor(max_workers=config.max_actors,
                                                  thread_name_prefix="bundle-writer")
        self.nvproxy = NvproxyOptions(config.nvproxy_driver_version, config.nvproxy_capabilities)

    # -- shared steps ------------------------------------------------------

    def probe(self, path: str) -> RunscInfo:
        def runner(argv: Sequence[str]) -> tuple[int, str]:
            done = self.reaper.run_capture(argv, timeout=PROBE_TIMEOUT)
            return done.returncode, done.output

        return probe_runsc(path, runner)

    def _runsc(self, uid: str, info: RunscInfo) -> Runsc:
        root_id = sandbox_root_id(uid, self.config.pause_container)
        log_dir = os.path.join(self.config.log_root, uid)
        os.makedirs(log_dir, mode=0o750, exist_ok=True)
        target = RunscTarget(
            info=info,
            root=os.path.join(self.config.state_root, uid),
            global_flags=self.config.runsc_global_flags,
            nvproxy=self.nvproxy,
        )
        return Runsc(target, self.reaper, log_dir, self.config.runsc_timeout,
                     log_names={root_id: self.config.pause_container})

    @contextlib.contextmanager
    def _call(self, op: Op, uid: str, *, admits: bool) -> Iterator[None]:
        """Every lifecycle call: draining check, in-flight count, actor log context."""
        with self._inflight_cond:
            if admits and self.state == "draining":
                raise AteomError("ateom is draining: not accepting new actors",
                                 code=ErrorCode.UNAVAILABLE)
            self._inflight += 1
        try:
            # The op is the outer phase: every line of the call carries a phase,
            # and the whole call's duration is logged like any other phase.
            with structlog.contextvars.bound_contextvars(actor_uid=uid, op=op.value), \
                    phase(op.value):
                yield
        finally:
            with self._inflight_cond:
                self._inflight -= 1
                self._inflight_cond.notify_all()

    def _admit(self, ref: ActorRef, op: Op) -> Actor:
        """Reserve the actor's slot, unless the drain has already taken its last look
        at the hosted actors (an actor admitted after that would outlive the daemon)."""
        with self._inflight_cond:
            if self._closed:
                raise AteomError("ateom is shutting down: not accepting new actors",
                                 code=ErrorCode.UNAVAILABLE)
            return self.actors.admit(ref, op)

    def _registry(self, *, generate_gpu_spec: bool) -> Any:
        """Load the CDI registry (reads spec files); generate the nvidia.com/gpu spec
        with nvidia-ctk when the Pod has GPUs but no spec describes them."""
        from ateom.cdi.registry import Registry

        spec_dirs = list(self.config.spec_dirs)
        if self.spec_generator.generated:
            spec_dirs.append(self.config.generated_cdi_dir)
        registry = Registry.load(spec_dirs)
        if generate_gpu_spec and not registry.has_kind(devices.GPU_KIND):
            with phase("cdi.generate"):
                generated = self.spec_generator.ensure()
            spec_dirs.append(os.path.dirname(generated))
            registry = Registry.load(list(dict.fromkeys(spec_dirs)))
        return registry

    def _plan(
        self, uid: str, bundle_root: str, containers: Sequence[ContainerRequest],
        info: RunscInfo, *, cpu_milli: int = 0, memory_bytes: int = 0,
    ) -> SandboxPlan:
        """Read bundles, choose/resolve devices, plan each injection. No side effects."""
        pause = self.config.pause_container
        root_id = sandbox_root_id(uid, pause)
        present = gpu_present(self.config.gpu_glob)
        wants_default = present and any(
            c.devices.policy is DevicePolicy.POD_DEFAULT for c in containers)
        registry = None
        if wants_default or any(c.devices.policy is DevicePolicy.EXPLICIT for c in containers):
            registry = self._registry(generate_gpu_spec=wants_default)
        pod_default = devices.pod_default_devices(
            d.qualified_name for d in registry.devices()) if registry else ()
        plans = []
        for name, request in [(pause, None), *[(c.name, c) for c in containers]]:
            bundle = os.path.join(bundle_root, name)
            # ateom writes into each bundle: none may lead out of --actors-root.
            validation.check_path_on_disk(f"container {name!r}: bundle", bundle,
                                          self.config.actors_root)
            config_path = os.path.join(bundle, "config.json")
            try:
                with open(config_path, "rb") as f:
                    original = f.read()
            except FileNotFoundError:
                raise AteomError(
                    f"container {name!r}: bundle {bundle} has no config.json (the node agent"
                    " prepares one bundle per container under oci_bundle_dir)",
                    code=ErrorCode.FAILED_PRECONDITION,
                ) from None
            except OSError as exc:
                raise AteomError(f"{config_path}: cannot read: {exc.strerror}",
                                 code=ErrorCode.FAILED_PRECONDITION) from None
            parsed = bundles.parse_config(original, config_path)
            bundles.refuse_foreign_hooks(parsed, config_path)
            names: tuple[str, ...] = ()
            injection = None
            if request is not None:
                names = devices.choose_devices(request, gpu_present=present,
                                               pod_default=pod_default)
                if names:
                    devices.check_gvisor_devices(name, names)
                    assert registry is not None
                    resolution = registry.resolve(list(names))
                    devices.check_resolution_for_gvisor(name, resolution)
                    devices.check_nvproxy(info)  # before reading any library
                    with phase("inject.plan", container=name):
                        injection = self.injector.plan(bundle, resolution)
                    parsed = bundles.parse_config(injection.config_after, config_path)
            prepared = bundles.prepare_config(
                parsed, config_path, container=name, sandbox_id=root_id,
                is_sandbox=request is None, cpu_milli=cpu_milli, memory_bytes=memory_bytes,
            )
            if prepared.removed_annotations:
                log.warning("foreign_annotations_removed", container=name,
                            annotations=list(prepared.removed_annotations))
            plans.append(ContainerPlan(name, root_id if request is None else name,
                                       bundle, original, bundles.dump_config(prepared.config),
                                       names, injection, request is None))
        return SandboxPlan(tuple(plans))

    def _apply(self, sandbox: Sandbox, containers: Sequence[ContainerPlan]) -> None:
        """Write each prepared config.json, injecting its devices (writes files).

        Each container is recorded as applied before its write, so a write
        that fails halfway is given back too.
        """
        for c in containers:
            sandbox.applied.append(c)
            _keep_original(sandbox.originals, c)
            if c.injection is not None:
                with phase("inject", container=c.name, devices=list(c.devices)):
                    self.injector.apply(c.injection, c.prepared)
            else:
                _write_atomic(os.path.join(c.bundle, "config.json"), c.prepared)

    def _apply_and_boot(self, actor: Actor, sandbox: Sandbox, image_path: str | None) -> None:
        """Boot the sandbox root while the app containers' bundles are written.

        The sandbox root never gets devices, and its runsc create+start (or
        restore) takes ~100 ms; injecting an app bundle (SONAME links staged,
        config.json written and fsync'ed by the injector) takes 2 ms on a quiet
        filesystem and tens of ms when writes are pending. Done side by side,
        the injection leaves an actor's cold start. Every write is finished
        before this returns or raises, so a rollback sees all of them.
        """
        root, apps = sandbox.plan.containers[0], sandbox.plan.containers[1:]
        self._apply(sandbox, [root])
        pending = None
        if apps:
            # The actor's log context (uid, op) goes with the work.
            pending = self._writer.submit(contextvars.copy_context().run,
                                          self._apply, sandbox, apps)
        try:
            self._boot(actor, sandbox, [root], image_path)
        finally:
            if pending is not None:
                futures.wait([pending])
        if pending is not None:
            pending.result()  # the injection's own error, once the root booted
        self._boot(actor, sandbox, apps, image_path)

    def _unapply(self, sandbox: Sandbox) -> None:
        """Give each bundle back the config.json the node agent wrote (writes files)."""
        failed = False
        for c in reversed(sandbox.applied):
            try:
                _write_atomic(os.path.join(c.bundle, "config.json"), c.original)
            except OSError as exc:
                failed = True
                log.warning("bundle_restore_failed", container=c.name, error=str(exc))
        sandbox.applied.clear()
        if not failed:  # else a later Terminate tries again from the kept copies
            shutil.rmtree(sandbox.originals, ignore_errors=True)

    def _boot(self, actor: Actor, sandbox: Sandbox, containers: Sequence[ContainerPlan],
              image_path: str | None) -> None:
        """runsc create+start (or restore) each of `containers`, in order."""
        runsc = sandbox.runsc
        os.makedirs(runsc.target.root, mode=0o700, exist_ok=True)
        for c in containers:
            pid_file = os.path.join(runsc.target.root, f"{c.runsc_id}.pid")
            gpu = sandbox.plan.gpu and c.is_sandbox
            if image_path is not None:
                if runsc.target.info.restore_needs_create:
                    with phase("runsc.create", container=c.name):
                        runsc.create(c.runsc_id, c.bundle, pid_file, gpu=gpu)
                with phase("runsc.restore", container=c.name):
                    runsc.restore(c.runsc_id, c.bundle, image_path, pid_file, gpu=gpu)
            else:
                with phase("runsc.create", container=c.name):
                    runsc.create(c.runsc_id, c.bundle, pid_file, gpu=gpu)
                with phase("runsc.start", container=c.name):
                    runsc.start(c.runsc_id)
            if c.is_sandbox:
                self._watch_sandbox(actor, pid_file)

    def _watch_sandbox(self, actor: Actor, pid_file: str) -> None:
        try:
            with open(pid_file) as f:
                actor.sandbox_pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            return
        if actor.sandbox_pid <= 0:
            return
        uid = actor.ref.actor_uid

        def exited(pid: int, code: int) -> None:
            actor.sandbox_exit = code
            log.info("sandbox_exited", actor_uid=uid, pid=pid, exit_code=code)

        self.reaper.watch(actor.sandbox_pid, exited)

    def _teardown(self, runsc: Runsc, names: Sequence[str], grace: float,
                  *, ask_runsc: bool = True) -> None:
        """Kill (TERM, grace, KILL) and delete apps then the sandbox root; clean the state dir.

        Skips what `runsc list` no longer shows (`ask_runsc` False: the caller
        knows every container exists, as right after a checkpoint). Then kills
        any runsc process still running with this actor's --root: a container
        left `created` by a failed flow keeps its sandbox after `delete -force`
        otherwise.
        """
        with phase("teardown"):
            listed = runsc.list() if ask_runsc else None
            known = set(names) if listed is None else set(listed)
            present = [n for n in names if n in known]
            ordered = list(reversed(present))  # apps first, sandbox root last
            if grace > 0 and ordered:
                for name in ordered:
                    runsc.kill(name, "TERM")
                deadline = time.monotonic() + grace
                waiting = list(ordered)
                while waiting and time.monotonic() < deadline:
                    waiting = [n for n in waiting if runsc.status(n) not in ("stopped", "")]
                    if waiting:
                        time.sleep(0.05)
            for name in ordered:
                runsc.kill(name, "KILL")
            for name in ordered:
                with phase("runsc.delete", container=runsc.log_names.get(name, name)):
                    runsc.delete(name)
            for name in sorted(known - set(present)):  # containers we never asked for
                runsc.kill(name, "KILL")
                runsc.delete(name)
            leftovers = _sandbox_processes(runsc.target.root)
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if leftovers:
                log.warning("sandbox_processes_killed", pids=leftovers)
            deadline = time.monotonic() + 5
            while _sandbox_processes(runsc.target.root) and time.monotonic() < deadline:
                time.sleep(0.02)
            shutil.rmtree(runsc.target.root, ignore_errors=True)

    def _rollback(self, actor: Actor, sandbox: Sandbox) -> None:
        with phase("rollback"):
            try:
                self._teardown(sandbox.runsc, sandbox.plan.names, 0)
            finally:
                self._unapply(sandbox)
                if actor.sandbox_pid:
                    self.reaper.unwatch(actor.sandbox_pid)

    def _host(self, actor: Actor, sandbox: Sandbox, image_path: str | None) -> None:
        """Apply the plan and boot; on any failure roll back and re-raise."""
        actor.containers = sandbox.plan.container_names
        actor.devices = sandbox.plan.devices
        actor.gpu = sandbox.plan.gpu
        actor.sandbox = sandbox
        try:
            self._apply_and_boot(actor, sandbox, image_path)
        except BaseException:
            self._rollback(actor, sandbox)
            raise
        actor.epoch_unix_nano = time.time_ns()
        actor.phase = Phase.RUNNING

    def _allowed_runsc(self, requested: str) -> str:
        """The runsc a request may run (PERMISSION_DENIED otherwise); stats PATH."""
        configured = self.config.runsc
        resolved = "" if os.path.isabs(configured) else shutil.which(configured) or ""
        return validation.check_runsc_path(requested, configured, self.config.runsc_dir,
                                           resolved=resolved)

    def _check_runsc(self, requested: str) -> RunscInfo:
        return self.probe(self._allowed_runsc(requested))

    # -- lifecycle ---------------------------------------------------------

    def _admit_and_host(self, req: RunRequest | RestoreRequest, op: Op, info: RunscInfo,
              image: str | None, *, discard_image: bool = False) -> SandboxPlan:
        """Admit the actor, plan its bundles, and host its sandbox (restored from
        `image` when given; the image is removed once restored if
        `discard_image`, still under the actor's lock). Shared by Run and
        Restore so admission, rollback of the hosting table and the lock's
        release live in one place."""
        uid = req.actor.actor_uid
        actor = self._admit(req.actor, op)
        try:
            with phase("plan"):
                plan = self._plan(uid, req.dirs.oci_bundle_dir, req.containers, info,
                                  cpu_milli=req.cpu_milli, memory_bytes=req.memory_bytes)
            self._host(actor, Sandbox(self._runsc(uid, info), plan,
                                      originals=self._originals_dir(uid)), image)
            if image is not None and discard_image:
                shutil.rmtree(image, ignore_errors=True)
            return plan
        except BaseException:
            self.actors.remove(actor)
            raise
        finally:
            actor.lock.release()

    def run_workload(self, req: RunRequest) -> None:
        with self._call(Op.RUN, req.actor.actor_uid, admits=True):
            with phase("validate"):
                validation.check_run(req, self.config.actors_root,
                                     pause=self.config.pause_container)
                info = self._check_runsc(req.runsc_path)
                validation.check_dirs_on_disk(req.dirs, self.config.actors_root)
            plan = self._admit_and_host(req, Op.RUN, info, None)
            log.info("actor_running", containers=list(plan.container_names),
                     devices=list(plan.devices), nvproxy=plan.gpu)

    def restore_workload(self, req: RestoreRequest) -> None:
        with self._call(Op.RESTORE, req.actor.actor_uid, admits=True):
            with phase("validate"):
                validation.check_restore(req, self.config.actors_root,
                                         pause=self.config.pause_container)
                info = self._check_runsc(req.runsc_path)
                validation.check_dirs_on_disk(req.dirs, self.config.actors_root)
                image = req.dirs.restore_dir
                if not os.path.isdir(image) or not os.listdir(image):
                    raise AteomError(f"actor_dirs.restore_dir {image}: missing or empty",
                                     code=ErrorCode.FAILED_PRECONDITION)
            try:
                plan = self._admit_and_host(req, Op.RESTORE, info, image,
                                            discard_image=not req.preserve_restore_dir)
            except RunscError as exc:
                raise AteomError(
                    f"restore of actor {req.actor.actor_uid} failed in runsc and was cleaned"
                    f" up: {exc}",
                    code=ErrorCode.INTERNAL,
                ) from exc
            log.info("actor_restored", containers=list(plan.container_names),
                     devices=list(plan.devices), nvproxy=plan.gpu)

    def checkpoint_workload(self, req: CheckpointRequest) -> CheckpointResult:
        uid = req.actor.actor_uid
        with self._call(Op.CHECKPOINT, uid, admits=False):
            with phase("validate"):
                validation.check_checkpoint(req, self.config.actors_root,
                                            pause=self.config.pause_container)
                self._allowed_runsc(req.runsc_path)
                validation.check_dirs_on_disk(req.dirs, self.config.actors_root)
            with self.actors.operate(uid, Op.CHECKPOINT) as actor:
                sandbox: Sandbox = actor.sandbox
                runsc = sandbox.runsc
                image = req.dirs.checkpoint_dir
                try:
                    os.makedirs(image, mode=0o750, exist_ok=True)
                except OSError as exc:
                    raise AteomError(
                        f"actor_dirs.checkpoint_dir {image}: cannot make it a directory:"
                        f" {exc.strerror}; the actor keeps running",
                        code=ErrorCode.FAILED_PRECONDITION) from None
                before = _file_versions(image)
                root = sandbox.plan.root_id
                try:
                    with phase("runsc.checkpoint", container=root):
                        runsc.checkpoint(root, image)
                except RunscError as exc:
                    if runsc.status(root) == "running":
                        # e.g. a live CUDA context runsc cannot save: nothing
                        # is lost, the actor keeps running.
                        raise AteomError(
                            f"runsc refused to checkpoint actor {uid}; it keeps running:"
                            f" {exc.reason}\n{exc.tail}",
                            code=ErrorCode.FAILED_PRECONDITION,
                        ) from exc
                    self._release(actor, grace=0)
                    raise
                after = _file_versions(image)
                files = tuple(sorted(f for f, v in after.items() if before.get(f) != v))
                self._release(actor, grace=0, ask_runsc=False)
                log.info("actor_checkpointed", files=list(files))
                return CheckpointResult(files)

    def _release(self, actor: Actor, grace: float, *, ask_runsc: bool = True) -> None:
        sandbox: Sandbox = actor.sandbox
        try:
            self._teardown(sandbox.runsc, sandbox.plan.names, grace, ask_runsc=ask_runsc)
        finally:
            self._unapply(sandbox)
            if actor.sandbox_pid:
                self.reaper.unwatch(actor.sandbox_pid)
            self.actors.remove(actor)

    def terminate_workload(self, req: TerminateRequest) -> None:
        uid = req.actor.actor_uid
        with self._call(Op.TERMINATE, uid, admits=False):
            with phase("validate"):
                validation.check_terminate(req, self.config.actors_root,
                                           pause=self.config.pause_container)
                self._allowed_runsc(req.runsc_path)
            if self.actors.get(uid) is None:
                self._clean_leftovers(uid)  # idempotent: a gone actor is terminated
                return
            try:
                with self.actors.operate(uid, Op.TERMINATE) as actor:
                    self._release(actor, grace=self.config.kill_grace)
                    log.info("actor_terminated")
            except AteomError as exc:
                if exc.code is ErrorCode.NOT_FOUND:  # went away while we waited
                    return
                raise

    def _clean_leftovers(self, uid: str) -> None:
        """A terminate for an actor we do not host: clear any state a crash left."""
        root = os.path.join(self.config.state_root, uid)
        if os.path.isdir(root):
            info = self.probe(self.config.runsc)
            runsc = self._runsc(uid, info)
            self._teardown(runsc, sorted(runsc.list() or []), 0)
        self._give_back_kept_originals(uid)

    def _originals_dir(self, uid: str) -> str:
        return os.path.join(self.config.run_dir, "bundles", uid)

    def _give_back_kept_originals(self, uid: str) -> None:
        """Restore the config.json each bundle had before a daemon that died wrote it."""
        kept = self._originals_dir(uid)
        if not os.path.isdir(kept):
            return
        for name in sorted(os.listdir(kept)):
            try:
                with open(os.path.join(kept, name), "rb") as f:
                    record = json.loads(f.read())
                bundle, original = record["bundle"], base64.b64decode(record["config"])
                # Only ever a bundle a request could name.
                validation.check_path_on_disk("kept bundle", bundle, self.config.actors_root)
                _write_atomic(os.path.join(bundle, "config.json"), original)
            except (OSError, ValueError, KeyError, TypeError, AteomError) as exc:
                log.warning("bundle_restore_failed", kept=name, error=str(exc))
                return
            log.info("bundle_given_back", bundle=bundle)
        shutil.rmtree(kept, ignore_errors=True)

    # -- operators ---------------------------------------------------------

    def plan_injection(self, bundle_dir: str, names: Sequence[str]) -> tuple[
            tuple[str, ...], str]:
        """The devices and config.json diff an injection into `bundle_dir` would make.

        Reads only. The bundle must be under --actors-root (an operator's
        request must not read arbitrary files) and the devices pass the
        checks a Run's would; no `names` means the Pod's default GPUs.
        """
        if not bundle_dir:
            raise validation.invalid("bundle_dir: required")
        validation.check_path("bundle_dir", bundle_dir, self.config.actors_root)
        for i, name in enumerate(names):
            validation.check_device_name(f"devices[{i}]", name)
        validation.check_path_on_disk("bundle_dir", bundle_dir, self.config.actors_root)
        registry = self._registry(generate_gpu_spec=False)
        chosen = tuple(names) or devices.pod_default_devices(
            d.qualified_name for d in registry.devices())
        container = os.path.basename(bundle_dir)
        devices.check_gvisor_devices(container, chosen)
        resolution = registry.resolve(list(chosen))
        devices.check_resolution_for_gvisor(container, resolution)
        return chosen, self.injector.plan(bundle_dir, resolution).diff()

    # -- stats -------------------------------------------------------------

    def workload_stats(self, uid: str) -> StatsSample:
        actor = self.actors.get(uid)
        if actor is None:
            raise AteomError(f"actor {uid}: not hosted by this worker", code=ErrorCode.NOT_FOUND)
        if actor.phase in (Phase.BOOTING, Phase.RESTORING):
            raise AteomError(f"actor {uid}: still {actor.phase.value}; no stats yet",
                             code=ErrorCode.FAILED_PRECONDITION)
        sandbox: Sandbox | None = actor.sandbox
        if sandbox is None:
            raise AteomError(f"actor {uid}: no sandbox", code=ErrorCode.FAILED_PRECONDITION)
        if actor.sandbox_exit is not None:
            raise AteomError(
                f"actor {uid}: its sandbox exited (code {actor.sandbox_exit}); terminate it",
                code=ErrorCode.FAILED_PRECONDITION)
        try:
            data = sandbox.runsc.stats(sandbox.plan.root_id)
        except RunscError as exc:
            raise AteomError(f"actor {uid}: runsc reported no stats: {exc.tail}",
                             code=ErrorCode.UNAVAILABLE) from exc
        return sample_from_runsc_stats(actor, data, time.time_ns())

    def active_workload_stats(self) -> list[StatsSample]:
        samples = []
        for actor in self.actors.snapshot():
            if actor.phase is not Phase.RUNNING:
                continue
            try:
                samples.append(self.workload_stats(actor.ref.actor_uid))
            except AteomError as exc:
                log.info("stats_skipped", actor_uid=actor.ref.actor_uid, reason=str(exc))
        return samples

    # -- daemon ------------------------------------------------------------

    def status(self) -> DaemonStatus:
        try:
            info: RunscInfo | None = self.probe(self.config.runsc)
            error = ""
        except AteomError as exc:
            info, error = None, str(exc)
        source = ""
        if self.spec_generator.generated:
            source = f"generated:{self.spec_generator.generated}"
        else:
            try:
                from ateom.cdi.registry import Registry

                registry = Registry.load(list(self.config.spec_dirs))
                gpu_specs = sorted({d.spec_path for d in registry.devices()
                                    if d.qualified_name.startswith(devices.GPU_KIND + "=")})
                source = ",".join(gpu_specs)
            except AteomError:
                source = ""
        return DaemonStatus(
            version=__version__,
            state=self.state,
            actors=tuple(
                ActorStatus(a.ref, a.phase.value, a.containers, a.devices,
                            a.sandbox_exit is not None)
                for a in self.actors.snapshot()
            ),
            gpu_present=gpu_present(self.config.gpu_glob),
            cdi_spec_source=source,
            runsc=info,
            runsc_error=error,
            max_actors=self.config.max_actors,
            spec_dirs=self.config.spec_dirs,
        )

    def doctor(self, devices: Sequence[str] = ()) -> Any:
        """`ateom doctor` with this daemon's settings: an `ateom.doctor.Report`.

        Stats device nodes, reads ELF, runs runsc and maybe nvidia-ctk (through
        the daemon's reaper: it waits on every child, so a plain subprocess here
        would race it). Runs on the calling RPC thread, one report at a time;
        a second request meanwhile gets RESOURCE_EXHAUSTED rather than a wait,
        so operators asking at once cannot tie up the threads the lifecycle
        calls need. `devices` replaces the default devices
        (nvidia.com/gpu=all) when given.
        """
        from ateom.doctor import doctor_config_for_daemon, run_doctor
        from ateom.doctor.gather import reaper_runner

        config = doctor_config_for_daemon(self.config)
        if devices:
            config = dataclasses.replace(config, devices=tuple(devices))
        if self.spec_generator.generated:
            # The spec this daemon generated is one it uses: the doctor looks
            # there too rather than generating another.
            config = dataclasses.replace(config, spec_dirs=tuple(dict.fromkeys(
                (*config.spec_dirs, os.path.dirname(self.spec_generator.generated)))))
        if not self._doctor_lock.acquire(blocking=False):
            raise AteomError("a doctor report is being made already; ask again when it is done",
                             code=ErrorCode.RESOURCE_EXHAUSTED)
        try:
            return run_doctor(config, dict(self.config.env or os.environ),
                              run=reaper_runner(self.reaper))
        finally:
            self._doctor_lock.release()

    def drain(self, grace: float) -> None:
        """Stop admitting; for up to `grace`, let calls finish and the node agent
        checkpoint or terminate its actors (Checkpoint/Terminate stay open);
        then terminate whatever is still hosted. A Run/Restore admitted by
        `_call` but not yet holding its actor's slot by then gets UNAVAILABLE."""
        with self._inflight_cond:
            self.state = "draining"
            deadline = time.monotonic() + grace
            log.info("draining", inflight=self._inflight, hosted=len(self.actors), grace=grace)
            while (self._inflight or len(self.actors)) and time.monotonic() < deadline:
                self._inflight_cond.wait(timeout=min(0.1, deadline - time.monotonic()))
            log.info("drained", inflight=self._inflight, hosted=len(self.actors))
            self._closed = True
        for actor in self.actors.snapshot():
            with contextlib.suppress(AteomError):
                self.terminate_workload(TerminateRequest(actor=actor.ref))


def sample_from_runsc_stats(actor: Actor, data: dict[str, Any], now_ns: int) -> StatsSample:
    """Map `runsc events --stats` data to a sample (pure but for the peak it tracks)."""
    memory = data.get("memory") or {}
    usage = memory.get("usage") or {}
    current = int(usage.get("usage", 0) or 0)
    peak = max(actor.memory_peak_bytes, int(usage.get("max", 0) or 0), current)
    actor.memory_peak_bytes = peak
    cache = int((memory.get("cache") or 0) or 0)
    cpu_total_ns = int(((data.get("cpu") or {}).get("usage") or {}).get("total", 0) or 0)
    return StatsSample(
        actor=actor.ref,
        memory_current_bytes=current,
        memory_peak_bytes=peak,
        memory_working_set_bytes=max(current - cache, 0),
        cpu_usage_usec=cpu_total_ns // 1000,
        observed_at_unix_nano=now_ns,
        epoch_unix_nano=actor.epoch_unix_nano,
    )
