"""Actors the daemon hosts: a pure state machine and the hosting table.

Phases: an actor is BOOTING during Run, RESTORING during Restore, RUNNING
once up, CHECKPOINTING and TERMINATING during those calls, RELEASING once its
checkpoint is answered while its stopped sandbox is reaped (its slot and GPUs
already yielded to the next actor, `ateom.daemon.lifecycle.release`), and
EXITED when its sandbox ended on its own while it ran (a crash, the OOM
killer, kill -9 by anyone): it stays listed, holding its slot but not its
GPUs (`ActorTable.on_exited`), until the node agent terminates it. It leaves
the table when it is gone. A call on a RELEASING actor waits until it is gone
(bounded like a lock wait), so a Restore right after a Checkpoint never meets
the old sandbox. `next_phase` is the whole rule book; `ActorTable` adds the
shell: admission under --max-actors and one lock per actor so its lifecycle
calls are serialized.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ateom.daemon.actors.starts import Starts
from ateom.daemon.actors.succession import Succession
from ateom.daemon.calls import deadline
from ateom.daemon.calls.phases import phase
from ateom.daemon.calls.requests import ActorRef
from ateom.daemon.sandbox.boot import Sandbox
from ateom.errors import AteomError, ErrorCode


class Phase(enum.Enum):
    BOOTING = "booting"
    RESTORING = "restoring"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    TERMINATING = "terminating"
    RELEASING = "releasing"
    EXITED = "exited"


class Op(enum.Enum):
    RUN = "run"
    RESTORE = "restore"
    CHECKPOINT = "checkpoint"
    TERMINATE = "terminate"
    STATS = "stats"


# (phase or None for "not hosted", op) -> phase while the op runs.
_TRANSITIONS: dict[tuple[Phase | None, Op], Phase] = {
    (None, Op.RUN): Phase.BOOTING,
    (None, Op.RESTORE): Phase.RESTORING,
    (Phase.RUNNING, Op.CHECKPOINT): Phase.CHECKPOINTING,
    (Phase.RUNNING, Op.TERMINATE): Phase.TERMINATING,
    (Phase.RUNNING, Op.STATS): Phase.RUNNING,
    (Phase.EXITED, Op.TERMINATE): Phase.TERMINATING,
}


def next_phase(current: Phase | None, op: Op, uid: str, *, exit_note: str = "") -> Phase:
    """The phase `op` puts an actor in, or the error the caller gets (pure).
    `exit_note`: how an EXITED actor's sandbox ended (`Actor.exit_note`)."""
    found = _TRANSITIONS.get((current, op))
    if found is not None:
        return found
    if current is None:
        raise AteomError(f"actor {uid}: not hosted by this worker", code=ErrorCode.NOT_FOUND)
    if current is Phase.EXITED:
        raise AteomError(
            f"actor {uid}: {exit_note or 'its sandbox exited'}; {op.value} is not possible,"
            " terminate it (its GPUs are free already)", code=ErrorCode.FAILED_PRECONDITION)
    if op in (Op.RUN, Op.RESTORE):
        raise AteomError(
            f"actor {uid}: already hosted ({current.value}); {op.value} needs a free worker",
            code=ErrorCode.FAILED_PRECONDITION,
        )
    raise AteomError(
        f"actor {uid}: cannot {op.value} while {current.value}",
        code=ErrorCode.FAILED_PRECONDITION,
    )


@dataclass(frozen=True, slots=True)
class Asks:
    """What an actor asks of the worker (its request's ``cpu_milli`` and
    ``memory_bytes``; 0: nothing said), or what the worker has (0: not known)."""

    cpu_milli: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Asks) -> Asks:
        return Asks(self.cpu_milli + other.cpu_milli, self.memory_bytes + other.memory_bytes)


NO_ASKS = Asks()


