"""The ingress: HTTPS from Substrate's router, routed by Host to actors' apps.

Each admitted connection (`gate.Gate`: cap, mutual TLS, identity) is an HTTP/1.1
keep-alive session read by h11. A request's Host names the actor
(``<name>.<atespace>.<rest>``); the request is streamed to the actor over an
`upstream.Upstream` kept for the session while requests name the same actor.

The data plane answers by itself, each time with a one-line text body saying
why: 400 (no usable Host), 403 (wrong SPIFFE id), 404 (no such actor here), 503 +
Retry-After (the actor is not running, or its connection died before it
answered: it was checkpointed, Substrate #1572), 502 (its port refused, or it has
no network here), 504 (no
response head in time), 408 (request head too slow), 431 (head too large).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import h11
import structlog

from ateom.dataplane import wire
from ateom.dataplane.counters import Counters
from ateom.dataplane.gate import Admitted, Limits
from ateom.dataplane.routes import Route, RouteError, RouteTable, no_network, parse_host
from ateom.dataplane.upstream import ConnectFailed, ResponseTimeout, Upstream, forward
from ateom.dataplane.wire import ClientGone, Peer, UpstreamGone

log = structlog.get_logger("ateom.dataplane.ingress")


class Ingress:
    """The ingress listener's `gate.Serve`."""

    def __init__(self, table: RouteTable, limits: Limits, counters: Counters) -> None:
        self.table = table
        self.limits = limits
        self.counters = counters

    async def serve(self, admitted: Admitted) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)
        session = _Session(self, Peer(admitted.reader, admitted.writer, conn, ClientGone),
                           admitted)
        try:
            await session.run()
            if session.unread:
                await session.linger()
        finally:
            session.drop_upstream()


