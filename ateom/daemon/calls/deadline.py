"""The calling RPC's deadline, where the lifecycle waits for an actor's lock.

A call that waited past its client's deadline must not act afterwards: the
client has given up (and may have retried), and a Terminate that wakes up
late would kill the actor a newer Run just booted. The RPC layer binds the
deadline for the duration of the call (`bound`); the waits read it
(`remaining`), and `check` turns an expired one into DEADLINE_EXCEEDED.
Without an RPC (tests, the drain) there is no deadline.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ateom.errors import AteomError, ErrorCode

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "ateom_rpc_deadline", default=None)


@contextmanager
def bound(seconds: float | None) -> Iterator[None]:
    """Within: the call must be done `seconds` from now (None: no deadline)."""
    token = _deadline.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def remaining() -> float | None:
    """Seconds left before the caller's deadline, None without one."""
    at = _deadline.get()
    return None if at is None else at - time.monotonic()


def wait_limit(cap: float) -> float:
    """How long a wait may block: until the deadline, and never longer than `cap`."""
    left = remaining()
    return cap if left is None else max(min(left, cap), 0.0)


def check(what: str) -> None:
    """DEADLINE_EXCEEDED, naming `what` was not done, once the deadline has passed."""
    left = remaining()
    if left is not None and left <= 0:
        raise AteomError(f"{what}: the caller's deadline passed while waiting; nothing done",
                         code=ErrorCode.DEADLINE_EXCEEDED)
