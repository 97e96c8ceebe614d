"""Work that waits until the caller has its answer.

A call may leave work that the answer does not depend on (a checkpointed
sandbox to reap, a consumed image to remove). Started while the call still
runs, it competes with the call's own last steps for this process's GIL and
delays the answer by a switch interval or more; so the RPC layer collects it
(`collecting`) and starts it when gRPC has sent the answer. Without an RPC
around (tests, the drain) it starts at once.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_pending: contextvars.ContextVar[list[Callable[[], None]] | None] = contextvars.ContextVar(
    "ateom_after_answer", default=None)


def after_answer(start: Callable[[], None]) -> None:
    """Run `start` (quick: it should only start a thread) once the answer is sent."""
    pending = _pending.get()
    if pending is None:
        start()
    else:
        pending.append(start)


@contextmanager
def collecting() -> Iterator[list[Callable[[], None]]]:
    """Within: `after_answer` collects into the list yielded, for the caller to run."""
    later: list[Callable[[], None]] = []
    token = _pending.set(later)
    try:
        yield later
    finally:
        _pending.reset(token)


def run_all(later: list[Callable[[], None]]) -> None:
    for start in later:
        start()
