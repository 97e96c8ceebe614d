"""The one place every lifecycle phase goes through.

`phase("runsc.create", container="app")` binds the phase (and any context)
to every log line inside it, and logs one ``phase`` event with its duration,
its outcome and its ``parent`` (the phase it ran inside, None for a call's
outermost) when it ends. A call's time is attributed by its phases: the
children of its outermost phase should cover it (benchmarks/bench_turns.py
prints what they leave unexplained). Metrics hook here: `PHASE_OBSERVERS` are
called with (name, seconds, ok) after every phase.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import structlog

log = structlog.get_logger("ateom.phase")

# Hook for ateom.daemon.rpc.metrics: observer(phase name, duration seconds, succeeded).
PHASE_OBSERVERS: list[Callable[[str, float, bool], None]] = []

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ateom_phase", default=None)


@contextmanager
def phase(name: str, **context: object) -> Iterator[None]:
    started = time.perf_counter()
    ok = False
    parent = _current.get()
    token = _current.set(name)
    with structlog.contextvars.bound_contextvars(phase=name, **context):
        try:
            yield
            ok = True
        finally:
            seconds = time.perf_counter() - started
            _current.reset(token)
            log.info("phase", outcome="ok" if ok else "failed",
                     duration_ms=round(seconds * 1000, 3), parent=parent)
            for observer in PHASE_OBSERVERS:
                observer(name, seconds, ok)
