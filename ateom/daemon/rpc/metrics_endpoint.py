"""The metrics' HTTP endpoint: ``ateom serve --metrics-listen HOST:PORT``.

`start_daemon_metrics` makes the daemon's `Metrics` (`ateom.daemon.rpc.metrics`),
subscribes them to its seams, points the scrape-time figures at its service and
serves the Prometheus exposition on a thread; `MetricsServer.close` undoes it all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sized
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client.exposition import start_http_server

from ateom.daemon.calls import progress
from ateom.daemon.rpc.metrics import Metrics, attach_to_daemon
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.placement import PlacementSnapshot
from ateom.inject.soname import DEFAULT_SONAME_CACHE


def parse_listen_address(host_port: str, flag: str = "--metrics-listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6; empty host = all interfaces) -> (host, port);
    INVALID_ARGUMENT naming `flag` otherwise."""
    host, sep, port_text = host_port.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise AteomError(
            f"{flag} {host_port!r}: expected HOST:PORT with a port in 0..65535",
            code=ErrorCode.INVALID_ARGUMENT,
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port_text)


class MetricsServer:
    """A running exposition endpoint (HTTP, any path serves the scrape)."""

    def __init__(
        self,
        server: WSGIServer,
        thread: threading.Thread,
        metrics: Metrics,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._server = server
        self._thread = thread
        self.metrics = metrics
        self._on_close = on_close

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()
            self._on_close = None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_metrics_server(host_port: str, metrics: Metrics) -> MetricsServer:
    """Serve `metrics` on ``HOST:PORT`` from a daemon thread (opens a listening socket).

    Port 0 picks a free port (see `.port`). Raises AteomError(UNAVAILABLE) when
    the address cannot be bound.
    """
    host, port = parse_listen_address(host_port)
    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        raise AteomError(
            f"--metrics-listen {host_port!r}: cannot listen: {exc.strerror or exc}",
            code=ErrorCode.UNAVAILABLE,
        ) from exc
    return MetricsServer(server, thread, metrics)


class HostsActors(Protocol):
    """What `start_daemon_metrics` needs of the daemon's service: its actor table,
    its GPU placement (None until the Pod's GPUs are known) and the policy."""

    @property
    def actors(self) -> Sized: ...

    @property
    def placement_policy(self) -> str: ...

    def placement_snapshot(self) -> PlacementSnapshot | None: ...


def start_daemon_metrics(host_port: str, service: HostsActors) -> MetricsServer:
    """Everything ``ateom serve --metrics-listen`` needs, in one call.

    A fresh `Metrics` subscribed to the RPC, phase and refusal seams, reading
    the hosted-actor count from ``service.actors``, the GPU holders from
    ``service.placement_snapshot()`` and the injector's process-wide SONAME
    cache at scrape time, served on `host_port`. ``close()`` on the result
    unsubscribes and stops serving.
    """
    metrics = Metrics()
    metrics.track_hosted_actors(lambda: len(service.actors))
    metrics.track_placement(lambda: service.placement_snapshot(), service.placement_policy)
    metrics.track_soname_cache(DEFAULT_SONAME_CACHE)
    metrics.track_progress(progress.running)
    detach = attach_to_daemon(metrics)
    try:
        server = start_metrics_server(host_port, metrics)
    except BaseException:
        detach()
        raise
    server._on_close = detach
    return server
