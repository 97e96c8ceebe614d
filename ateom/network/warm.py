"""`WarmPool`: a few networks made ahead of the actors that will have them.

Making a network (a namespace, a veth pair, addresses and routes) is netlink
and the kernel's work that a Run would otherwise wait for (docs/performance.md,
"An actor's own network"). Networks are named after their /30, not their actor
(`ateom.network.addressing`), so one can be made before anyone asks: a Run
takes a ready one and the pool makes the next on a thread of its own, off
every call's path. When the pool is empty (a burst of Runs, or making one
failed), `ActorNetworks.create` makes the network itself, as without a pool:
the pool only ever saves time, it never refuses.

A network waiting here has no actor and no sandbox: the firewall already
covers its link by name, nothing routes to it, and nobody holds its address.
A failure to make one is logged and retried with a growing pause (0.5 s to
30 s); `stop` ends the thread and hands back what was ready, to be taken down
by the caller as any other network. A daemon killed with networks in the pool
leaves them to the next start's sweep, as it does its actors'.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from ateom.network.addressing import ActorNet

log = structlog.get_logger("ateom.network")

FIRST_PAUSE = 0.5
LONGEST_PAUSE = 30.0
STOP_TIMEOUT = 15.0


class WarmPool:
    """Keeps up to `size` networks made by `make` (a no-argument builder that raises
    on failure); `discard` takes down one made after `stop`."""

    def __init__(self, size: int, make: Callable[[], ActorNet],
                 discard: Callable[[ActorNet], None]) -> None:
        if size < 0:
            raise ValueError(f"warm pool size {size}: must be 0 or more")
        self.size = size
        self._make = make
        self._discard = discard
        self._cond = threading.Condition()
        self._ready: list[ActorNet] = []
        self._running = False
        self._thread: threading.Thread | None = None
        self.made = 0
        self.failed = 0

    def start(self) -> None:
        if self.size == 0:
            return
        with self._cond:
            self._running = True
        self._thread = threading.Thread(target=self._fill, name="ateom-network-warm",
                                        daemon=True)
        self._thread.start()

    def take(self) -> ActorNet | None:
        """A ready network (the oldest), or None; the pool starts making another."""
        with self._cond:
            if not self._ready:
                return None
            net = self._ready.pop(0)
            self._cond.notify_all()
            return net

    def ready(self) -> int:
        with self._cond:
            return len(self._ready)

    def wait_full(self, timeout: float) -> bool:
        """Whether the pool held `size` networks within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._ready) < self.size:
                left = deadline - time.monotonic()
                if left <= 0 or not self._running:
                    return False
                self._cond.wait(left)
            return True

    def stop(self) -> list[ActorNet]:
        """End the thread (waiting at most STOP_TIMEOUT for the network it is making)
        and hand back every ready network."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT)
            if self._thread.is_alive():
                log.error("network_warm_stuck", seconds=STOP_TIMEOUT)
        with self._cond:
            ready, self._ready = self._ready, []
        return ready

    def _fill(self) -> None:
        pause = FIRST_PAUSE
        retry_at = 0.0
        while True:
            with self._cond:
                while self._running and (len(self._ready) >= self.size
                                         or time.monotonic() < retry_at):
                    wait = retry_at - time.monotonic()
                    self._cond.wait(wait if wait > 0 else None)
                if not self._running:
                    return
            try:
                net = self._make()
            except Exception as exc:
                self.failed += 1
                log.warning("network_warm_failed", error=str(exc), retry_in=pause)
                retry_at = time.monotonic() + pause
                pause = min(pause * 2, LONGEST_PAUSE)
                continue
            pause, retry_at = FIRST_PAUSE, 0.0
            with self._cond:
                if self._running:
                    self.made += 1
                    self._ready.append(net)
                    self._cond.notify_all()
                    continue
            self._discard(net)
