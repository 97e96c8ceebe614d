"""What a long phase is doing while it runs, for whoever is waiting on it.

A GPU checkpoint may take minutes, and `phase` logs only when a phase ends. Around
each long phase (a checkpoint's save, a restore, a discarded image's removal) the
caller opens `progress(...)`: one ``phase_started`` line says what it works on
(the actor, its containers, the image's expected size), then while it lasts a
``phase_progress`` line every `LOG_EVERY` seconds says how far it is (bytes so far,
rate, elapsed, share of the expected size). `measure()` is the caller's way to
count bytes (the image's size while runsc writes it, what the sandbox has read
while it restores), sampled by one thread per phase, every `SAMPLE_EVERY`
seconds, never blocking the phase itself. `running()` is what runs now, read by
GetStatus (per actor) and the metrics (per phase).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger("ateom.progress")

LOG_EVERY = 5.0
SAMPLE_EVERY = 1.0


@dataclass
class Running:
    """One long phase now: what it works on and how far it is (bytes: -1 unknown)."""

    phase: str
    actor_uid: str
    expected_bytes: int
    started: float = field(default_factory=time.monotonic)
    done_bytes: int = -1

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def bytes_per_second(self) -> float:
        elapsed = self.elapsed
        return self.done_bytes / elapsed if self.done_bytes > 0 and elapsed > 0 else 0.0

    def figures(self) -> dict[str, object]:
        """The figures a progress line and GetStatus carry."""
        out: dict[str, object] = {"elapsed_s": round(self.elapsed, 1)}
        if self.done_bytes >= 0:
            out["done_bytes"] = self.done_bytes
            out["mb_s"] = round(self.bytes_per_second / 1e6, 1)
        if self.expected_bytes > 0:
            out["expected_bytes"] = self.expected_bytes
            if self.done_bytes >= 0:
                out["percent"] = round(min(100.0, 100 * self.done_bytes / self.expected_bytes))
        return out


_lock = threading.Lock()
_running: list[Running] = []


def running() -> tuple[Running, ...]:
    """Every long phase that runs now (a snapshot)."""
    with _lock:
        return tuple(_running)


@contextmanager
def progress(phase: str, actor_uid: str, *, measure: Callable[[], int] | None = None,
             expected_bytes: int = 0, **what: object) -> Iterator[Running]:
    """Say that `phase` starts for `actor_uid` and, while it runs, how far it is."""
    now = Running(phase, actor_uid, expected_bytes)
    log.info("phase_started", phase=phase, actor_uid=actor_uid,
             **({"expected_bytes": expected_bytes} if expected_bytes > 0 else {}), **what)
    done = threading.Event()
    with _lock:
        _running.append(now)
    watcher = threading.Thread(target=_watch, args=(now, measure, done),
                               name=f"progress-{phase}", daemon=True)
    watcher.start()
    try:
        yield now
    finally:
        done.set()
        watcher.join(timeout=SAMPLE_EVERY * 2)
        with _lock:
            _running.remove(now)


def _watch(now: Running, measure: Callable[[], int] | None, done: threading.Event) -> None:
    next_line = now.started + LOG_EVERY
    while not done.wait(SAMPLE_EVERY):
        if measure is not None:
            try:
                now.done_bytes = measure()
            except OSError:
                pass  # a file that went between listing and stat: the next sample tells
        if time.monotonic() >= next_line:
            next_line += LOG_EVERY
            log.info("phase_progress", phase=now.phase, actor_uid=now.actor_uid,
                     **now.figures())
