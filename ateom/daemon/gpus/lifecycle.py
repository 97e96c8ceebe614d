"""The GPU side of an actor's lifecycle: which GPUs it gets at Run and Restore,
what goes into its GPU containers for checkpoints, whether and how it can be
checkpointed, and the record its checkpoint carries.

The lifecycle calls (`ateom.daemon.lifecycle.service`) ask here at fixed points:
- Run/Restore, while planning: `book` (the --gpu-placement decision, or the
  checkpoint record's GPUs on a restore) and `tools` (cuda-checkpoint mounted
  into the GPU containers, and its --launch-job where the driver needs it);
- Checkpoint, before the sandbox is touched: `prepare_save` (refusals with
  the fix; the runsc flags; the record to write after the save);
- Checkpoint, Terminate, a failed Run, a sandbox that exited: `give_back`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from ateom.daemon.actors.table import Actor, Phase
from ateom.daemon.calls import refusals
from ateom.daemon.calls.requests import RestoreRequest, RunRequest
from ateom.daemon.gpus import checkpoint_policy, compat_record
from ateom.daemon.gpus.checkpoint_policy import Blocker
from ateom.daemon.gpus.placement import GpuPool, request_for
from ateom.daemon.sandbox.teardown import sandbox_processes
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo import cuda_checkpoint, nvproxy
from ateom.gpuinfo.gather import device_memory_by_pid, find_nvidia_smi, gather_worker_gpus
from ateom.gpuinfo.inventory import WorkerGpus
from ateom.gpuinfo.nvproxy import DeviceView, GpuTools
from ateom.gpuinfo.record import CompatRecord
from ateom.process.reaper import Reaper
from ateom.process.runner import reaper_runner
from ateom.runsc.probe import RunscInfo
from ateom.settings import GpuSettings, NodeSettings

log = structlog.get_logger("ateom.gpu_actors")


@dataclass(frozen=True, slots=True)
class GpuSave:
    """How to save a GPU actor: runsc checkpoint's extra flags, the record after."""

    flags: tuple[str, ...]
    record: CompatRecord


