"""Starts in flight: the Run and Restore calls on their way to a booted sandbox,
which a checkpointed actor's cleanup lets go first.

A checkpointed actor's GPUs and slot go to the next actor when its stopped
sandbox is killed (`ActorTable.yield_capacity`), the next actor's workload
waiting for that sandbox's exit (`ActorTable.free`). What is left of its release (a
`runsc delete` per container, each a Go process's start-up and CPU, the
state dir, the bundles) is bookkeeping no call waits for; run beside the next
actor's boot it took the same cores, and slowed that boot (docs/performance.md,
"GPU hand-over"). So that rest
waits until no start is in flight (`wait_idle`), for a bounded time: a worker
that is always starting something still gets its cleanup done.

A start waiting for the release of an actor of its own uid (a Restore right
after its Checkpoint) is set aside meanwhile (`set_aside`): that release
would wait for it, and it for that release, until the bound.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Starts:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        # Per thread (one lifecycle call per gRPC thread): whether this
        # thread's call is counted, so `set_aside` outside a start is a no-op.
        self._local = threading.local()

    @contextmanager
    def starting(self) -> Iterator[None]:
        """Count the calling thread's Run or Restore while it runs."""
        self._enter()
        try:
            yield
        finally:
            self._leave()

    @contextmanager
    def set_aside(self) -> Iterator[None]:
        """Within `starting`: not counted while inside (a wait for a release of
        the same uid); outside one, nothing."""
        if not getattr(self._local, "counted", False):
            yield
            return
        self._leave()
        try:
            yield
        finally:
            self._enter()

    def wait_idle(self, limit: float) -> bool:
        """Wait until no start is in flight, at most `limit` seconds; whether none is."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count == 0, timeout=limit)

    def _enter(self) -> None:
        with self._cond:
            self._count += 1
        self._local.counted = True

    def _leave(self) -> None:
        self._local.counted = False
        with self._cond:
            self._count -= 1
            if self._count == 0:
                self._cond.notify_all()
