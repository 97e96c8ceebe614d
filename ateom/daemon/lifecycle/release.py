"""Releasing an actor: its sandbox torn down, its bundles, GPUs and slot given
back, the actor unhosted. Terminate and a failed save release inside the call;
a checkpoint releases after its answer, on a thread of its own, and the GPU
hand-over (`ateom.daemon.actors.succession`, the protocol) happens there.

After a checkpoint, in order:
1. in the call, before its answer: the stopped sandbox is killed
   (`StoppedSandbox`) and its slot and GPUs are yielded (`_yield`): the next
   Run or Restore takes them at once, this actor one of its predecessors;
   that Run boots its sandbox root (the pause container: no devices, little
   memory) while this sandbox exits, and its workload waits for the exit
   (`capacity.wait`); a Restore waits before its root;
2. on a thread of its own: the sandbox's exit waited for (`sandbox.exit`,
   every thread of it: its device files close with the last), then freed:
   its successors go on;
3. the rest (a `runsc delete` per container, the state dir, the bundles) waits
   until no Run or Restore is in flight (`starts.wait`, at most
   `START_YIELD_LIMIT`): it is bookkeeping no call waits for, and it took the
   cores from the next actor's boot (`ateom.daemon.actors.starts`);
4. the actor leaves the table; a call for it (which waited, `release.wait`)
   goes on.
"""

from __future__ import annotations

import contextvars
import threading

import structlog

from ateom.daemon.actors.hosting import Hosting
from ateom.daemon.actors.table import Actor, ActorTable
from ateom.daemon.calls import answer
from ateom.daemon.calls.phases import phase
from ateom.daemon.gpus.lifecycle import GpuActors
from ateom.daemon.sandbox.teardown import StoppedSandbox, TeardownIncomplete

log = structlog.get_logger("ateom.release")

# How long a checkpointed actor's cleanup lets the starts in flight go first:
# many times a Run's boot or a 1 GiB restore (docs/performance.md, "The turn");
# a worker that never stops starting still gets its cleanup done after this. Only that
# actor's own next call waits meanwhile: its GPUs and slot are free already.
START_YIELD_LIMIT = 5.0


class Releases:
    def __init__(self, hosting: Hosting, gpus: GpuActors, actors: ActorTable) -> None:
        self.hosting = hosting
        self.gpus = gpus
        self.actors = actors

    def release(self, actor: Actor, grace: float, *,
                stopped: StoppedSandbox | None = None) -> None:
        """Tear the actor's sandbox down (TERM, `grace`, KILL), give its bundles,
        GPUs and slot back, unhost it. `stopped`: after a checkpoint, its
        sandbox's processes (as the module says)."""
        try:
            self.hosting.take_down(actor, grace, stopped=stopped,
                                 on_exited=(lambda: self._hand_over(actor))
                                 if stopped is not None else None)
        finally:
            if stopped is not None:
                stopped.close()
            self.free(actor)
            self.actors.remove(actor)

    def _yield(self, actor: Actor) -> None:
        """Its sandbox killed: its slot and GPUs to the next actor at once, whose
        workload waits until this one's sandbox has exited (its predecessor)."""
        uid = actor.ref.actor_uid
        # Named as yielded before the pool lets them go: a Run placed on them
        # in between must find whom to wait for.
        self.actors.yield_capacity(actor, self.gpus.pool.held_by(uid))
        self.gpus.give_back(uid)

    def free(self, actor: Actor) -> None:
        """Give the actor's GPUs and slot back (again: a no-op)."""
        self.gpus.give_back(actor.ref.actor_uid)
        self.actors.free(actor)

    def _hand_over(self, actor: Actor) -> None:
        """The checkpointed sandbox has exited: its successors go on; the rest of
        the release after the starts in flight."""
        self.free(actor)
        with phase("starts.wait"):
            if not self.actors.starts.wait_idle(START_YIELD_LIMIT):
                log.info("release_no_longer_waits_for_starts", limit_s=START_YIELD_LIMIT)

    def after_checkpoint(self, actor: Actor, stopped: StoppedSandbox) -> None:
        """Kill the stopped sandbox (`stopped`), yield its slot and GPUs, and
        answer the checkpoint now; free the worker on a thread of its own.

        The image is complete once runsc checkpoint returns, and the sandbox has
        stopped. What is left is ateom's bookkeeping, and the wait for a large
        sandbox to exit (the kernel freeing its memory) was most of the call.
        Meanwhile the actor is RELEASING: the actors that took its slot or GPUs
        wait for its exit before their workload starts (the module's steps); a
        call for the actor itself waits until it is gone.
        """
        stopped.kill()
        # Its network goes before the answer: the node agent may place the actor
        # elsewhere at once, and nothing of it may route or listen here meanwhile.
        self.hosting.remove_network(actor.ref.actor_uid)
        self._yield(actor)
        bindings = {"actor_uid": actor.ref.actor_uid, "op": "release"}

        def finish() -> None:
            with structlog.contextvars.bound_contextvars(**bindings), phase("release"):
                try:
                    self.release(actor, grace=0, stopped=stopped)
                except TeardownIncomplete as exc:
                    # The image is whole and the actor unhosted, its GPUs and
                    # bundles given back: the checkpoint stands. What stayed is
                    # logged (state_dir_left_behind) for the operator.
                    log.error("checkpoint_teardown_incomplete", reason=str(exc))
                except Exception:
                    log.exception("checkpoint_release_failed")

        # A fresh context: this thread's lines are not the RPC's (its call number).
        thread = threading.Thread(target=contextvars.Context().run, args=(finish,),
                                  name=f"release-{actor.ref.actor_uid}", daemon=True)
        answer.after_answer(thread.start)
