"""The `ateom.Inspect` service: questions operators ask a running daemon.

`Inspector` answers them over the daemon's own parts (its actor table, its
device catalog, its injector, its reaper), so each answer is about what the
daemon itself uses; `InspectServicer` only translates to the wire. The
doctor is wired in here, at the edge: the lifecycle core never imports it.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from ateom import __version__
from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from ateom.cdi.registry import Registry
from ateom.cdi.spec_file import spec_problems
from ateom.daemon.actors.admission import Admission
from ateom.daemon.actors.table import NO_ASKS, ActorTable, Asks
from ateom.daemon.bundles import devices
from ateom.daemon.bundles.catalog import DeviceCatalog
from ateom.daemon.bundles.plan import Injector, read_bundle_config
from ateom.daemon.calls import progress, validation
from ateom.daemon.calls.requests import ActorRef
from ateom.daemon.gpus.checkpoint_policy import runsc_saves_gpu_state
from ateom.daemon.gpus.lifecycle import GpuActors
from ateom.daemon.lifecycle.config import DaemonConfig
from ateom.daemon.lifecycle.service import AteomService
from ateom.daemon.rpc.handler import rpc
from ateom.doctor import DoctorConfig, Report, run_doctor
from ateom.doctor.report import wire_status
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.compat import runsc_remaps_gpus
from ateom.gpuinfo.placement import PlacementSnapshot
from ateom.gpuinfo.record import RunscBuild
from ateom.process.reaper import Reaper
from ateom.process.runner import reaper_runner
from ateom.runsc.probe import RunscInfo
from ateom.worker.capacity import Capacity


@dataclass(frozen=True, slots=True)
class ActorStatus:
    ref: ActorRef
    phase: str
    containers: tuple[str, ...]
    devices: tuple[str, ...]
    sandbox_exited: bool
    gpus: tuple[str, ...] = ()
    checkpoint_blocker: str = ""  # "" when a Checkpoint would be tried now
    exit_code: int = 0  # when sandbox_exited (negative: killed by that signal)
    exited_at_unix_nano: int = 0
    in_progress: tuple[progress.Running, ...] = ()  # its long phases now


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
    gpu_placement: str = ""
    placement: PlacementSnapshot | None = None
    not_ready: tuple[str, ...] = ()  # why Health is NOT_SERVING
    worker: WorkerStatus | None = None


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """The worker Pod as started: its uid, the base dir's paths, its capacity."""

    pod_uid: str
    base_dir: str
    socket: str
    actors_root: str
    capacity: Capacity
    readiness_listen_address: str
    accepted_not_served: tuple[str, ...]
    in_use: Asks = NO_ASKS  # what the actors hosted ask of the capacity

    @classmethod
    def of(cls, config: DaemonConfig, capacity: Capacity, in_use: Asks) -> WorkerStatus:
        return cls(config.pod_uid, config.base_dir, config.socket, config.actors_root,
                   capacity, config.readiness_listen_address, config.accepted_not_served,
                   in_use)


def doctor_config(config: DaemonConfig, spec_dirs: Sequence[str]) -> DoctorConfig:
    """The doctor settings for a running daemon (pure): what it was told by flag or
    environment, and the spec dirs it actually uses (a generated spec's included)."""
    node = dataclasses.replace(config.node, spec_dirs=tuple(spec_dirs))
    return DoctorConfig(node=node, gpu=config.gpu, runsc=config.runsc,
                        runsc_global_flags=config.runsc_global_flags,
                        max_actors=config.max_actors, actors_root=config.actors_root,
                        run_dir=config.run_dir, pod_uid=config.pod_uid,
                        capacity_dir=config.capacity_dir,
                        accepted_not_served=config.accepted_not_served)


