"""The hand-over ("succession"): how a checkpointed actor's slot and GPUs go to the
actors after it. The protocol in one object, which the hosting table, hosting and
the daemon's release ask.

Every actor carries a `Succession`. A checkpointed one leaves in three steps:

1. `yield_capacity(gpus)`: in the Checkpoint call, once its stopped sandbox has
   been killed and before the answer (under the table's lock, its phase turned
   RELEASING): it takes no slot any more, and the GPUs it held are named as
   yielded before the pool lets them go, so that an actor booked on them in
   between finds whom to wait for. It is *dying*.
2. `free()`: on its release's thread, once every thread of its sandbox has
   exited (their device files closed with the last): no longer dying. What is
   left of its release (deletes, the state dir, the bundles) is bookkeeping.
3. `leave()`: that bookkeeping done, it has left the table: *gone*.

The actors after it: a Run or Restore admitted while the worker is full but for
dying actors, or booked on GPUs a dying actor yielded, `take`s that actor as a
*predecessor*; its workload (a Restore: its root, which brings the memory and
GPU state back) waits until each predecessor is freed (`wait_for_predecessors`,
bounded). An actor that took nothing of a dying one does not wait for it. A
call for the leaving actor's own uid waits until it is gone (`wait_gone`), so a
Restore right after a Checkpoint never meets the old sandbox.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from ateom.daemon.calls import deadline
from ateom.daemon.calls.phases import phase
from ateom.errors import AteomError, ErrorCode


@dataclass(eq=False)
class Succession:
    """One actor's part in the hand-over (mutable; its steps are taken under the
    hosting table's lock where the table says so)."""

    uid: str
    # Takes one of --max-actors' slots: not while dying, nor a slot held only
    # while a dead daemon's leftovers are cleared.
    counted: bool = True
    yielded_gpus: tuple[str, ...] = ()  # what it gave up when it was yielded
    yielded: bool = False
    freed: threading.Event = field(default_factory=threading.Event)
    gone: threading.Event = field(default_factory=threading.Event)
    # The dying actors whose slot or GPUs this one took: its workload waits for them.
    predecessors: list[Succession] = field(default_factory=list)

    @property
    def dying(self) -> bool:
        """Yielded, its sandbox still exiting."""
        return self.yielded and not self.freed.is_set()

    def yield_capacity(self, gpus: tuple[str, ...]) -> None:
        """Step 1: its slot and `gpus` go to whoever comes next."""
        self.counted = False
        self.yielded_gpus = gpus
        self.yielded = True

    def free(self) -> None:
        """Step 2: nothing of it uses the worker any more."""
        self.counted = False
        self.freed.set()

    def leave(self) -> None:
        """Step 3: it has left the table (an actor gone holds nothing)."""
        self.freed.set()
        self.gone.set()

    def take(self, dying: Iterable[Succession]) -> None:
        """Name `dying` actors (whose slot or GPUs this one took) predecessors."""
        self.predecessors += [d for d in dying if d not in self.predecessors]

    def wait_for_predecessors(self, max_wait: float) -> None:
        """Wait (``capacity.wait``) until every predecessor is freed, each no longer
        than `max_wait` nor the caller's deadline (DEADLINE_EXCEEDED); one still
        exiting then is UNAVAILABLE, naming it."""
        for predecessor in self.predecessors:
            what = (f"actor {self.uid}: the slot or GPUs of actor {predecessor.uid},"
                    " whose sandbox is still exiting")
            if not _wait(predecessor.freed, phase("capacity.wait"), max_wait, what):
                raise AteomError(f"{what} after {max_wait:g} s", code=ErrorCode.UNAVAILABLE)
        self.predecessors = []

    def wait_gone(self, max_wait: float, what: str) -> bool:
        """Wait (``release.wait``) until it has left the table, no longer than
        `max_wait` seconds nor the caller's deadline (then DEADLINE_EXCEEDED)."""
        return _wait(self.gone, phase("release.wait"), max_wait, what)


def yielders_of(booked: Iterable[str], dying: Iterable[Succession]) -> list[Succession]:
    """Those of `dying` that yielded any of the `booked` GPUs (pure)."""
    held = set(booked)
    return [d for d in dying if held & set(d.yielded_gpus)]


def _wait(event: threading.Event, timed: AbstractContextManager[object], max_wait: float,
          what: str) -> bool:
    with timed:
        happened = event.wait(timeout=max(deadline.wait_limit(max_wait), 0.0))
    deadline.check(what)
    return happened
