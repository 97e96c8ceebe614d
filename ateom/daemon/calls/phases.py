"""The one place every lifecycle phase goes through.

`phase("runsc.create", container="app")` binds the phase (and any context)
to every log line inside it, and logs one ``phase`` event with its duration
and outcome when it ends. Metrics hook here: `PHASE_OBSERVERS` are called
with (name, seconds, ok) after every phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import structlog

log = structlog.get_logger("ateom.phase")

# Hook for ateom.daemon.rpc.metrics: observer(phase name, duration seconds, succeeded).
PHASE_OBSERVERS: list[Callable[[str, float, bool], None]] = []


@contextmanager
def phase(name: str, **context: object) -> Iterator[None]:
    started = time.perf_counter()
    ok = False
    with structlog.contextvars.bound_contextvars(phase=name, **context):
        try:
            yield
            ok = True
        finally:
            seconds = time.perf_counter() - started
            log.info("phase", outcome="ok" if ok else "failed",
                     duration_ms=round(seconds * 1000, 3))
            for observer in PHASE_OBSERVERS:
                observer(name, seconds, ok)
