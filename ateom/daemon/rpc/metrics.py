"""Prometheus metrics: what the daemon did, how long it took, what it hosts.

One `Metrics` object per daemon, on its own registry (not the client library's
global one), so tests and two daemons in one process never share counters. The
registry also carries the process's own figures (``process_*``: CPU, memory,
open fds) and ``python_info``; no ``*_created`` series (each would double a
counter's or histogram's series for a value nobody queries).
The daemon feeds it from its seams, whose observer signatures these
methods match exactly:

- ``ateom.daemon.rpc.handler.RPC_OBSERVERS``: ``metrics.observe_rpc(rpc, code, seconds)``
  (`rpc` is ``Service.Method``, as the handler names it: the labels ``service``, ``method``);
- ``ateom.daemon.calls.phases.PHASE_OBSERVERS``: ``metrics.observe_phase(phase, seconds, ok)``;
- ``ateom.daemon.calls.refusals.REFUSAL_OBSERVERS``: ``metrics.observe_refusal(kind, reason)``;
- ``ateom.daemon.calls.sandbox_exits.SANDBOX_EXIT_OBSERVERS``:
  ``metrics.observe_sandbox_exit(cause)``;

(`attach_to_daemon` appends all four), and reads four things at scrape
time, so no code path has to remember to update them: the hosted-actor count
(`track_hosted_actors`), the injector's SONAME cache (`track_soname_cache`),
who holds which GPU (`track_placement`) and the long phases running now with how
far they are (`track_progress`, from ``ateom.daemon.calls.progress``).
Serving them is `ateom.daemon.rpc.metrics_endpoint`'s (``--metrics-listen``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ateom import __version__
from ateom.daemon.calls import phases, progress, refusals, sandbox_exits
from ateom.daemon.rpc import handler
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.placement import PlacementSnapshot

NAMESPACE = "ateom"
log = structlog.get_logger("ateom.daemon.rpc.metrics")

# Phases the daemon times (ateom.daemon.calls.phases names). Listed for the docs and
# dashboards; any name the daemon uses is recorded, because an observer that
# raised would break the phase it observes. Names are literals in the daemon,
# so the label's cardinality stays bounded.
PHASES = (
    "validate",
    "lock.wait",  # queued behind another call on the same actor
    "release.wait",  # a call for a checkpointed actor waiting until its release is done
    "capacity.wait",  # a Run/Restore that took a checkpointed actor's slot or GPUs: its exit
    "release",  # after a checkpoint is answered: the sandbox reaped, GPUs freed
    "sandbox.exit",  # in a release: until the checkpointed sandbox's processes exited
    "sandbox.kill",  # a teardown of a sandbox that did not answer runsc: killed by pid
    "starts.wait",  # in a release, its sandbox gone: until no Run/Restore is in flight
    "plan",
    "inject",  # CDI resolution + bundle injection, per container
    "inject.plan",
    "bundle.write",  # a container without devices: ateom's config.json written
    "bundles.remove",  # ateom's own bundle dirs and overlay filestore of a gone sandbox
    "cdi.generate",  # nvidia-ctk cdi generate, when the node had no spec
    "runsc.create",
    "runsc.start",
    "cuda-checkpoint",  # runsc running cuda-checkpoint in the sandbox, before a GPU save
    "gpu.prepare",  # a checkpoint's GPU checks and record, before the sandbox is touched
    "image.room",  # the checkpoint's image size against the dir's free space
    "image.prepare",  # the checkpoint dir made
    "runsc.checkpoint",
    "image.list",  # the files the save wrote
    "image.clear",  # after a failed save: the files it wrote removed
    "save.settle",  # after a failed save: until the sandbox exited, or runs on
    "record.write",  # the GPU compatibility record put in place (staged during the save)
    "runsc.restore",
    "image.discard",  # the consumed restore image removed, before the Restore answers
    "volumes.capture",  # the durable-dir volumes' tars written into the checkpoint dir
    "volumes.restore",  # the durable-dir volumes emptied and filled from the snapshot
    "network.create",  # the actor's netns, veth pair, addresses: warm or made; egress element
    "network.remove",  # ... and all of it gone (a teardown, or a checkpoint's release)
    "wakeup",  # a Run/Restore with a wakeup probe: until the probe's first success
    "runsc.pause",  # a DATA snapshot: the sandbox frozen for the capture
    "runsc.resume",  # ... and running again
    "runsc.delete",
    "rollback",
    "teardown",
    "reconcile",  # at startup: sandboxes left by an earlier daemon
)

# RPCs take from milliseconds (stats) to minutes (checkpointing a large GPU
# sandbox); the default buckets stop at 10 s.
RPC_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
PHASE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


@dataclass
class RpcCall:
    """The code an RPC ended with; the `rpc` context manager's handle."""

    rpc: str  # Service.Method
    code: str = "OK"


