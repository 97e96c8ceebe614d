"""The data plane process: flags, listeners, the control stream, and exit.

``python -m ateom.dataplane --control-fd N [--ingress ADDR --credential-bundle P
--trust-bundle P --client-identity ID] [--connect ADDR] [--egress ADDR
--egress-trust-bundle P]``. It runs apart from the daemon's gRPC process so a
flood of requests never shares a GIL or a thread pool with the node agent's
API: one asyncio loop, one thread. Listeners are bound before the control
stream is read, so the daemon's first pong also says they are up; a line
``{"event": "dataplane ready", ...}`` on stdout names the bound addresses.

Exit status: 0 when the control stream ends (the daemon went away) or on
SIGTERM/SIGINT; 1 when a listener cannot be bound or a bundle cannot be read
(one JSON line naming the flag and the reason); 2 for a usage error (likewise).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import NoReturn

import structlog

from ateom.dataplane.control import Control, serve_control
from ateom.dataplane.counters import Counters
from ateom.dataplane.egress import (
    EgressLimits,
    EgressRelay,
    Forbidden,
    OriginalDestination,
    forbidden_for,
    worker_addresses,
)
from ateom.dataplane.gate import Gate, Limits
from ateom.dataplane.ingress import Ingress
from ateom.dataplane.routes import RouteTable, parse_address
from ateom.dataplane.tls import (
    DEFAULT_CLIENT_IDENTITY,
    ReloadingContext,
    client_context,
    server_context,
)
from ateom.dataplane.tunnel import Tunnels
from ateom.network.redirect import original_destination as default_destination

log = structlog.get_logger("ateom.dataplane")
_LIMITS = Limits()
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Fatal(Exception):
    """Ends the process with one JSON line: `fields` name the flag and the reason."""

    def __init__(self, status: int, event: str, **fields: str) -> None:
        super().__init__(event)
        self.status, self.event, self.fields = status, event, fields


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Fatal(2, "usage error", reason=message)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = _Parser(prog="python -m ateom.dataplane", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--control-fd", type=int, required=True,
                   help="a stream socket: the daemon's control lines in, answers out")
    p.add_argument("--ingress", help="HTTPS listen address, e.g. :443")
    p.add_argument("--connect", help="CONNECT-tunnel listen address, e.g. :8443")
    p.add_argument("--egress", help="egress relay listen address, e.g. 0.0.0.0:15001")
    p.add_argument("--credential-bundle", help="PEM: our key and certificate chain")
    p.add_argument("--trust-bundle", help="PEM: CAs an ingress client must chain to")
    p.add_argument("--client-identity", default=DEFAULT_CLIENT_IDENTITY,
                   help="SPIFFE id (URI SAN) the router's certificate must carry")
    p.add_argument("--egress-trust-bundle", help="PEM: CAs the egress gateway chains to")
    p.add_argument("--max-connections", type=int, default=_LIMITS.max_connections)
    p.add_argument("--max-egress-connections", type=int,
                   default=EgressLimits().max_connections)
    p.add_argument("--max-head-bytes", type=int, default=_LIMITS.max_head_bytes)
    for name in ("handshake", "head", "idle", "connect", "response"):
        p.add_argument(f"--{name}-timeout", type=float,
                       default=getattr(_LIMITS, f"{name}_timeout"))
    p.add_argument("--egress-linger", type=float, default=EgressLimits().linger,
                   help="seconds a gateway may answer after the actor's end of stream")
    p.add_argument("--tls-reload-interval", type=float, default=2.0)
    p.add_argument("--log-level", default="info")
    options = p.parse_args(argv)
    needs = {"--credential-bundle": options.credential_bundle}
    if options.ingress or options.connect:
        needs |= {"--trust-bundle": options.trust_bundle}
    if options.egress:
        needs |= {"--egress-trust-bundle": options.egress_trust_bundle}
    missing = [flag for flag, value in needs.items() if not value]
    if missing and (options.ingress or options.connect or options.egress):
        p.error(f"{', '.join(missing)} required with the listeners given")
    return options


class _ToStructlog(logging.Handler):
    """The standard library's records (asyncio's own complaints) as JSON lines too."""

    def emit(self, record: logging.LogRecord) -> None:
        structlog.get_logger(record.name).log(record.levelno, record.getMessage(),
                                              exc_info=record.exc_info)


def configure_logging(level: str) -> None:
    """JSON lines on stdout, as the daemon's (`ateom.daemon.logs`, not imported:
    the data plane sits below the daemon)."""
    logging.basicConfig(level=logging.WARNING, handlers=[_ToStructlog()], force=True)
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.format_exc_info, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=False)


async def _bind(flag: str, address: str, handler: Handler) -> asyncio.Server:
    try:
        host, port = parse_address(address)
        return await asyncio.start_server(handler, host, port, limit=64 * 1024, backlog=1024)
    except (OSError, ValueError) as err:
        reason = str(err)
        if isinstance(err, PermissionError):
            # The one bind failure an operator fixes in the manifest, not here: a port
            # below net.ipv4.ip_unprivileged_port_start (1024 unless the runtime lowers it)
            # needs CAP_NET_BIND_SERVICE, which "drop: [ALL]" took away.
            reason += ("; a port below 1024 needs the capability NET_BIND_SERVICE (or the "
                       "Pod's sysctl net.ipv4.ip_unprivileged_port_start at or below it)")
        raise Fatal(1, "bind failed", flag=flag, address=address, reason=reason) from None


def _context(flag: str, name: str, make: Callable[[], ssl.SSLContext], paths: list[str],
             counters: Counters, interval: float) -> ReloadingContext:
    try:
        return ReloadingContext(name, make, paths, counters, interval)
    except (OSError, ssl.SSLError, ValueError) as err:
        raise Fatal(1, "tls bundle unreadable", flag=flag, reason=str(err)) from None


async def _listen(o: argparse.Namespace, table: RouteTable, counters: Counters,
                  destination: OriginalDestination, forbidden: Forbidden | None
                  ) -> dict[str, asyncio.Server]:
    limits = Limits(o.max_connections, o.handshake_timeout, o.head_timeout, o.idle_timeout,
                    o.max_head_bytes, o.connect_timeout, o.response_timeout)
    servers: dict[str, asyncio.Server] = {}
    if o.ingress or o.connect:
        context = _context("--credential-bundle/--trust-bundle", "server", functools.partial(
            server_context, o.credential_bundle, o.trust_bundle),
            [o.credential_bundle, o.trust_bundle], counters, o.tls_reload_interval)
        gate = Gate(context, o.client_identity, limits, counters)
        if o.ingress:
            serve = Ingress(table, limits, counters).serve
            servers["ingress"] = await _bind("--ingress", o.ingress, gate.handler(serve, "ingress"))
        if o.connect:
            serve = Tunnels(table, limits, counters).serve
            servers["connect"] = await _bind("--connect", o.connect, gate.handler(serve, "connect"))
    if o.egress:
        context = _context("--credential-bundle/--egress-trust-bundle", "egress",
                           functools.partial(client_context, o.credential_bundle,
                                             o.egress_trust_bundle),
                           [o.credential_bundle, o.egress_trust_bundle], counters,
                           o.tls_reload_interval)
        relay = EgressRelay(table, context, counters, EgressLimits(
            max_connections=o.max_egress_connections, linger=o.egress_linger), destination,
            forbidden)
        servers["egress"] = await _bind("--egress", o.egress, relay.handle)
    return servers


async def run(options: argparse.Namespace,
              destination: OriginalDestination = default_destination,
              forbidden: Forbidden | None = None) -> int:
    """Serves until the control stream ends or a signal comes; `destination` reads
    an egress connection's original destination and `forbidden` judges it (tests
    give their own: their servers are on loopback)."""
    table, counters = RouteTable(), Counters()
    try:
        sock = socket.socket(fileno=options.control_fd)
    except OSError as err:
        raise Fatal(2, "usage error", flag="--control-fd", reason=str(err)) from None
    servers = await _listen(options, table, counters, destination, forbidden)
    reader, writer = await asyncio.open_connection(sock=sock, limit=64 * 1024)
    log.info("dataplane ready", **{name: _bound(server) for name, server in servers.items()})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    control = asyncio.create_task(serve_control(reader, writer, Control(table, counters)))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({control, stopped}, return_when=asyncio.FIRST_COMPLETED)
    for server in servers.values():
        server.close()
    log.info("dataplane stopping", reason="signal" if stop.is_set() else "control stream closed")
    control.cancel()
    stopped.cancel()
    writer.close()
    return 0


def _bound(server: asyncio.Server) -> list[str]:
    names = [s.getsockname() for s in server.sockets]
    return [f"[{n[0]}]:{n[1]}" if ":" in n[0] else f"{n[0]}:{n[1]}" for n in names]


def main(argv: Sequence[str] | None = None,
         destination: OriginalDestination = default_destination,
         forbidden: Forbidden | None = None) -> int:
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
        configure_logging(options.log_level)
        if forbidden is None and options.egress:
            # Before the loop: pyroute2's synchronous netlink runs a loop of its own.
            forbidden = forbidden_for(worker_addresses())
        return asyncio.run(run(options, destination, forbidden))
    except Fatal as fatal:
        line = {"event": fatal.event, "level": "error", **fatal.fields,
                "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
        print(json.dumps(line), flush=True)
        return fatal.status
