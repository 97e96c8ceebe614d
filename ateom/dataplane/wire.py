"""Bytes on the wire: h11 over asyncio streams, byte splices, resets, hop-by-hop.

`Peer` drives one h11 state machine (server side towards a client, client side
towards an actor or a gateway) over an asyncio stream, so HTTP framing is never
parsed by hand. Reads are `CHUNK` bytes at most and every write is drained
before the next read, so a connection holds at most a chunk or two whatever the
size of the body going through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from collections.abc import Iterable, Sequence

import h11

CHUNK = 64 * 1024
Headers = list[tuple[bytes, bytes]]

# RFC 9110 7.6.1's connection-specific fields, plus the proxy ones. Framing
# (Content-Length, Transfer-Encoding) is h11's to redo on each side.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
                        b"upgrade", b"proxy-authorization", b"proxy-authenticate"})


class PeerGone(Exception):
    """The peer closed, reset, timed out or broke HTTP; `status_hint` is the status
    that suits a protocol error (h11's: 400, 431), 0 when it simply went away."""

    def __init__(self, reason: str, status_hint: int = 0) -> None:
        super().__init__(reason)
        self.status_hint = status_hint


class ClientGone(PeerGone):
    """The ingress client is gone."""


class UpstreamGone(PeerGone):
    """The actor's (or the gateway's) end is gone."""


class Peer:
    """One h11 connection over an asyncio stream; errors become `gone`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 conn: h11.Connection, gone: type[PeerGone]) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = conn
        self.gone = gone

    def buffered_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        """The next event from what is already received, without reading."""
        try:
            return self.conn.next_event()
        except h11.RemoteProtocolError as err:
            raise self.gone(str(err), err.error_status_hint) from None

    async def fill(self) -> None:
        """Reads once (at most `CHUNK`) into h11; EOF is given to h11 as such."""
        try:
            data = await self.reader.read(CHUNK)
        except (ConnectionError, ssl.SSLError, OSError) as err:
            raise self.gone(f"read failed: {err}") from None
        self.conn.receive_data(data)

    async def next_event(self) -> h11.Event:
        """The next event, reading as needed (PAUSED counts as gone: the caller
        asked for an event h11 will not give before a new cycle)."""
        while True:
            event = self.buffered_event()
            if event is h11.NEED_DATA:
                await self.fill()
            elif event is h11.PAUSED:
                raise self.gone("paused")
            else:
                assert isinstance(event, h11.Event)
                return event

    async def send(self, *events: h11.Event) -> None:
        """Sends `events` in one write, then waits until the transport's buffer is
        below its high-water mark (backpressure: the peer's pace, not ours)."""
        if not events:
            return
        try:
            data = b"".join(self.conn.send(e) or b"" for e in events)
            self.writer.write(data)
            await self.writer.drain()
        except (ConnectionError, ssl.SSLError, OSError) as err:
            raise self.gone(f"write failed: {err}") from None

    def abort(self) -> None:
        self.writer.transport.abort()


def reset(writer: asyncio.StreamWriter) -> None:
    """Closes with a TCP RST (SO_LINGER {1, 0}): the peer sees ECONNRESET, not a
    clean end it could take for a complete answer."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def end_to_end(headers: Iterable[tuple[bytes, bytes]]) -> Headers:
    """The headers without hop-by-hop ones, nor those the Connection header names."""
    items = list(headers)
    named = {token.strip().lower() for name, value in items if name.lower() == b"connection"
             for token in value.split(b",")}
    return [(n, v) for n, v in items if n.lower() not in HOP_BY_HOP and n.lower() not in named]


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                first: bytes, close_on_eof: bool) -> None:
    data = first or await reader.read(CHUNK)
    while data:
        writer.write(data)
        await writer.drain()
        data = await reader.read(CHUNK)
    if writer.can_write_eof():
        writer.write_eof()  # TCP half-close: the other direction goes on
    elif close_on_eof:
        writer.close()


async def splice(client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 client_first: bytes = b"", server_first: bytes = b"",
                 linger: float = 10.0) -> None:
    """Copies bytes both ways until both directions end or one fails.

    An end of stream is passed on as a TCP half-close where the other side is TCP.
    TLS has no half-close here: the server's end closes a TLS client, and a
    client's end cannot be told to a TLS server, which then gets `linger` seconds
    to finish its answer (a client that only half-closed still gets it; one that
    closed for good does not hold the server's connection open for long).
    `*_first` are bytes already read from that side.
    """
    up = asyncio.create_task(_pump(client[0], server[1], client_first, False))
    down = asyncio.create_task(_pump(server[0], client[1], server_first, True))
    try:
        await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        if (up.done() and not down.done() and up.exception() is None
                and not server[1].can_write_eof()):
            await asyncio.wait({down}, timeout=linger)
        else:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in (up, down):
            task.cancel()
        failed = _failed(up, down)
        for _, writer in (client, server):
            writer.transport.abort() if failed else writer.close()


def _failed(*tasks: asyncio.Task[None]) -> bool:
    """Whether any task ended in an error (every one's error retrieved)."""
    errors = [t.exception() for t in tasks if t.done() and not t.cancelled()]
    return any(e is not None for e in errors)


def format_address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of header `name` (lowercase), if any."""
    return next((v for n, v in headers if n.lower() == name), None)


def plain_response(status: int, text: str, *, retry: bool = False, close: bool = False
                   ) -> tuple[h11.Response, h11.Data, h11.EndOfMessage]:
    """The data plane's own answer: `text` as a one-line text/plain body."""
    body = (text.replace("\r", " ").replace("\n", " ") + "\n").encode()
    headers = [(b"Content-Type", b"text/plain; charset=utf-8"),
               (b"Content-Length", str(len(body)).encode())]
    if retry:
        headers.append((b"Retry-After", b"1"))
    if close:
        headers.append((b"Connection", b"close"))
    return h11.Response(status_code=status, headers=headers), h11.Data(data=body), \
        h11.EndOfMessage()