def rpc_labels(rpc: str) -> tuple[str, str]:
    """(service, method) of ``Service.Method``, the labels grpc-prometheus's
    ``grpc_service``/``grpc_method`` would be."""
    service, _, method = rpc.rpartition(".")
    return service, method


class Metrics:
    """The daemon's metrics, registered on `self.registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # Process-wide in the client library, read when a counter or histogram is made.
        disable_created_metrics()
        self.registry = registry if registry is not None else CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.rpc_requests = Counter(
            "rpc_requests",
            "gRPC calls handled, by service, method and status code.",
            ["service", "method", "code"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.rpc_duration = Histogram(
            "rpc_duration_seconds",
            "gRPC call latency, by service, method and status code.",
            ["service", "method", "code"],
            namespace=NAMESPACE,
            buckets=RPC_BUCKETS,
            registry=self.registry,
        )
        self.phase_duration = Histogram(
            "phase_duration_seconds",
            "Duration of one lifecycle phase (inject, runsc create/start/checkpoint/restore...).",
            ["phase", "outcome"],
            namespace=NAMESPACE,
            buckets=PHASE_BUCKETS,
            registry=self.registry,
        )
        # kind: "placement", "mps", "checkpoint", "restore"; reason: a slug the daemon
        # names (ateom.daemon.calls.refusals): both bounded, so the label set is too.
        self.refusals = Counter(
            "refusals",
            "Requests ateom turned down on purpose, by decision and reason.",
            ["kind", "reason"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        # cause: "on_its_own", "failed_save" (ateom.daemon.calls.sandbox_exits): bounded.
        self.sandbox_exits = Counter(
            "sandbox_exits",
            "Sandboxes that ended without being asked to, by cause.",
            ["cause"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.hosted_actors = Gauge(
            "hosted_actors",
            "Actors this worker hosts right now.",
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.build_info = Gauge(
            "build_info",
            "Always 1; the labels say which ateom this is.",
            ["version"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.build_info.labels(version=__version__).set(1)

    # -- RPC seam ---------------------------------------------------------------

    def observe_rpc(self, rpc: str, code: str, seconds: float) -> None:
        """Count one finished RPC, ``Service.Method``. `code` is a gRPC status name
        ("OK", "NOT_FOUND", ...)."""
        service, method = rpc_labels(rpc)
        self.rpc_requests.labels(service=service, method=method, code=code).inc()
        self.rpc_duration.labels(service=service, method=method, code=code).observe(seconds)

    @contextmanager
    def rpc(self, rpc: str) -> Iterator[RpcCall]:
        """Time the block as RPC `rpc` (``Service.Method``).

        The code is OK, the escaping AteomError's code, INTERNAL for any other
        exception, or whatever the block set on the yielded handle (for a
        servicer that reports errors without raising).
        """
        call = RpcCall(rpc)
        start = time.perf_counter()
        try:
            yield call
        except AteomError as exc:
            call.code = exc.code.value
            raise
        except BaseException:
            call.code = ErrorCode.INTERNAL.value
            raise
        finally:
            self.observe_rpc(rpc, call.code, time.perf_counter() - start)

    # -- phase seam -------------------------------------------------------------

    def observe_phase(self, phase: str, seconds: float, ok: bool = True) -> None:
        """Record one phase's duration and whether it succeeded."""
        outcome = "ok" if ok else "error"
        self.phase_duration.labels(phase=phase, outcome=outcome).observe(seconds)

    @contextmanager
    def phase(self, phase: str) -> Iterator[None]:
        """Time the block as `phase`; an exception makes its outcome "error"."""
        start = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            self.observe_phase(phase, time.perf_counter() - start, ok)

    # -- refusal seam -----------------------------------------------------------

    def observe_refusal(self, kind: str, reason: str) -> None:
        """Count one refusal (`ateom.daemon.calls.refusals.refused`)."""
        self.refusals.labels(kind=kind, reason=reason).inc()

    def observe_sandbox_exit(self, cause: str) -> None:
        """Count one sandbox that ended unasked (`ateom.daemon.calls.sandbox_exits`)."""
        self.sandbox_exits.labels(cause=cause).inc()

    # -- state ------------------------------------------------------------------

    def track_hosted_actors(self, count: Callable[[], int]) -> None:
        """Read the hosted-actor gauge from `count()` at every scrape."""
        self.hosted_actors.set_function(lambda: float(count()))

    def track_soname_cache(self, cache: CacheStats) -> None:
        """Expose `cache.hits`/`cache.misses` (the injector's SONAME cache) at every scrape."""
        self.registry.register(_SonameCacheCollector(cache))

    def track_placement(self, snapshot: Callable[[], PlacementSnapshot | None],
                        policy: str) -> None:
        """Expose the placement `policy` in force, and each GPU's holder count from
        `snapshot()` at every scrape (None: the Pod's GPUs are not known yet, no
        holder series)."""
        self.registry.register(_PlacementCollector(snapshot, policy))

    def track_progress(self, running: Callable[[], Iterable[progress.Running]]) -> None:
        """Expose the long phases running now (checkpoint, restore, image.remove) by
        phase: how many, their bytes so far and the longest one's elapsed time."""
        self.registry.register(_ProgressCollector(running))

    def scrape(self) -> bytes:
        """The Prometheus text exposition of this registry, as a scraper would get it."""
        return generate_latest(self.registry)


