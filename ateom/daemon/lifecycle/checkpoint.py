"""A checkpoint's steps, in the order they run: check (refusals, room: nothing
touched yet), save (the GPU record staged and the sandbox's processes held while
runsc saves), its durable-dir data captured, commit or undo, release. The answer
is what became of the actor: saved and released (its slot and GPUs handed over),
refused and still running, or lost, with why (docs/daemon.md, "Checkpoint";
docs/operations.md, "What ateom promises under faults").

Two scopes, as the wire defines them. FULL: memory and the rootfs delta (runsc's
image) and the durable dirs' contents (`ateom.volumes.capture`, one tar per volume,
taken once runsc has stopped the sandbox: what it wrote is on the host by then).
DATA: only the durable dirs, the sandbox paused around the capture and resumed: the
actor keeps running. Either way `data_snapshot_files` names the tars, which
restore the actor at DATA scope on their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import structlog

from ateom.daemon.actors import stats
from ateom.daemon.actors.table import Actor
from ateom.daemon.calls import sandbox_exits
from ateom.daemon.calls.phases import phase
from ateom.daemon.calls.progress import progress
from ateom.daemon.calls.requests import CheckpointResult, SnapshotScope
from ateom.daemon.gpus import compat_record
from ateom.daemon.gpus.lifecycle import GpuActors, GpuSave
from ateom.daemon.lifecycle.config import DaemonConfig
from ateom.daemon.lifecycle.release import Releases
from ateom.daemon.sandbox import save
from ateom.daemon.sandbox.teardown import StoppedSandbox
from ateom.errors import AteomError, ErrorCode
from ateom.volumes import CaptureResult, DurableVolume, capture

log = structlog.get_logger("ateom.checkpoint")


class Checkpoints:
    def __init__(self, config: DaemonConfig, gpus: GpuActors, releases: Releases, *,
                 memory_bound: int = 0,
                 latest_memory: Callable[[Actor], int] = lambda actor: 0) -> None:
        """`memory_bound`: the most memory a sandbox here can hold (0: unknown),
        `worker.capacity.memory_bound`; `latest_memory`: an actor's memory as last
        sampled (the expected image size, for progress lines only)."""
        self.config = config
        self.gpus = gpus
        self.releases = releases
        self.memory_bound = memory_bound
        self.latest_memory = latest_memory

    def take(self, actor: Actor, image: str, scope: SnapshotScope = SnapshotScope.FULL,
             snapshot_uri: str = "") -> CheckpointResult:
        """Checkpoint `actor` (locked by the caller, CHECKPOINTING) into `image` at
        `scope` (UNSPECIFIED, from a node agent that sends none, is FULL): the steps,
        in the module's order. `snapshot_uri` goes into a GPU image's record."""
        if scope is SnapshotScope.DATA:
            return self._take_data(actor, image)
        uid, sandbox = actor.ref.actor_uid, actor.sandbox
        assert sandbox is not None
        beneath = self.config.actors_root
        durable = sandbox.plan.durable
        with phase("gpu.prepare"):
            gpu = self.gpus.prepare_save(actor, snapshot_uri)
        with phase("image.room"):
            expected = self._check_room(actor, image, gpu, durable)
        with phase("image.prepare"):
            save.make_image_dir(image)
            before = save.file_versions(image)

        stopped = StoppedSandbox(sandbox.runsc.target.root)
        record = compat_record.RecordWrite(image, gpu.record, beneath=beneath) if gpu else None

        def while_runsc_saves() -> None:
            if record is not None:
                record.stage()  # first: its fsync is what takes time
            stopped.hold()

        data: tuple[str, ...] = ()
        try:
            with progress("checkpoint", uid, measure=lambda: save.image_size(image),
                          expected_bytes=expected, containers=list(actor.containers),
                          gpus=len(gpu.record.gpus) if gpu else 0, image=image):
                files = save.save(
                    sandbox, image, uid, beneath=beneath, flags=gpu.flags if gpu else (),
                    timeout=self.config.gpu.cuda_checkpoint_timeout if gpu else None,
                    while_saving=while_runsc_saves,
                    reaped=lambda: actor.sandbox_exit is not None)
            if record is not None:
                files = record.commit(files)
            if durable:
                data = _captured(durable, image, uid).files
                files = tuple(sorted({*files, *data}))
        except save.SaveRefused:
            _undo(record, stopped)
            raise  # the actor keeps running, hosted as before
        except BaseException as exc:
            _undo(record, stopped)
            if not isinstance(exc, save.SandboxLost):  # a lost save cleared its own files
                save.remove_written(image, before, beneath=beneath)
            self.releases.release(actor, grace=0)
            sandbox_exits.exited("failed_save")
            raise _terminated_by_failed_checkpoint(uid, exc) from exc
        self.releases.after_checkpoint(actor, stopped)
        log.info("actor_checkpointed", files=list(files), gpu=gpu is not None,
                 data_files=list(data))
        return CheckpointResult(files, data)

    def _take_data(self, actor: Actor, image: str) -> CheckpointResult:
        """DATA scope: the durable dirs only, the sandbox paused around the capture so
        they are taken as of one moment, then resumed: the actor keeps running."""
        uid, sandbox = actor.ref.actor_uid, actor.sandbox
        assert sandbox is not None
        durable = sandbox.plan.durable
        if not durable:
            raise AteomError(f"actor {uid}: a DATA snapshot captures durable-dir volumes, and"
                             " it mounts none; nothing was paused, it keeps running",
                             code=ErrorCode.FAILED_PRECONDITION)
        with phase("image.room"):
            need = save.image_bytes_needed(_durable_bytes(durable))
            save.check_room(image, need, uid, what="its durable-dir data + margin")
        with phase("image.prepare"):
            save.make_image_dir(image)
        runsc, root = sandbox.runsc, sandbox.plan.root_id
        with phase("runsc.pause", container=root):
            runsc.pause(root)  # a refusal leaves it running: runsc's error says why
        try:
            result = _captured(durable, image, uid)
        finally:
            self._resume(actor)
        log.info("actor_data_captured", files=list(result.files))
        return CheckpointResult(result.files, result.files)

    def _resume(self, actor: Actor) -> None:
        """Resume a sandbox paused for a DATA capture. One that will not resume cannot be
        left frozen and listed as running: it is terminated, and the call says so."""
        sandbox = actor.sandbox
        assert sandbox is not None
        root = sandbox.plan.root_id
        try:
            with phase("runsc.resume", container=root):
                sandbox.runsc.resume(root)
        except AteomError as exc:
            self.releases.release(actor, grace=0)
            raise AteomError(f"actor {actor.ref.actor_uid}: its durable data was captured but"
                             f" its sandbox did not resume, so it was terminated (its GPUs and"
                             f" slot are free): {exc}", code=ErrorCode.INTERNAL) from exc

    def _check_room(self, actor: Actor, image: str, gpu: GpuSave | None,
                    durable: tuple[DurableVolume, ...] = ()) -> int:
        """Refuse (RESOURCE_EXHAUSTED) a checkpoint whose image cannot fit in the
        checkpoint dir's filesystem: the actor's memory, its durable-dir data, and for
        a GPU actor the device memory its sandbox holds. First against the most the
        sandbox could hold (`memory_bound`, every byte of its GPUs): a disk with room
        for that needs no runsc and no nvidia-smi, the answer the exact check would
        give. Else the actor's memory from runsc's stats (nvidia-smi only when the
        disk has less room than every byte of the actor's GPUs would need). The
        image's expected size: that memory (the device memory when it was asked), or
        the latest sampled memory when the bound sufficed."""
        uid = actor.ref.actor_uid
        durable_bytes = _durable_bytes(durable)
        gpu_bound = self.gpus.device_memory_bound(actor) if gpu is not None else 0
        if self.memory_bound and gpu_bound is not None and _fits(
                image, save.image_bytes_needed(self.memory_bound + durable_bytes, gpu_bound)):
            return self.latest_memory(actor) + durable_bytes
        memory = stats.memory_in_use(actor, uid) + durable_bytes
        gpu_memory = 0
        if gpu is not None:
            if gpu_bound is not None and _fits(image, save.image_bytes_needed(memory, gpu_bound)):
                return memory  # fits even with every GPU byte in the image
            gpu_memory = self.gpus.device_memory(actor)
        what = f"memory {memory / save.MiB:.1f} MiB"
        if gpu_memory:
            what += f" + GPU memory {gpu_memory / save.MiB:.1f} MiB"
        what += " + margin"
        save.check_room(image, save.image_bytes_needed(memory, gpu_memory), uid, what=what)
        return memory + gpu_memory


def _fits(image: str, need: int) -> bool:
    """Whether the checkpoint dir's filesystem has `need` bytes free (False when it
    cannot be measured: `save.check_room` then says why)."""
    with contextlib.suppress(OSError):
        return save.free_bytes(image)[0] >= need
    return False


def _durable_bytes(durable: tuple[DurableVolume, ...]) -> int:
    """What the durable dirs hold (stats every file, follows no link)."""
    return sum(save.image_size(v.host_dir) for v in durable)


def _captured(durable: tuple[DurableVolume, ...], image: str, uid: str) -> CaptureResult:
    """The durable dirs' tars in the checkpoint dir (`ateom.volumes.capture`); what it
    skipped (FIFOs, sockets, devices) is logged. A failure (the disk filled after the
    room check) is FAILED_PRECONDITION naming the actor; capture leaves no tar then."""
    try:
        with phase("volumes.capture"):
            result = capture(durable, image)
    except OSError as exc:
        raise AteomError(f"actor {uid}: capturing its durable-dir data into {image} failed:"
                         f" {exc.strerror or exc}", code=ErrorCode.FAILED_PRECONDITION) from exc
    if result.skipped:
        log.warning("durable_entries_skipped", skipped=[
            f"{s.volume_name}:{s.path}: {s.reason}" for s in result.skipped][:20])
    return result


def _undo(record: compat_record.RecordWrite | None, stopped: StoppedSandbox) -> None:
    """After a failed save: no record beside what runsc left, the sandbox's
    processes let go (whoever tears it down lists them again)."""
    if record is not None:
        record.discard()
    stopped.close()


def _terminated_by_failed_checkpoint(uid: str, exc: BaseException) -> BaseException:
    """The error a Checkpoint returns when the save failed and left the sandbox in a
    state no one should resume (dead, not answering, or saved without what makes
    the image usable): the actor was terminated, its GPUs and slot are free, and
    this says why. DATA_LOSS: what the actor held in memory is gone."""
    if isinstance(exc, save.SandboxLost) or not isinstance(exc, AteomError):
        return exc
    return AteomError(f"checkpoint of actor {uid} failed and the actor was terminated"
                      f" (nothing was saved; its GPUs and slot are free): {exc}",
                      code=ErrorCode.DATA_LOSS)
