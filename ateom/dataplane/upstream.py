"""One request through to an actor and its response back, streamed both ways.

An `Upstream` is a plain TCP connection from the worker's namespace to an actor's
app, driven by an h11 client; the ingress keeps one per client connection and
reuses it while requests name the same actor. `forward` sends the request head,
streams the request body (concurrently with waiting for the answer: an actor may
answer before it has read the whole body), then streams the response. Memory
per request is a chunk or two (`wire.CHUNK`), whatever the body sizes.

What can go wrong is raised for the ingress to answer: `ConnectFailed` (502),
`UpstreamGone` before the response head (503: the actor was checkpointed or
died mid-request), `ResponseTimeout` (504). Once the head has gone to the client
the only thing left to do about a dying actor is to close the client's
connection, which `forward` says by returning False.
"""

from __future__ import annotations

import asyncio

import h11

from ateom.dataplane import wire
from ateom.dataplane.routes import Route, no_network
from ateom.dataplane.wire import ClientGone, Peer, UpstreamGone


class ConnectFailed(Exception):
    """The actor's port could not be reached (refused, unreachable, timed out)."""


class ResponseTimeout(Exception):
    """The actor took the request and gave no response head in time."""


class Upstream:
    """A keep-alive HTTP/1.1 connection to one actor's address."""

    def __init__(self, key: tuple[str, str, int], peer: Peer) -> None:
        self.key = key
        self.peer = peer

    @classmethod
    async def open(cls, route: Route, timeout: float) -> Upstream:
        if route.ip is None:  # refused before; None would mean this host's loopback
            raise ConnectFailed(no_network(route))
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(route.ip, route.port,
                                                               limit=wire.CHUNK)
        except TimeoutError:
            raise ConnectFailed(f"connect to {route.ip}:{route.port} timed out after "
                                f"{timeout:g} s") from None
        except OSError as err:
            raise ConnectFailed(f"connect to {route.ip}:{route.port}: "
                                f"{err.strerror or err}") from None
        conn = h11.Connection(h11.CLIENT)
        return cls((route.uid, route.ip, route.port), Peer(reader, writer, conn, UpstreamGone))

    def reusable(self) -> bool:
        """Idle, and not closed by the actor while it was (keep-alive timeouts)."""
        conn = self.peer.conn
        return (conn.our_state is h11.IDLE and conn.their_state is h11.IDLE
                and not self.peer.reader.at_eof() and not self.peer.writer.is_closing())

    def finish(self) -> bool:
        """After a complete exchange: ready for the next request, or False."""
        conn = self.peer.conn
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            return True
        return False

    def close(self) -> None:
        self.peer.abort()


def request_headers(request: h11.Request, peer_ip: str) -> wire.Headers:
    """What the actor sees: the end-to-end headers, the caller's address appended
    to X-Forwarded-For, and X-Forwarded-Proto: https."""
    dropped = {b"x-forwarded-for", b"x-forwarded-proto"}
    if wire.header(request.headers, b"transfer-encoding") is not None:
        # h11 framed the body by Transfer-Encoding; a Content-Length passed on too
        # would let an actor's server frame it otherwise (request smuggling).
        dropped.add(b"content-length")
    headers = [(n, v) for n, v in wire.end_to_end(request.headers.raw_items())
               if n.lower() not in dropped]
    prior = [v for n, v in request.headers if n == b"x-forwarded-for"]
    headers.append((b"X-Forwarded-For", b", ".join([*prior, peer_ip.encode()])))
    headers.append((b"X-Forwarded-Proto", b"https"))
    return headers


async def forward(client: Peer, request: h11.Request, up: Upstream, peer_ip: str,
                  response_timeout: float, idle_timeout: float) -> int | None:
    """Sends `request` (head from the caller, body still to read from `client`)
    to `up` and streams the answer back. Returns the status sent to the client,
    or None when the response could not be completed (close the client)."""
    head_out = h11.Request(method=request.method, target=request.target,
                           headers=request_headers(request, peer_ip))
    body = None
    if not await _pump_buffered(client, up.peer, head_out):
        body = asyncio.create_task(_pump_body(client, up.peer, idle_timeout))
    try:
        head = await _response_head(client, up.peer, request, body, response_timeout)
        response = h11.Response(status_code=head.status_code, reason=head.reason,
                                headers=wire.end_to_end(head.headers.raw_items()))
        return head.status_code if await _pump_response(up.peer, client, response) else None
    finally:
        if body is not None:
            body.cancel()
            await asyncio.wait({body})
            if not body.cancelled():
                body.exception()  # retrieved: a client gone mid-body is no news here


