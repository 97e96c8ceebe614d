"""The front door of the ingress and CONNECT listeners: the connection cap, the
mutual-TLS handshake, and the caller's identity.

Connections are accepted as plain TCP and upgraded here, so each handshake uses
the credential bundle current at that moment (`ReloadingContext`), and a
connection over the cap is closed before any TLS work is spent on it. A
handshake that fails (untrusted CA, no client certificate, a timeout) closes the
connection; one that succeeds with a certificate lacking the router's SPIFFE id
is still served, by a handler that answers 403 naming what was presented.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from ateom.dataplane.counters import Counters
from ateom.dataplane.tls import ReloadingContext, identity_problem

log = structlog.get_logger("ateom.dataplane.gate")


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds every client connection lives within (seconds, bytes, counts)."""

    max_connections: int = 4096       # ingress + CONNECT, together
    handshake_timeout: float = 10.0
    head_timeout: float = 30.0        # to receive a request head -> 408
    idle_timeout: float = 60.0        # keep-alive: between two requests
    max_head_bytes: int = 64 * 1024   # -> 431
    connect_timeout: float = 5.0      # to an actor
    response_timeout: float = 60.0    # for an actor's response head, request sent -> 504


@dataclass(frozen=True, slots=True)
class Admitted:
    """A client connection past the handshake."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    peer_ip: str
    # None when the certificate carries the wanted identity; else why not (one line).
    identity_problem: str | None


Serve = Callable[[Admitted], Awaitable[None]]


class Gate:
    """Turns a `Serve` (what to do with an admitted connection) into an
    `asyncio.start_server` callback that applies the cap, TLS and identity."""

    def __init__(self, context: ReloadingContext, identity: str, limits: Limits,
                 counters: Counters) -> None:
        self.context = context
        self.identity = identity
        self.limits = limits
        self.counters = counters

    def handler(self, serve: Serve, listener: str
                ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if self.counters.connections_open >= self.limits.max_connections:
                self.counters.connections_refused += 1
                writer.transport.abort()
                return
            self.counters.connections_open += 1
            self.counters.connections_total += 1
            try:
                admitted = await self._handshake(reader, writer, listener)
                if admitted is not None:
                    await serve(admitted)
            except asyncio.CancelledError:
                pass  # shutting down; a cancelled stream callback makes 3.11's asyncio log
            except Exception:  # a bug of ours: this connection ends, the process goes on
                log.exception("connection failed", listener=listener)
            finally:
                self.counters.connections_open -= 1
                writer.close()  # TLS close_notify, finished by the loop; never waited on
        return handle

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         listener: str) -> Admitted | None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        try:
            await writer.start_tls(self.context.current(),
                                   ssl_handshake_timeout=self.limits.handshake_timeout)
        except (ssl.SSLError, OSError, TimeoutError) as err:
            self.counters.tls_failed += 1
            log.info("tls handshake failed", listener=listener, peer=peer[0],
                     reason=str(err) or type(err).__name__)
            writer.transport.abort()
            return None
        ssl_object = writer.get_extra_info("ssl_object")
        problem = identity_problem(ssl_object.getpeercert() if ssl_object else None,
                                   self.identity)
        if problem is not None:
            self.counters.identity_rejected += 1
            log.warning("client identity refused", listener=listener, peer=peer[0],
                        reason=problem)
        return Admitted(reader, writer, str(peer[0]), problem)