def over_capacity(uid: str, asks: Asks, held: Asks, capacity: Asks, hosted: int) -> str:
    """Why `asks` does not fit beside what `hosted` actors hold of `capacity`, "" when it
    does (pure). A capacity or an ask of 0 binds nothing."""
    for what, need, used, cap, unit in (
            ("CPU", asks.cpu_milli, held.cpu_milli, capacity.cpu_milli, "m"),
            ("memory", asks.memory_bytes, held.memory_bytes, capacity.memory_bytes, " bytes")):
        if cap and need and used + need > cap:
            return (f"actor {uid}: asks {need}{unit} of {what}, and this worker has"
                    f" {max(cap - used, 0)}{unit} of its {cap}{unit} left ({hosted} actor(s)"
                    f" hold {used}{unit})")
    return ""


@dataclass
class Actor:
    """One hosted actor. Mutable, guarded by `lock` (held for a whole lifecycle call)."""

    ref: ActorRef
    phase: Phase
    lock: threading.Lock = field(default_factory=threading.Lock)
    sandbox_pid: int = 0
    sandbox_exit: int | None = None  # its exit status, once reaped (-N: signal N)
    exited_at_unix_nano: int = 0
    epoch_unix_nano: int = field(default_factory=time.time_ns)
    memory_peak_bytes: int = 0
    asks: Asks = NO_ASKS  # the resources its Run/Restore asked
    sandbox: Sandbox | None = None  # set while hosting; None before the plan is made
    succession: Succession = field(init=False)  # its part in the hand-over

    def __post_init__(self) -> None:
        self.succession = Succession(self.ref.actor_uid)

    @property
    def containers(self) -> tuple[str, ...]:
        """Bundle names under oci_bundle_dir, sandbox root first (its plan's)."""
        return self.sandbox.plan.container_names if self.sandbox is not None else ()

    @property
    def devices(self) -> tuple[str, ...]:
        return self.sandbox.plan.devices if self.sandbox is not None else ()

    @property
    def exit_note(self) -> str:
        """How its sandbox ended, for messages ("" while it has not)."""
        if self.sandbox_exit is None:
            return ""
        code = self.sandbox_exit
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.exited_at_unix_nano / 1e9))
        return f"its sandbox exited on its own ({how}) at {when}"