class _Session:
    """One client connection's requests, in turn."""

    def __init__(self, ingress: Ingress, client: Peer, admitted: Admitted) -> None:
        self.table = ingress.table
        self.limits = ingress.limits
        self.counters = ingress.counters
        self.client = client
        self.admitted = admitted
        self.upstream: Upstream | None = None
        self._release: Callable[[], None] | None = None  # the table's hold on the upstream
        self.unread = False  # an answer left request bytes unread: linger before closing

    async def run(self) -> None:
        first = True
        try:
            while (request := await self._read_head(first)) is not None:
                first = False
                if not await self._handle(request):
                    return
                conn = self.client.conn
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return  # Connection: close, or a body left unread: no next request
                conn.start_next_cycle()
        except (ClientGone, h11.LocalProtocolError) as err:
            log.debug("client connection ended", peer=self.admitted.peer_ip, reason=str(err))

    async def _read_head(self, first: bool) -> h11.Request | None:
        """The next request head; None when the client is done (or was answered
        408/400/431 and must go)."""
        try:
            event = self.client.buffered_event()  # a pipelined request may be here
            if event is h11.NEED_DATA and not first:
                try:  # keep-alive: wait for the next request's first bytes
                    async with asyncio.timeout(self.limits.idle_timeout):
                        await self.client.fill()
                except TimeoutError:
                    return None
            async with asyncio.timeout(self.limits.head_timeout):
                while event is h11.NEED_DATA:
                    event = await self.client.next_event()
        except TimeoutError:
            await self._answer(408, "head_timeout", "request head not received within "
                               f"{self.limits.head_timeout:g} s", close=True)
            return None
        except ClientGone as err:
            if err.status_hint == 431:
                await self._answer(431, "head_too_large", "request head larger than "
                                   f"{self.limits.max_head_bytes} bytes", close=True)
            elif err.status_hint:
                await self._answer(err.status_hint, "bad_request", f"bad request: {err}",
                                   close=True)
            return None
        return event if isinstance(event, h11.Request) else None

    async def _handle(self, request: h11.Request) -> bool:
        """Answers one request; False if the connection must close."""
        if self.admitted.identity_problem is not None:
            return await self._answer(403, "forbidden", self.admitted.identity_problem,
                                      close=True)
        host = wire.header(request.headers, b"host") or b""
        try:
            name, atespace = parse_host(host.decode("ascii", "replace"))
        except RouteError as err:
            return await self._answer(400, "bad_request", str(err))
        route = self.table.by_name(name, atespace)
        if route is None:
            return await self._answer(404, "unknown_actor",
                                      f"no actor {name!r} in atespace {atespace!r} here")
        if not route.running:
            return await self._answer(503, "not_running",
                                      f"actor {route.label} is {route.state}", retry=True)
        if route.ip is None:
            return await self._answer(502, "no_network", no_network(route))
        return await self._proxy(request, route)

    async def _proxy(self, request: h11.Request, route: Route) -> bool:
        try:
            up = await self._upstream_for(route)
        except ConnectFailed as err:
            return await self._answer(502, "upstream_failed",
                                      f"actor {route.label} unreachable: {err}", route=route)
        try:
            status = await forward(self.client, request, up, self.admitted.peer_ip,
                                   self.limits.response_timeout, self.limits.idle_timeout)
        except UpstreamGone as err:
            self.drop_upstream()
            now = self.table.by_name(route.name, route.atespace)
            state = now.state if now is not None else "gone"
            log.info("upstream gone", actor=route.label, error=str(err))
            return await self._answer(
                503, "checkpointed", f"actor {route.label} was checkpointed or stopped before "
                f"it answered (state {state}); retry", retry=True, route=route)
        except ResponseTimeout as err:
            self.drop_upstream()
            return await self._answer(504, "upstream_timeout", f"actor {route.label}: {err}",
                                      route=route)
        if status is None:  # the actor died mid-response: all we can do is close
            self.drop_upstream()
            log.info("response cut short", actor=route.label, peer=self.admitted.peer_ip)
            return False
        self.counters.status(status)
        if not up.finish():
            self.drop_upstream()
        return True

    async def _upstream_for(self, route: Route) -> Upstream:
        up = self.upstream
        if up is not None and up.key == (route.uid, route.ip, route.port) and up.reusable():
            return up
        self.drop_upstream()
        up = await Upstream.open(route, self.limits.connect_timeout)
        self.upstream = up
        self._release = self.table.hold(route.uid, up.close)
        self.counters.upstream_opened += 1
        return up

    def drop_upstream(self) -> None:
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None
        if self._release is not None:
            self._release()
            self._release = None

    async def _answer(self, status: int, reason: str, text: str, *, retry: bool = False,
                      close: bool = False, route: Route | None = None) -> bool:
        """Sends the data plane's own response; True if the connection may go on."""
        if self.client.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return False  # a response already started: nothing more can be said
        if not self._request_read():
            close = self.unread = True
        self.counters.answers[reason] += 1
        self.counters.status(status)
        log.info("answered", status=status, reason=reason, detail=text,
                 actor=route.label if route else None, peer=self.admitted.peer_ip)
        await self.client.send(*wire.plain_response(status, text, retry=retry, close=close))
        return not close

    async def linger(self, seconds: float = 2.0, most: int = 1 << 20) -> None:
        """Reads and drops what the client still sends, a moment: closing a socket
        with unread bytes resets it, and the reset can destroy the answer before
        the client has read it (a 431 for a huge head, say)."""
        dropped = 0
        try:
            async with asyncio.timeout(seconds):
                while dropped < most and (data := await self.client.reader.read(wire.CHUNK)):
                    dropped += len(data)
        except (TimeoutError, ConnectionError, OSError):
            pass

    def _request_read(self) -> bool:
        """Consumes the rest of the request body if it is already here; True if the
        whole request has been read (only then can the connection go on)."""
        conn = self.client.conn
        while conn.their_state is h11.SEND_BODY:
            try:
                event = self.client.buffered_event()
            except ClientGone:
                return False
            if not isinstance(event, h11.Data | h11.EndOfMessage):
                return False
        return conn.their_state is h11.DONE
