"""`StatsSampler`: every hosted actor's latest stats, taken in the background.

GetActiveWorkloadStats is a scraper's discovery read, "safe on a timer" (the
reference's words). Asking runsc about every container of every actor at each
read made its cost grow with the actors, and it held a call slot while it ran
(docs/performance.md, "Many actors on one worker"). With ``--ignore-cgroups`` (what
a worker Pod needs) the sandboxes have no cgroup of their own to read, so
runsc's own view stays the source, and it is asked here, off every call's
path: one thread samples the running actors, the one whose sample is oldest
first, each sample bounded by runsc's control timeout. The read then costs a
look at this table, whatever the number of actors:

- a running (or checkpointing) actor answers its latest sample, with the time
  it was taken as its ``observed_at_unix_nano``;
- an actor with no sample yet (booting, restoring, just started, its sandbox
  not answering since it started, torn down, exited) answers "not measured"
  (STATS_SOURCE_UNSPECIFIED), attributed: the reference's way of saying "no
  numbers yet, take the next sample";
- an actor whose checkpoint has been answered is the node agent's again and
  is not listed.

Pacing: each actor is sampled again `interval` seconds after its last sample
at the soonest, and the thread rests after each sample for as long as keeps
its own share of one CPU at `duty` at most (runsc is a Go binary started per
container, each sample a few of them). When the actors are too many for both,
samples grow older rather than the CPU they cost: the age is in every sample.
GetWorkloadStats, the read that names its actor, still asks runsc then and
there (and keeps what it got here).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from ateom.daemon.actors.table import Actor, ActorTable, Phase
from ateom.daemon.calls.requests import StatsSample
from ateom.errors import AteomError

log = structlog.get_logger("ateom.stats")

DEFAULT_INTERVAL = 10.0
DEFAULT_DUTY = 0.25
# How soon an actor that appears (or a sample that failed) is looked at again.
LOOK_AGAIN = 1.0
STOP_TIMEOUT = 10.0

# Phases in which an actor is executing here, for the discovery read.
_LISTED = frozenset({Phase.BOOTING, Phase.RESTORING, Phase.RUNNING, Phase.CHECKPOINTING,
                     Phase.TERMINATING, Phase.EXITED})
# Phases in which its latest sample still describes it.
_MEASURED = frozenset({Phase.RUNNING, Phase.CHECKPOINTING})


@dataclass(frozen=True, slots=True)
class _Taken:
    actor: Actor  # the very actor (a uid run again is another Actor)
    sample: StatsSample | None  # None: the last try failed
    at: float  # time.monotonic() of the try


def unmeasured(actor: Actor, now_ns: int) -> StatsSample:
    """An actor with no numbers to give (STATS_SOURCE_UNSPECIFIED on the wire)."""
    return StatsSample(actor=actor.ref, memory_current_bytes=0, memory_peak_bytes=0,
                       memory_working_set_bytes=0, cpu_usage_usec=0,
                       observed_at_unix_nano=now_ns, epoch_unix_nano=actor.epoch_unix_nano,
                       measured=False)


class StatsSampler:
    """`sample(actor, uid)` takes one actor's stats (runs runsc) or raises AteomError."""

    def __init__(self, actors: ActorTable, sample: Callable[[Actor, str], StatsSample], *,
                 interval: float = DEFAULT_INTERVAL, duty: float = DEFAULT_DUTY) -> None:
        if interval <= 0 or not 0 < duty <= 1:
            raise ValueError(f"interval {interval:g} must be > 0 and duty {duty:g} in (0, 1]")
        self.actors = actors
        self.interval = interval
        self.duty = duty
        self._sample = sample
        self._lock = threading.Lock()
        self._taken: dict[str, _Taken] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples = 0
        self.failures = 0

    # -- the reads -----------------------------------------------------------------

    def active(self) -> list[StatsSample]:
        """One sample per actor executing here, from what the thread has taken (no
        runsc, no lock but this table's)."""
        now_ns = time.time_ns()
        with self._lock:
            taken = dict(self._taken)
        out = []
        for actor in self.actors.snapshot():
            if actor.phase not in _LISTED:
                continue
            got = taken.get(actor.ref.actor_uid)
            if (got is not None and got.actor is actor and got.sample is not None
                    and actor.phase in _MEASURED):
                out.append(got.sample)
            else:
                out.append(unmeasured(actor, now_ns))
        return out

    def memory_of(self, actor: Actor) -> int:
        """The actor's memory at its latest sample; 0 with none (an estimate only)."""
        with self._lock:
            got = self._taken.get(actor.ref.actor_uid)
        if got is None or got.actor is not actor or got.sample is None:
            return 0
        return got.sample.memory_current_bytes

    def keep(self, actor: Actor, sample: StatsSample) -> None:
        """A sample taken elsewhere (GetWorkloadStats), kept as the latest."""
        with self._lock:
            self._taken[actor.ref.actor_uid] = _Taken(actor, sample, time.monotonic())

    # -- the thread ----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="ateom-stats", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT)

    def _due(self) -> tuple[Actor | None, float]:
        """The running actor to sample now (oldest first), or None and how long until
        one is due; forgets the actors that left."""
        now = time.monotonic()
        hosted = self.actors.snapshot()
        running = [a for a in hosted if a.phase is Phase.RUNNING]
        with self._lock:
            here = {a.ref.actor_uid for a in hosted}
            for uid in [u for u in self._taken if u not in here]:
                del self._taken[uid]
            ages: list[tuple[float, Actor]] = []
            for actor in running:
                got = self._taken.get(actor.ref.actor_uid)
                if got is None or got.actor is not actor:
                    ages.append((float("inf"), actor))
                else:
                    wait = self.interval if got.sample is not None else LOOK_AGAIN
                    ages.append((now - got.at - wait, actor))
        due = [(age, actor) for age, actor in ages if age >= 0]
        if due:
            return max(due, key=lambda pair: pair[0])[1], 0.0
        soonest = min((-age for age, _ in ages), default=LOOK_AGAIN)
        return None, min(soonest, LOOK_AGAIN)

    def _loop(self) -> None:
        rest = 0.0
        while not self._stop.wait(rest):
            actor, rest = self._due()
            if actor is None:
                continue
            started = time.monotonic()
            uid = actor.ref.actor_uid
            sample: StatsSample | None
            try:
                sample = self._sample(actor, uid)
                self.samples += 1
            except AteomError as exc:  # its sandbox does not answer, or it just left
                sample = None
                self.failures += 1
                log.info("stats_not_sampled", actor_uid=uid, reason=str(exc))
            except Exception as exc:  # never let the thread die: the reads would go stale
                sample = None
                self.failures += 1
                log.error("stats_sampler_failed", actor_uid=uid, error=repr(exc))
            took = time.monotonic() - started
            with self._lock:
                self._taken[uid] = _Taken(actor, sample, started + took)
            rest = took * (1 - self.duty) / self.duty
