"""A checkpoint's steps, in the order they run: check (refusals, room: nothing
touched yet), save (the GPU record staged and the sandbox's processes held while
runsc saves), commit or undo, release. The answer is what became of the actor:
saved and released (its slot and GPUs handed over), refused and still running, or
lost, with why (docs/daemon.md, "Checkpoint"; docs/operations.md, "What ateom
promises under faults").
"""

from __future__ import annotations

import contextlib

import structlog

from ateom.daemon.actors import stats
from ateom.daemon.actors.table import Actor
from ateom.daemon.calls import sandbox_exits
from ateom.daemon.calls.phases import phase
from ateom.daemon.calls.progress import progress
from ateom.daemon.calls.requests import CheckpointResult
from ateom.daemon.gpus import compat_record
from ateom.daemon.gpus.lifecycle import GpuActors, GpuSave
from ateom.daemon.lifecycle.config import DaemonConfig
from ateom.daemon.lifecycle.release import Releases
from ateom.daemon.sandbox import save
from ateom.daemon.sandbox.teardown import StoppedSandbox
from ateom.errors import AteomError, ErrorCode

log = structlog.get_logger("ateom.checkpoint")


class Checkpoints:
    def __init__(self, config: DaemonConfig, gpus: GpuActors, releases: Releases) -> None:
        self.config = config
        self.gpus = gpus
        self.releases = releases

    def take(self, actor: Actor, image: str) -> CheckpointResult:
        """Checkpoint `actor` (locked by the caller, CHECKPOINTING) into `image`: the
        steps, in the module's order."""
        uid, sandbox = actor.ref.actor_uid, actor.sandbox
        assert sandbox is not None
        beneath = self.config.actors_root
        with phase("gpu.prepare"):
            gpu = self.gpus.prepare_save(actor)
        with phase("image.room"):
            expected = self._check_room(actor, image, gpu)
        with phase("image.prepare"):
            save.make_image_dir(image)

        stopped = StoppedSandbox(sandbox.runsc.target.root)
        record = compat_record.RecordWrite(image, gpu.record, beneath=beneath) if gpu else None

        def while_runsc_saves() -> None:
            if record is not None:
                record.stage()  # first: its fsync is what takes time
            stopped.hold()

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
        except save.SaveRefused:
            _undo(record, stopped)
            raise  # the actor keeps running, hosted as before
        except BaseException as exc:
            _undo(record, stopped)
            self.releases.release(actor, grace=0)
            sandbox_exits.exited("failed_save")
            raise _terminated_by_failed_checkpoint(uid, exc) from exc
        self.releases.after_checkpoint(actor, stopped)
        log.info("actor_checkpointed", files=list(files), gpu=gpu is not None)
        return CheckpointResult(files)

    def _check_room(self, actor: Actor, image: str, gpu: GpuSave | None) -> int:
        """Refuse (RESOURCE_EXHAUSTED) a checkpoint whose image cannot fit in the
        checkpoint dir's filesystem: the actor's memory from runsc's stats, and for
        a GPU actor the device memory its sandbox holds (runs runsc; nvidia-smi only
        when the disk has less room than every byte of the actor's GPUs would need).
        The image's expected size: that memory (the device memory when it was asked)."""
        uid = actor.ref.actor_uid
        memory = stats.memory_in_use(actor, uid)
        gpu_memory = 0
        if gpu is not None:
            bound = self.gpus.device_memory_bound(actor)
            with contextlib.suppress(OSError):  # `check_room` below says why
                if bound is not None and \
                        save.free_bytes(image)[0] >= save.image_bytes_needed(memory, bound):
                    return memory  # fits even with every GPU byte in the image
            gpu_memory = self.gpus.device_memory(actor)
        what = f"memory {memory / save.MiB:.1f} MiB"
        if gpu_memory:
            what += f" + GPU memory {gpu_memory / save.MiB:.1f} MiB"
        what += " + margin"
        save.check_room(image, save.image_bytes_needed(memory, gpu_memory), uid, what=what)
        return memory + gpu_memory


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