async def _pump_buffered(client: Peer, up: Peer, head: h11.Request) -> bool:
    """Sends the request head with as much of the body as is already received, in
    one write; True if that was all of it (a request without a body, the common
    case, needs no task of its own)."""
    events: list[h11.Event] = [head]
    while True:
        event = client.buffered_event()
        if isinstance(event, h11.Data):
            events.append(h11.Data(data=event.data))
        elif isinstance(event, h11.EndOfMessage):
            await up.send(*events, h11.EndOfMessage())
            return True
        elif event is h11.NEED_DATA:
            await up.send(*events)
            return False
        else:
            raise ClientGone(f"unexpected {event!r} in a request body")


async def _pump_body(client: Peer, up: Peer, idle_timeout: float) -> None:
    while True:
        try:
            async with asyncio.timeout(idle_timeout):
                event = await client.next_event()
        except TimeoutError:
            raise ClientGone(f"request body stalled for {idle_timeout:g} s") from None
        if isinstance(event, h11.Data):
            await up.send(h11.Data(data=event.data))
        elif isinstance(event, h11.EndOfMessage):
            await up.send(h11.EndOfMessage())  # trailers dropped: Trailer is hop-by-hop
            return
        else:
            raise ClientGone(f"unexpected {event!r} in a request body")


async def _response_head(client: Peer, up: Peer, request: h11.Request,
                         body: asyncio.Task[None] | None, timeout: float) -> h11.Response:
    """The actor's response head, 1xx ones passed on first. The timeout starts
    once the request body has been sent (an upload may take long)."""
    try:
        if body is None:  # the common case: no task to start
            async with asyncio.timeout(timeout):
                return await _next_head(client, up, request)
        head = asyncio.ensure_future(_next_head(client, up, request))
        try:
            await asyncio.wait({head, body}, return_when=asyncio.FIRST_COMPLETED)
            failure = body.exception() if body.done() else None
            if not head.done() and isinstance(failure, ClientGone):
                raise failure
            # An actor failing to take the body may still answer: wait for the head.
            async with asyncio.timeout(timeout):
                return await head
        finally:
            head.cancel()
    except TimeoutError:
        raise ResponseTimeout(f"no response head within {timeout:g} s") from None


async def _next_head(client: Peer, up: Peer, request: h11.Request) -> h11.Response:
    while True:
        event = await up.next_event()
        if isinstance(event, h11.Response):
            return event
        if not isinstance(event, h11.InformationalResponse):
            raise UpstreamGone("the actor closed the connection before answering")
        if event.status_code != 101 and request.http_version == b"1.1":
            await client.send(h11.InformationalResponse(
                status_code=event.status_code, headers=wire.end_to_end(event.headers.raw_items())))


async def _pump_response(up: Peer, client: Peer, head: h11.Response) -> bool:
    """Sends the response head and streams the body; False if the actor died
    before its end. What is already received goes out in one write (a small
    answer: head, body and end together), never more than a chunk at a time."""
    events: list[h11.Event] = [head]
    size = 0
    while True:
        try:
            event = up.buffered_event()
            if event is h11.NEED_DATA:
                await client.send(*events)
                events, size = [], 0
                await up.fill()
                continue
        except UpstreamGone:
            await client.send(*events)
            return False
        if isinstance(event, h11.Data):
            events.append(h11.Data(data=event.data))
            size += len(event.data)
            if size >= wire.CHUNK:
                await client.send(*events)
                events, size = [], 0
        elif isinstance(event, h11.EndOfMessage):
            await client.send(*events, h11.EndOfMessage())
            return True
        else:
            await client.send(*events)
            return False