class GpuActors:
    """`reaper`: runs nvidia-smi for the device memory an actor holds (None: not asked)."""

    def __init__(self, pool: GpuPool, node: NodeSettings, gpu: GpuSettings, *,
                 actors_root: str, environ: Mapping[str, str],
                 reaper: Reaper | None = None) -> None:
        self.pool = pool
        self.node = node
        self.settings = gpu
        self.actors_root = actors_root
        self.path_env = environ.get("PATH", os.defpath)
        self.reaper = reaper

    @staticmethod
    def gatherer(reaper: Reaper, node: NodeSettings, proc_root: str,
                 environ: Mapping[str, str]) -> WorkerGpus:
        """This worker's GPUs, scoped to the Pod's device nodes (reads /proc, runs
        nvidia-smi through the reaper)."""
        smi = find_nvidia_smi(node.driver_root, environ.get("PATH", os.defpath))
        return gather_worker_gpus(proc_root=proc_root, gpu_glob=node.gpu_glob, nvidia_smi=smi,
                                  runner=reaper_runner(reaper))

    # -- Run / Restore ---------------------------------------------------------------

    def book(self, uid: str, req: RunRequest | RestoreRequest, info: RunscInfo,
              view: DeviceView, image: str | None) -> DeviceView:
        """Book the actor's GPUs; the device view narrowed to them. A restore of a
        checkpoint with a record is checked against this worker first."""
        if view.registry is None or not view.pod_gpus:
            return view  # no container can get a GPU here
        record = compat_record.read(image, beneath=self.actors_root) if image else None
        if record is not None:
            if not self.tool()[0]:
                refusals.refused("restore", "no_cuda_checkpoint")
                raise AteomError("this checkpoint holds GPU state, and restoring it needs"
                                 " cuda-checkpoint in the actor's containers: none was found"
                                 f" ({self.tool_searched()}); install it on the node",
                                 code=ErrorCode.FAILED_PRECONDITION)
            names, per_container, saved_paths = compat_record.book_saved_gpus(
                record, self.pool, uid, info, view.pod_gpus,
                nvproxy_capabilities=self.settings.nvproxy.capabilities)
            return view.granted(names, per_container, saved_paths)
        request = request_for(req.gpus, req.containers)
        if request.count == 0:
            return view.granted(())
        return view.granted(self.pool.grant(uid, request, view.pod_gpus).names)

    def tool(self) -> tuple[str, tuple[str, ...]]:
        """The worker's cuda-checkpoint (stats candidates): path or "", where looked."""
        return cuda_checkpoint.locate(
            self.settings.cuda_checkpoint, driver_root=self.node.driver_root,
            toolkit_dir=self.node.toolkit_dir, path_env=self.path_env)

    def tool_searched(self) -> str:
        return ", ".join(self.tool()[1])

    def check_driver(self, info: RunscInfo, view: DeviceView, kind: str) -> None:
        """Refuse (FAILED_PRECONDITION) an actor that gets GPUs when the driver its
        nvproxy would use is not one `info`'s runsc supports (reads the GPU
        inventory once); counted as refusal `kind` ("run", "restore")."""
        if view.registry is None or not view.pod_default:
            return
        driver = self.settings.nvproxy.driver_version or self.pool.worker().driver_version
        try:
            nvproxy.check_nvproxy_driver(info, driver)
        except AteomError:
            refusals.refused(kind, "unsupported_driver")
            raise

    def check_control_nodes(self, uid: str, gpu: bool, kind: str) -> None:
        """Refuse (FAILED_PRECONDITION, counted as refusal `kind`) a GPU actor on a
        worker without the control nodes nvproxy opens for every GPU sandbox, before
        any runsc call: runsc would fail it only at boot ("failed to open
        /dev/nvidiactl"), as if ateom had (stats the nodes)."""
        missing = ([n for n in nvproxy.control_node_paths(self.node.dev_dir)
                    if not os.path.lexists(n)] if gpu else [])
        if missing:
            refusals.refused(kind, "no_control_nodes")
            raise AteomError(
                f"actor {uid} needs GPUs, and this worker has no {', '.join(missing)}:"
                " nvproxy opens /dev/nvidiactl and /dev/nvidia-uvm for every GPU sandbox;"
                " load nvidia-uvm on the node (nvidia-modprobe -u -c=0) and give the worker"
                " its control nodes (`ateom doctor` checks them)",
                code=ErrorCode.FAILED_PRECONDITION)

    def tools(self, view: DeviceView) -> GpuTools:
        """What the actor's GPU containers get for checkpoints (stats the tool)."""
        if view.registry is None or not view.pod_default:
            return GpuTools()
        path, _ = self.tool()
        if not path:
            return GpuTools()
        driver = self.pool.worker().driver_version
        return GpuTools(path, checkpoint_policy.launch_job_prefix(driver, len(view.pod_default)))

    def give_back(self, uid: str) -> None:
        freed = self.pool.free(uid)
        if freed:
            log.info("gpus_released", gpus=list(freed))

    # -- Checkpoint ------------------------------------------------------------------

    def held(self, actor: Actor) -> tuple[str, ...]:
        """The GPUs the actor holds (its devices when placement never saw it)."""
        return self.pool.held_by(actor.ref.actor_uid) or actor.devices

    def blocker(self, actor: Actor) -> Blocker | None:
        """Why `actor` cannot be checkpointed now; None when it can (pure but for
        the GPU facts gathered once per process)."""
        if actor.sandbox_exit is not None:
            return Blocker("sandbox_exited", actor.exit_note)
        if actor.phase is not Phase.RUNNING or actor.sandbox is None:
            return Blocker("not_running", f"actor is {actor.phase.value}")
        return self.gpu_blocker(actor)

    def gpu_blocker(self, actor: Actor) -> Blocker | None:
        """Why the GPU side keeps a hosted actor from being checkpointed; None when
        nothing does (an actor without GPUs included)."""
        if actor.sandbox is None or not actor.sandbox.plan.gpu:
            return None
        plan = actor.sandbox.plan
        return checkpoint_policy.blocker(
            actor.sandbox.runsc.target.info, tool_in_containers=plan.gpu_tool,
            driver_version=self.pool.worker().driver_version, gpu_count=len(self.held(actor)))

    def device_memory_bound(self, actor: Actor) -> int | None:
        """Bytes of device memory the actor's GPUs have in all (the inventory's,
        gathered once): what its sandbox can hold at most; None when a GPU's
        memory is unknown."""
        facts = self.pool.facts_of(self.held(actor))
        if not facts or any(g.memory_mib is None for g in facts):
            return None
        return sum(g.memory_mib or 0 for g in facts) * (1 << 20)

    def device_memory(self, actor: Actor) -> int:
        """Bytes of device memory the processes of the actor's sandbox hold (reads
        /proc, runs nvidia-smi); 0, logged, when nvidia-smi cannot tell: the
        checkpoint then goes on sized by the actor's memory alone."""
        smi = find_nvidia_smi(self.node.driver_root, self.path_env)
        if actor.sandbox is None or smi is None or self.reaper is None:
            log.info("gpu_memory_unknown", reason="no nvidia-smi" if smi is None else "")
            return 0
        held, problem = device_memory_by_pid(smi, reaper_runner(self.reaper))
        if held is None:
            log.warning("gpu_memory_unknown", reason=problem)
            return 0
        pids = sandbox_processes(actor.sandbox.runsc.target.root)
        return sum(held.get(pid, 0) for pid in pids) * (1 << 20)

    def prepare_save(self, actor: Actor, snapshot_uri: str = "") -> GpuSave | None:
        """For a GPU actor: refuse now, before the sandbox is touched, when it
        cannot be saved (FAILED_PRECONDITION with the fix, counted); else the
        flags and the record. None for an actor without GPUs."""
        assert actor.sandbox is not None
        if not actor.sandbox.plan.gpu:
            return None
        uid = actor.ref.actor_uid
        found = self.gpu_blocker(actor)
        if found is not None:
            refusals.refused("checkpoint", found.reason)
            raise AteomError(f"actor {uid} cannot be checkpointed, it keeps running:"
                             f" {found.message}", code=ErrorCode.FAILED_PRECONDITION)
        gpus = self.held(actor)
        info = actor.sandbox.runsc.target.info
        try:
            record = compat_record.record_for(actor.sandbox, self.pool, info, gpus,
                                           nvproxy_capabilities=self.settings.nvproxy.capabilities,
                                           snapshot_uri=snapshot_uri)
        except AteomError as exc:
            refusals.refused("checkpoint", "gpu_facts_unknown")
            raise AteomError(f"actor {uid} cannot be checkpointed, it keeps running: {exc}",
                             code=ErrorCode.FAILED_PRECONDITION) from None
        driver = self.pool.worker().driver_version
        return GpuSave(checkpoint_policy.checkpoint_flags(driver, len(gpus)), record)