class CacheStats(Protocol):
    hits: int
    misses: int


class _SonameCacheCollector(Collector):
    def __init__(self, cache: CacheStats) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            f"{NAMESPACE}_injection_soname_cache_lookups",
            "SONAME lookups during injection: answered by the cache (hit) or read from ELF (miss).",
            labels=["result"],
        )
        family.add_metric(["hit"], self._cache.hits)
        family.add_metric(["miss"], self._cache.misses)
        yield family


class _PlacementCollector(Collector):
    """The policy, and per-GPU holders read from the placer when scraped."""

    def __init__(self, snapshot: Callable[[], PlacementSnapshot | None], policy: str) -> None:
        self._snapshot = snapshot
        self._policy = policy

    def collect(self) -> Iterator[Metric]:
        holders = GaugeMetricFamily(
            f"{NAMESPACE}_gpu_holders",
            "Actors holding each of the Pod's GPUs now (by GPU index).",
            labels=["gpu"],
        )
        info = GaugeMetricFamily(
            f"{NAMESPACE}_gpu_placement_info",
            "Always 1; the label is the --gpu-placement policy in force.",
            labels=["policy"],
        )
        try:
            snap = self._snapshot()
        except Exception as exc:  # a scrape must answer without this part
            # The other metrics matter more than this one source; say why it is absent.
            log.warning("metrics_placement_unavailable", error=str(exc)[:200])
            snap = None
        if snap is not None:
            for h in snap.gpus:
                holders.add_metric([str(h.gpu.index)], len(h.holders))
        info.add_metric([str(snap.settings) if snap is not None else self._policy], 1)
        yield holders
        yield info


class _ProgressCollector(Collector):
    """The long phases running now, by phase, read when scraped."""

    def __init__(self, running: Callable[[], Iterable[progress.Running]]) -> None:
        self._running = running

    def collect(self) -> Iterator[Metric]:
        count = GaugeMetricFamily(
            f"{NAMESPACE}_phases_running",
            "Long phases running now (checkpoint, restore, image.remove), by phase.",
            labels=["phase"])
        done = GaugeMetricFamily(
            f"{NAMESPACE}_phase_running_bytes",
            "Bytes the long phases running now have written, read or removed so far.",
            labels=["phase"])
        longest = GaugeMetricFamily(
            f"{NAMESPACE}_phase_running_seconds",
            "How long the longest-running of these phases has run, by phase.",
            labels=["phase"])
        by_phase: dict[str, list[progress.Running]] = {}
        for r in self._running():
            by_phase.setdefault(r.phase, []).append(r)
        for name, runs in sorted(by_phase.items()):
            count.add_metric([name], len(runs))
            done.add_metric([name], sum(max(r.done_bytes, 0) for r in runs))
            longest.add_metric([name], max(r.elapsed for r in runs))
        yield count
        yield done
        yield longest


def attach_to_daemon(metrics: Metrics) -> Callable[[], None]:
    """Subscribe `metrics` to the daemon's RPC, phase, refusal and sandbox-exit seams;
    returns the undo."""
    seams: tuple[tuple[list[Any], Any], ...] = (
        (handler.RPC_OBSERVERS, metrics.observe_rpc),
        (phases.PHASE_OBSERVERS, metrics.observe_phase),
        (refusals.REFUSAL_OBSERVERS, metrics.observe_refusal),
        (sandbox_exits.SANDBOX_EXIT_OBSERVERS, metrics.observe_sandbox_exit),
    )
    for observers, observer in seams:
        observers.append(observer)

    def detach() -> None:
        for observers, observer in seams:
            if observer in observers:
                observers.remove(observer)

    return detach