class Inspector:
    # One doctor report at a time in this process (one daemon per process).
    doctor_lock = threading.Lock()

    def __init__(self, config: DaemonConfig, *, actors: ActorTable, admission: Admission,
                 catalog: DeviceCatalog, injector: Injector, reaper: Reaper,
                 probe: Callable[[str], RunscInfo], environ: Mapping[str, str],
                 gpus: GpuActors,
                 not_ready: Callable[[], tuple[str, ...]] = lambda: (),
                 capacity: Capacity | None = None) -> None:
        self.not_ready = not_ready
        self.capacity = capacity or Capacity()
        self.config = config
        self.gpus = gpus
        self.actors = actors
        self.admission = admission
        self.catalog = catalog
        self.injector = injector
        self.reaper = reaper
        self.probe = probe
        self.environ = dict(environ)

    @classmethod
    def for_service(cls, service: AteomService) -> Inspector:
        """The inspector over a lifecycle service's own parts."""
        return cls(service.config, actors=service.actors, admission=service.admission,
                   catalog=service.catalog, injector=service.injector, reaper=service.reaper,
                   probe=service.probe, environ=service.environ, gpus=service.gpus,
                   not_ready=service.not_ready, capacity=service.capacity)

    def actors_now(self) -> tuple[ActorStatus, ...]:
        """Each hosted actor, its GPUs, and whether it could be checkpointed now."""
        out = []
        running = progress.running()
        for a in self.actors.snapshot():
            try:
                blocker = self.gpus.blocker(a)
            except AteomError as exc:  # e.g. the GPU facts could not be gathered
                blocker = None
                why = str(exc)
            else:
                why = blocker.message if blocker is not None else ""
            out.append(ActorStatus(a.ref, a.phase.value, a.containers, a.devices,
                                   a.sandbox_exit is not None,
                                   self.gpus.pool.held_by(a.ref.actor_uid), why,
                                   exit_code=a.sandbox_exit or 0,
                                   exited_at_unix_nano=a.exited_at_unix_nano,
                                   in_progress=tuple(r for r in running
                                                     if r.actor_uid == a.ref.actor_uid)))
        return tuple(out)

    def status(self) -> DaemonStatus:
        """The daemon now (probes runsc, reads spec files, globs device nodes)."""
        try:
            info: RunscInfo | None = self.probe(self.config.runsc)
            error = ""
        except AteomError as exc:
            info, error = None, str(exc)
        return DaemonStatus(
            version=__version__,
            state=self.admission.state,
            actors=self.actors_now(),
            gpu_present=self.catalog.gpu_present(),
            cdi_spec_source=self.catalog.gpu_spec_source(),
            runsc=info,
            runsc_error=error,
            max_actors=self.config.max_actors,
            spec_dirs=self.catalog.spec_dirs(),
            gpu_placement=str(self.gpus.pool.settings),
            placement=self.gpus.pool.snapshot(),
            not_ready=self.not_ready(),
            worker=WorkerStatus.of(self.config, self.capacity, self.actors.held()),
        )

    def devices(self) -> Registry:
        """Every device the daemon would resolve (reads spec files)."""
        return self.catalog.registry()

    def plan_injection(self, bundle_dir: str, names: Sequence[str]) -> tuple[
            tuple[str, ...], str]:
        """The devices and config.json diff an injection into `bundle_dir` would make.

        Reads only. The bundle must be under --actors-root (an operator's
        request must not read arbitrary files) and the devices pass the
        checks a Run's would; no `names` means the Pod's default GPUs.
        """
        root = self.config.actors_root
        if not bundle_dir:
            raise validation.invalid("bundle_dir: required")
        validation.check_path("bundle_dir", bundle_dir, root)
        for i, name in enumerate(names):
            validation.check_device_name(f"devices[{i}]", name)
        validation.check_path_on_disk("bundle_dir", bundle_dir, root)
        registry = self.catalog.registry()
        chosen = tuple(names) or self.catalog.pod_default(registry)
        container = os.path.basename(bundle_dir)
        resolution = devices.resolve_for_gvisor(container, chosen, registry,
                                                self.probe(self.config.runsc))
        config = read_bundle_config(bundle_dir, container, root)
        return chosen, self.injector.plan(bundle_dir, resolution, config).diff()

    def doctor(self, names: Sequence[str] = ()) -> Report:
        """`ateom doctor` with this daemon's settings.

        Stats device nodes, reads ELF, runs runsc and maybe nvidia-ctk (through
        the daemon's reaper: it waits on every child, so a plain subprocess here
        would race it). Runs on the calling RPC thread, one report at a time;
        a second request meanwhile gets RESOURCE_EXHAUSTED rather than a wait,
        so operators asking at once cannot tie up the threads the lifecycle
        calls need. `names` replaces the default devices (nvidia.com/gpu=all).
        """
        config = doctor_config(self.config, self.catalog.spec_dirs())
        if names:
            config = dataclasses.replace(config, devices=tuple(names))
        if not self.doctor_lock.acquire(blocking=False):
            raise AteomError("a doctor report is being made already; ask again when it is done",
                             code=ErrorCode.RESOURCE_EXHAUSTED)
        try:
            return run_doctor(config, self.environ, run=reaper_runner(self.reaper))
        finally:
            self.doctor_lock.release()


# -- wire ---------------------------------------------------------------------

def doctor_response(report: Report) -> pb.DoctorResponse:
    """A doctor report -> wire (pure): the checks `ateom doctor --json` prints."""
    return pb.DoctorResponse(
        ok=report.ok,
        checks=[
            pb.DoctorCheck(name=r.name, status=pb.DoctorStatus.Value(wire_status(r.status)),
                           summary=r.summary, fix=r.fix, details=list(r.details))
            for r in report.results
        ],
    )


def hosted_actor(a: ActorStatus) -> pb.HostedActor:
    return pb.HostedActor(actor_uid=a.ref.actor_uid, atespace=a.ref.atespace,
                          actor_name=a.ref.actor_name, phase=a.phase,
                          containers=list(a.containers), devices=list(a.devices),
                          sandbox_exited=a.sandbox_exited, gpus=list(a.gpus),
                          checkpointable=not a.checkpoint_blocker,
                          checkpoint_blocker=a.checkpoint_blocker, exit_code=a.exit_code,
                          exited_at_unix_nano=a.exited_at_unix_nano,
                          in_progress=[phase_progress(r) for r in a.in_progress])


