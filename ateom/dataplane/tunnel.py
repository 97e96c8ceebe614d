"""CONNECT tunnels: the router's raw TCP to any port of an actor.

On the connect listener (same cap, mutual TLS and identity rule as the ingress,
`gate.Gate`), one request per connection: ``CONNECT <name>.<atespace>.<rest>:<port>
HTTP/1.1``. The authority names the actor by the same rule as a Host header; the
tunnel goes to that actor's own address at the port asked, never anywhere else,
so a CONNECT cannot reach a host the worker can but the actor's route does not
name. 200 and a byte splice, or 400/403/404/503/502 with a one-line reason.

What this does not do: no idle timeout on an open tunnel (long-lived streams
are the point), and no half-close towards the router (TLS has none here; the
actor's end of stream closes the tunnel).
"""

from __future__ import annotations

import asyncio

import h11
import structlog

from ateom.dataplane import wire
from ateom.dataplane.counters import Counters
from ateom.dataplane.gate import Admitted, Limits
from ateom.dataplane.routes import (
    Route,
    RouteError,
    RouteTable,
    no_network,
    parse_host,
    split_host_port,
)
from ateom.dataplane.wire import ClientGone, Peer

log = structlog.get_logger("ateom.dataplane.tunnel")


class Tunnels:
    """The connect listener's `gate.Serve`."""

    def __init__(self, table: RouteTable, limits: Limits, counters: Counters) -> None:
        self.table = table
        self.limits = limits
        self.counters = counters

    async def serve(self, admitted: Admitted) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)
        client = Peer(admitted.reader, admitted.writer, conn, ClientGone)
        try:
            request = await self._read_request(client)
            if request is None:
                return
            target = self._check(request, admitted)
            if isinstance(target, Answer):
                await self._answer(client, target.status, target.outcome, target.text,
                                   target.retry)
            else:
                await self._open(client, admitted, *target)
        except ClientGone as err:
            log.debug("tunnel client gone", peer=admitted.peer_ip, reason=str(err))

    async def _read_request(self, client: Peer) -> h11.Request | None:
        """The CONNECT head, and its end of message (so h11 can switch protocol)."""
        request = None
        try:
            async with asyncio.timeout(self.limits.head_timeout):
                while not isinstance(event := await client.next_event(), h11.EndOfMessage):
                    if isinstance(event, h11.Request):
                        request = event
                    elif not isinstance(event, h11.Data):
                        return None
        except TimeoutError:
            await self._answer(client, 408, "bad_request", "request head too slow")
            return None
        except ClientGone as err:
            if err.status_hint:
                await self._answer(client, err.status_hint, "bad_request", str(err))
            return None
        return request

    def _check(self, request: h11.Request, admitted: Admitted) -> tuple[Route, int] | Answer:
        """The route and port to open, or the answer to give instead."""
        if admitted.identity_problem is not None:
            return Answer(403, "forbidden", admitted.identity_problem)
        if request.method != b"CONNECT":
            return Answer(400, "bad_request", "this listener only takes CONNECT")
        try:
            host, port = split_host_port(request.target.decode("ascii", "replace"))
            name, atespace = parse_host(host)
        except RouteError as err:
            return Answer(400, "bad_request", str(err))
        route = self.table.by_name(name, atespace)
        if route is None:
            return Answer(404, "unknown_actor", f"no actor {name!r} in atespace {atespace!r} here")
        if not route.running:
            return Answer(503, "not_running", f"actor {route.label} is {route.state}", True)
        if route.ip is None:
            return Answer(502, "no_network", no_network(route))
        return route, port

    async def _open(self, client: Peer, admitted: Admitted, route: Route, port: int) -> None:
        if route.ip is None:  # refused by `_check`; None would mean this host's loopback
            return
        try:
            async with asyncio.timeout(self.limits.connect_timeout):
                reader, writer = await asyncio.open_connection(route.ip, port,
                                                               limit=wire.CHUNK)
        except (OSError, TimeoutError) as err:
            reason = getattr(err, "strerror", None) or str(err) or "timed out"
            await self._answer(client, 502, "upstream_failed",
                               f"actor {route.label} port {port} unreachable: {reason}")
            return
        release = self.table.hold(route.uid, writer.transport.abort)
        try:
            await client.send(h11.Response(status_code=200, headers=[]))
            self.counters.status(200)
            self.counters.tunnels["spliced"] += 1
            log.debug("tunnel open", actor=route.label, port=port, peer=admitted.peer_ip)
            first, _ = client.conn.trailing_data
            await wire.splice((admitted.reader, admitted.writer), (reader, writer),
                              client_first=first)
        finally:
            release()
            writer.transport.abort()

    async def _answer(self, client: Peer, status: int, outcome: str, text: str,
                      retry: bool = False) -> None:
        self.counters.tunnels[outcome] += 1
        self.counters.status(status)
        log.info("tunnel refused", status=status, reason=outcome, detail=text)
        if client.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            await client.send(*wire.plain_response(status, text, retry=retry, close=True))


class Answer:
    """A refusal `Tunnels._check` decided on."""

    def __init__(self, status: int, outcome: str, text: str, retry: bool = False) -> None:
        self.status, self.outcome, self.text, self.retry = status, outcome, text, retry
