"""Admission: whether a lifecycle call may start, and the drain that closes the door.

Every lifecycle call is counted while in flight and logged as one phase (its
op) under the actor's context. New actors (Run, Restore) are refused once the
daemon drains; Checkpoint and Terminate stay open so the node agent can save
or stop its actors within the grace. When the grace ends the door shuts
(`closed`): a Run that was still validating then gets UNAVAILABLE instead of
hosting an actor the drain no longer sees.

Calls into the lifecycle service (and stats, which run runsc too) take one
of a fixed number of slots, fewer than the gRPC server has threads: when
every slot waits on a stuck runsc, one more call is refused at once
(RESOURCE_EXHAUSTED) rather than taking the threads Health and Inspect need
(a worker whose liveness probe times out gets restarted, actors and all).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import structlog

from ateom.daemon.actors.table import NO_ASKS, Actor, ActorTable, Asks, Op
from ateom.daemon.calls.phases import phase
from ateom.daemon.calls.requests import ActorRef
from ateom.errors import AteomError, ErrorCode

log = structlog.get_logger("ateom.admission")


class Admission:
    def __init__(self, slots: int) -> None:
        self.state = "starting"  # "serving" once the server is up, then "draining"
        self.slots = slots
        self._free_slots = threading.BoundedSemaphore(slots)
        self._inflight = 0
        self._cond = threading.Condition()
        self._closed = False

    @contextmanager
    def slot(self, what: str) -> Iterator[None]:
        """Hold one of the service's call slots; RESOURCE_EXHAUSTED when none is free."""
        if not self._free_slots.acquire(blocking=False):
            raise AteomError(
                f"{what}: all {self.slots} call slots are busy (calls waiting on runsc);"
                " try again", code=ErrorCode.RESOURCE_EXHAUSTED)
        try:
            yield
        finally:
            self._free_slots.release()

    @property
    def inflight(self) -> int:
        with self._cond:
            return self._inflight

    @contextmanager
    def call(self, op: Op, uid: str, *, admits: bool) -> Iterator[None]:
        """Every lifecycle call: a slot, the draining check, the in-flight count, the
        log context."""
        with self.slot(f"{op.value} of actor {uid}"), self._counted(admits):
            # The op is the outer phase: every line of the call carries a phase,
            # and the whole call's duration is logged like any other phase.
            with structlog.contextvars.bound_contextvars(actor_uid=uid, op=op.value), \
                    phase(op.value):
                yield

    @contextmanager
    def _counted(self, admits: bool) -> Iterator[None]:
        with self._cond:
            if admits and self.state == "draining":
                raise AteomError("ateom is draining: not accepting new actors",
                                 code=ErrorCode.UNAVAILABLE)
            self._inflight += 1
        try:
            yield
        finally:
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()

    def admit(self, actors: ActorTable, ref: ActorRef, op: Op, *, max_wait: float,
              asks: Asks = NO_ASKS) -> Actor:
        """Reserve the actor's slot (locked by the caller's thread), unless the drain
        has taken its last look at the hosted actors. Actors being released that
        are in the way are waited for first (up to `max_wait`), outside the lock
        the drain needs."""
        actors.await_releases(ref, op, max_wait=max_wait)
        with self._cond:
            if self._closed:
                raise AteomError("ateom is shutting down: not accepting new actors",
                                 code=ErrorCode.UNAVAILABLE)
            return actors.admit(ref, op, asks)

    def drain(self, grace: float, hosted: Callable[[], int]) -> None:
        """Refuse new actors; wait up to `grace` for calls in flight to end and for
        `hosted()` to reach 0 (the node agent checkpointing or terminating its
        actors); then close the door."""
        with self._cond:
            self.state = "draining"
            deadline = time.monotonic() + grace
            log.info("draining", inflight=self._inflight, hosted=hosted(), grace=grace)
            while (self._inflight or hosted()) and time.monotonic() < deadline:
                self._cond.wait(timeout=min(0.1, max(deadline - time.monotonic(), 0)))
            log.info("drained", inflight=self._inflight, hosted=hosted())
            self._closed = True