def phase_progress(r: progress.Running) -> pb.PhaseProgress:
    return pb.PhaseProgress(phase=r.phase, elapsed_seconds=round(r.elapsed, 3),
                            done_bytes=r.done_bytes, expected_bytes=r.expected_bytes,
                            bytes_per_second=round(r.bytes_per_second, 1))


def gpu_holders(snapshot: PlacementSnapshot | None) -> list[pb.GpuHolders]:
    if snapshot is None:
        return []
    return [pb.GpuHolders(gpu=h.gpu.name, actor_uids=list(h.holders), model=h.gpu.model,
                          uuid=h.gpu.uuid) for h in snapshot.gpus]


def status_response(status: DaemonStatus) -> pb.GetStatusResponse:
    """DaemonStatus -> wire (pure)."""
    runsc = pb.RunscStatus(error=status.runsc_error)
    if status.runsc is not None:
        build = RunscBuild.of_version(status.runsc.version)
        runsc = pb.RunscStatus(path=status.runsc.path, version=status.runsc.version,
                               supports_nvproxy=status.runsc.supports_nvproxy,
                               gpu_checkpoint=runsc_saves_gpu_state(status.runsc),
                               gpu_remap=bool(runsc_remaps_gpus(build)))
    return pb.GetStatusResponse(
        version=status.version,
        state=status.state,
        actors=[hosted_actor(a) for a in status.actors],
        gpu_present=status.gpu_present,
        cdi_spec_source=status.cdi_spec_source,
        runsc=runsc,
        max_actors=status.max_actors,
        spec_dirs=list(status.spec_dirs),
        gpu_placement=status.gpu_placement,
        gpus=gpu_holders(status.placement),
        not_ready=list(status.not_ready),
        worker=worker_status(status.worker) if status.worker is not None else None,
    )


def worker_status(worker: WorkerStatus) -> pb.WorkerStatus:
    """WorkerStatus -> wire (pure)."""
    return pb.WorkerStatus(
        pod_uid=worker.pod_uid, base_dir=worker.base_dir, socket=worker.socket,
        actors_root=worker.actors_root, cpu_milli=worker.capacity.cpu_milli,
        memory_bytes=worker.capacity.memory_bytes,
        capacity_problems=list(worker.capacity.problems),
        readiness_listen_address=worker.readiness_listen_address,
        accepted_not_served=list(worker.accepted_not_served),
        cpu_milli_in_use=worker.in_use.cpu_milli, memory_bytes_in_use=worker.in_use.memory_bytes)


def devices_response(registry: Registry) -> pb.ListDevicesResponse:
    """The registry -> wire (pure)."""
    return pb.ListDevicesResponse(
        devices=[
            pb.CdiDevice(
                qualified_name=d.qualified_name,
                kind=d.spec.kind,
                spec_path=d.spec_path,
                device_nodes=[
                    n.path
                    for n in (*d.spec.container_edits.device_nodes,
                              *d.device.container_edits.device_nodes)
                ],
                device=d.device.name,
                priority=d.priority,
            )
            for d in registry.devices()
        ],
        spec_dirs=list(registry.spec_dirs),
        spec_errors=[f"{path}: {p}" for path, e in registry.spec_errors.items()
                     for p in spec_problems(e)],
        conflicts=[f"{name}: {', '.join(files)}"
                   for name, files in registry.conflicts.items()],
        warnings=list(registry.warnings),
    )


class InspectServicer(pb_grpc.InspectServicer):
    def __init__(self, service: AteomService) -> None:
        self.inspector = Inspector.for_service(service)

    @rpc("Inspect.GetStatus")
    def GetStatus(self, request: Any, context: grpc.ServicerContext) -> pb.GetStatusResponse:
        return status_response(self.inspector.status())

    @rpc("Inspect.ListDevices")
    def ListDevices(self, request: Any, context: grpc.ServicerContext) -> pb.ListDevicesResponse:
        return devices_response(self.inspector.devices())

    @rpc("Inspect.ListActors")
    def ListActors(self, request: Any, context: grpc.ServicerContext) -> pb.ListActorsResponse:
        pool = self.inspector.gpus.pool
        return pb.ListActorsResponse(
            actors=[hosted_actor(a) for a in self.inspector.actors_now()],
            gpu_placement=str(pool.settings), gpus=gpu_holders(pool.snapshot()))

    @rpc("Inspect.PlanInjection")
    def PlanInjection(self, request: Any, context: grpc.ServicerContext
                      ) -> pb.PlanInjectionResponse:
        names, diff = self.inspector.plan_injection(request.bundle_dir, list(request.devices))
        return pb.PlanInjectionResponse(devices=names, diff=diff)

    @rpc("Inspect.Doctor")
    def Doctor(self, request: Any, context: grpc.ServicerContext) -> pb.DoctorResponse:
        # A blocking call on this RPC thread (the server's pool runs each call
        # on its own thread; the inspector lets one report run at a time).
        return doctor_response(self.inspector.doctor(list(request.devices)))