class ActorTable:
    """`on_exited(actor)`: called (outside the table's lock, once per actor) when a
    running actor's sandbox has exited on its own and the actor became EXITED:
    the daemon gives its GPUs back there."""

    def __init__(self, max_actors: int,
                 on_exited: Callable[[Actor], None] | None = None,
                 capacity: Asks = NO_ASKS) -> None:
        self.max_actors = max_actors
        self.capacity = capacity  # the worker's limits (0: not known, nothing refused)
        self._lock = threading.Lock()
        self._actors: dict[str, Actor] = {}
        self.on_exited = on_exited
        # Run/Restore calls in flight, which a checkpointed actor's cleanup lets go first.
        self.starts = Starts()

    def sandbox_exited(self, actor: Actor, code: int) -> None:
        """The actor's sandbox was reaped (the reaper's thread). While a call is on
        the actor (booting, checkpointing, terminating...) that call judges the
        exit; a RUNNING actor becomes EXITED now."""
        with self._lock:
            actor.sandbox_exit = code
            actor.exited_at_unix_nano = time.time_ns()
            exited = self._settle(actor, actor.phase)
        if exited:
            self._exited(actor)

    def up(self, actor: Actor) -> None:
        """A Run or Restore has booted the actor: RUNNING, or EXITED if its sandbox
        already ended meanwhile."""
        with self._lock:
            exited = self._settle(actor, Phase.RUNNING)
        if exited:
            self._exited(actor)

    def _settle(self, actor: Actor, phase: Phase) -> bool:
        """Put `actor` in `phase`, EXITED instead when that is RUNNING and its sandbox
        has exited; whether it became EXITED (under the table's lock)."""
        if phase is Phase.RUNNING and actor.sandbox_exit is not None:
            actor.phase = Phase.EXITED
            return True
        actor.phase = phase
        return False

    def _exited(self, actor: Actor) -> None:
        if self.on_exited is not None:
            self.on_exited(actor)

    def await_releases(self, ref: ActorRef, op: Op, *, max_wait: float) -> None:
        """Before a Run/Restore is admitted: wait for the actor of the same uid
        being released (no longer than `max_wait`, nor the caller's deadline): a
        Restore right after its Checkpoint gets in without a refusal to retry on.
        A RELEASING actor of another uid is in no one's way: its slot and GPUs
        were yielded when its sandbox was killed (`Succession`)."""
        waited_since = time.monotonic()
        what = f"actor {ref.actor_uid}: {op.value}"
        while (releasing := self._releasing(ref.actor_uid)) is not None:
            left = max_wait - (time.monotonic() - waited_since)
            with self.starts.set_aside():  # its release may be letting starts go first
                if not releasing.succession.wait_gone(left, what):
                    return  # still there: admit's refusal says why

    def admit(self, ref: ActorRef, op: Op, asks: Asks = NO_ASKS) -> Actor:
        """Reserve a slot for a new actor (Run/Restore), already locked by the caller's
        thread, when `asks` fits beside what the actors hosted ask of the worker's
        capacity. A slot a checkpointed actor yielded is taken at once; when the
        worker is full but for such slots, the actors still exiting are the new
        one's predecessors (`Succession.take`)."""
        with self._lock:
            current = self._actors.get(ref.actor_uid)
            first = next_phase(current.phase if current else None, op, ref.actor_uid,
                               exit_note=current.exit_note if current else "")
            hosted = self._counted()
            if hosted >= self.max_actors:
                raise AteomError(
                    f"actor {ref.actor_uid}: this worker already hosts"
                    f" {hosted}/{self.max_actors} actor(s)",
                    code=ErrorCode.RESOURCE_EXHAUSTED,
                )
            full = over_capacity(ref.actor_uid, asks, self._held(), self.capacity, hosted)
            if full:
                raise AteomError(full, code=ErrorCode.RESOURCE_EXHAUSTED)
            actor = Actor(ref=ref, phase=first, asks=asks)
            dying = self._dying()
            if hosted + len(dying) >= self.max_actors:
                actor.succession.take(dying)
            actor.lock.acquire()
            self._actors[ref.actor_uid] = actor
            return actor

    def yield_capacity(self, actor: Actor, gpus: tuple[str, ...]) -> None:
        """A checkpointed actor's stopped sandbox was killed: RELEASING now, its slot
        (and `gpus`, which the caller gives back after this) may go to the next
        actor (`Succession.yield_capacity`). One step, under the table's lock: a
        Run in between would find it neither in its way nor yielded."""
        with self._lock:
            actor.phase = Phase.RELEASING
            actor.succession.yield_capacity(gpus)

    def dying(self) -> list[Succession]:
        """The successions of the actors whose yielded sandbox is still exiting."""
        with self._lock:
            return self._dying()

    def _dying(self) -> list[Succession]:
        return [a.succession for a in self._actors.values() if a.succession.dying]

    def admit_cleanup(self, ref: ActorRef) -> Actor | None:
        """Hold `uid`'s slot, locked, while what a dead daemon left of it is cleared
        (a Run of the same uid is refused meanwhile); None when it is hosted."""
        with self._lock:
            if ref.actor_uid in self._actors:
                return None
            actor = Actor(ref=ref, phase=Phase.TERMINATING)
            actor.succession.counted = False  # keeps calls for the uid out, takes no slot
            actor.lock.acquire()
            self._actors[ref.actor_uid] = actor
            return actor

    def _counted(self) -> int:
        return sum(1 for a in self._actors.values() if a.succession.counted)

    def _held(self) -> Asks:
        return sum((a.asks for a in self._actors.values() if a.succession.counted), NO_ASKS)

    def held(self) -> Asks:
        """What the actors taking capacity ask of the worker, together."""
        with self._lock:
            return self._held()

    def _releasing(self, uid: str) -> Actor | None:
        """The actor `uid` while RELEASING; None otherwise."""
        with self._lock:
            current = self._actors.get(uid)
            return current if current is not None and current.phase is Phase.RELEASING \
                else None

    def releasing(self) -> list[Actor]:
        with self._lock:
            return [a for a in self._actors.values() if a.phase is Phase.RELEASING]

    def settle(self, timeout: float) -> bool:
        """Wait until no actor is RELEASING (every answered checkpoint's sandbox
        reaped, its GPUs free); False when one still is after `timeout` s."""
        end = time.monotonic() + timeout
        for actor in self.releasing():
            if not actor.succession.gone.wait(max(end - time.monotonic(), 0.0)):
                return False
        return not self.releasing()

    def free(self, actor: Actor) -> None:
        """`actor` takes no more capacity: its sandbox is gone (its GPUs were given
        back by the caller). It stays in the table until removed: a call for it
        still waits for the rest of its release (`Succession.free`)."""
        with self._lock:
            actor.succession.free()

    def get(self, uid: str) -> Actor | None:
        with self._lock:
            return self._actors.get(uid)

    def remove(self, actor: Actor) -> None:
        with self._lock:
            if self._actors.get(actor.ref.actor_uid) is actor:
                del self._actors[actor.ref.actor_uid]
        actor.succession.leave()

    def snapshot(self) -> list[Actor]:
        with self._lock:
            return list(self._actors.values())

    def __len__(self) -> int:
        """Actors taking capacity (cleanup slots do not)."""
        with self._lock:
            return self._counted()

    @contextmanager
    def operate(self, uid: str, op: Op, *, max_wait: float) -> Iterator[Actor]:
        """Lock a hosted actor for `op`; NOT_FOUND if absent.

        Waits for its in-flight call, but no longer than the caller's deadline
        (then DEADLINE_EXCEEDED) nor `max_wait` seconds (then UNAVAILABLE):
        an RPC thread must not hang behind a stuck call, and a call whose
        client gave up must not act. The phase moves to the op's phase inside;
        on exit it returns to what it was unless the op changed it or removed
        the actor.
        """
        actor = self.get(uid)
        if actor is None:
            next_phase(None, op, uid)  # raises NOT_FOUND
            raise AssertionError("unreachable")
        with phase("lock.wait"):  # its own phase: time queued behind another call
            got = actor.lock.acquire(timeout=deadline.wait_limit(max_wait))
        if not got:
            deadline.check(f"actor {uid}: {op.value}")
            raise AteomError(
                f"actor {uid}: another call has held it for over {max_wait:g} s;"
                f" {op.value} not done, try again", code=ErrorCode.UNAVAILABLE)
        try:
            deadline.check(f"actor {uid}: {op.value}")
            if actor.phase is Phase.RELEASING:
                # Checkpointed: gone once reaped. Its release never takes this
                # lock, so it is waited for holding it (queued calls stay queued).
                actor.succession.wait_gone(max_wait, f"actor {uid}: {op.value}")
            if self.get(uid) is not actor:  # removed while we waited
                next_phase(None, op, uid)
            with self._lock:  # against the reaper's `sandbox_exited`
                before = actor.phase
                actor.phase = next_phase(before, op, uid, exit_note=actor.exit_note)
                during = actor.phase
            try:
                yield actor
            finally:
                exited = False
                with self._lock:
                    # Back to its phase when the call left it hosted as it was
                    # (not released, not removed): EXITED if it exited meanwhile.
                    if actor.phase is during and self._actors.get(uid) is actor:
                        exited = self._settle(actor, before)
                if exited:
                    self._exited(actor)
        finally:
            actor.lock.release()

