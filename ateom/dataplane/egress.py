"""The egress relay: actors' outbound TCP, carried to their egress gateway.

nftables REDIRECTs every outbound TCP connection of an actor to this plain TCP
listener. For each one: the peer address names the actor (`RouteTable.by_ip`);
the original destination is read back from conntrack (`original_destination`);
the relay dials the actor's gateway over TLS (our credential bundle as the
client certificate, the gateway checked against the egress trust bundle and its
host name), asks ``CONNECT <dst ip>:<dst port>``, and on 200 splices bytes both
ways. Anything else resets the actor's connection (RST, not a clean close an
actor could take for an empty answer) and logs actor, destination, gateway and
reason: an unknown peer, an actor not running or without a gateway, a gateway
unreachable, failing TLS, refusing, or too slow (connect 5 s, TLS 5 s, answer
10 s).

The actors are untrusted: the relay never connects anywhere but the gateway the
daemon named for that actor, whatever destination the actor asked for.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
import structlog

from ateom.dataplane import wire
from ateom.dataplane.counters import Counters
from ateom.dataplane.routes import RouteTable, split_host_port
from ateom.dataplane.tls import ReloadingContext
from ateom.dataplane.wire import Peer, UpstreamGone
from ateom.errors import AteomError
from ateom.network.redirect import original_destination

# Where a redirected connection was going (replaced in the tests, which have no nft).
OriginalDestination = Callable[[socket.socket], tuple[str, int]]
# Why a destination must not be relayed for an actor ("" when it may be).
Forbidden = Callable[[str], str]

# Never relayed, whatever the gateway would do with them: the gateway would connect to
# them from its own side, so they could only reach the gateway's own services, or come
# back to this worker (its Pod address) and to the node's link-local services.
_NEVER = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32",
    "::/128", "::1/128", "fe80::/10", "ff00::/8"))


def worker_addresses() -> frozenset[str]:
    """Every address of this (the worker's) network namespace's interfaces (netlink)."""
    from pyroute2 import IPRoute  # the data plane's own process: imported where used

    with IPRoute() as ipr:
        return frozenset(str(a.get_attr("IFA_ADDRESS")) for a in ipr.get_addr()
                         if a.get_attr("IFA_ADDRESS"))


def forbidden_for(own: frozenset[str]) -> Forbidden:
    """The relay's destination rule (pure over `own`, the worker's addresses): an actor
    reaches no worker port and no link-local, loopback or multicast address through
    the gateway either."""

    def why(ip: str) -> str:
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return "not an IP address"
        if ip in own:
            return "an address of this worker"
        if any(address in net for net in _NEVER):
            return "a loopback, link-local, multicast or unspecified address"
        return ""

    return why

log = structlog.get_logger("ateom.dataplane.egress")

@dataclass(frozen=True, slots=True)
class EgressLimits:
    max_connections: int = 4096
    connect_timeout: float = 5.0
    tls_timeout: float = 5.0
    answer_timeout: float = 10.0
    max_head_bytes: int = 16 * 1024  # the gateway's answer to CONNECT
    # After an actor's end of stream, how long the gateway may go on answering
    # (TLS cannot pass a half-close on: see wire.splice).
    linger: float = 10.0


class Refused(Exception):
    """Why an actor's connection is reset; `outcome` is its counter's key."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome


class EgressRelay:
    """The egress listener's connection callback (`asyncio.start_server`)."""

    def __init__(self, table: RouteTable, context: ReloadingContext, counters: Counters,
                 limits: EgressLimits = EgressLimits(),
                 destination: OriginalDestination = original_destination,
                 forbidden: Forbidden | None = None) -> None:
        # `worker_addresses` asks netlink synchronously: the caller does, before its
        # event loop runs (`process.main`); none given, nothing of the worker's is known.
        self.forbidden = forbidden or forbidden_for(frozenset())
        self.table = table
        self.context = context
        self.counters = counters
        self.limits = limits
        self.destination = destination

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.counters.egress_open >= self.limits.max_connections:
            self.counters.egress["at_cap"] += 1
            wire.reset(writer)
            return
        self.counters.egress_open += 1
        try:
            await self._relay(reader, writer)
        except asyncio.CancelledError:
            pass  # shutting down (see gate.Gate.handler)
        except Exception:  # a bug of ours: this connection ends, the process goes on
            log.exception("egress connection failed")
        finally:
            self.counters.egress_open -= 1
            if not writer.transport.is_closing():
                writer.transport.abort()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_ip = str((writer.get_extra_info("peername") or ("?",))[0])
        route = self.table.by_ip(peer_ip)
        facts: dict[str, Any] = {"peer": peer_ip, "actor": route.label if route else None,
                                 "gateway": route.egress_gateway if route else None}
        try:
            try:
                dst = self.destination(writer.get_extra_info("socket"))
            except (OSError, AteomError) as err:
                raise Refused("no_destination", f"no original destination: {err}") from None
            facts["destination"] = wire.format_address(*dst)
            if why := self.forbidden(dst[0]):
                raise Refused("forbidden", f"the destination is {why}")
            if route is None:
                raise Refused("unknown_peer", "no actor has this address")
            if not route.running:
                raise Refused("not_running", f"actor is {route.state}")
            if route.egress_gateway is None:
                raise Refused("no_gateway", "actor has no egress gateway")
            g_reader, g_writer, first = await self._dial(route.egress_gateway, dst)
            release = self.table.hold(route.uid, g_writer.transport.abort)
        except Refused as refused:
            self.counters.egress[refused.outcome] += 1
            log.warning("egress reset", outcome=refused.outcome, reason=str(refused), **facts)
            wire.reset(writer)
            return
        self.counters.egress["relayed"] += 1
        log.debug("egress relayed", **facts)
        try:
            await wire.splice((reader, writer), (g_reader, g_writer), server_first=first,
                              linger=self.limits.linger)
        finally:
            release()
            g_writer.transport.abort()

    async def _dial(self, gateway: str, dst: tuple[str, int]
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
        """A TLS connection to `gateway` that has said 200 to CONNECT `dst`, and any
        bytes it sent after its answer; `Refused` if not."""
        host, port = split_host_port(gateway)
        limits = self.limits
        try:
            async with asyncio.timeout(limits.connect_timeout):
                reader, writer = await asyncio.open_connection(host, port, limit=wire.CHUNK)
        except TimeoutError:
            raise Refused("gateway_timeout", f"connect timed out after "
                          f"{limits.connect_timeout:g} s") from None
        except OSError as err:
            raise Refused("gateway_unreachable", err.strerror or str(err)) from None
        try:
            try:
                await writer.start_tls(self.context.current(), server_hostname=host,
                                       ssl_handshake_timeout=limits.tls_timeout)
            except TimeoutError:
                raise Refused("gateway_timeout", f"TLS handshake took over "
                              f"{limits.tls_timeout:g} s") from None
            except (ssl.SSLError, OSError) as err:
                raise Refused("gateway_tls", f"TLS: {err}") from None
            return reader, writer, await self._connect(reader, writer, dst)
        except BaseException:
            writer.transport.abort()
            raise

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       dst: tuple[str, int]) -> bytes:
        """Asks the gateway for `dst`; returns what followed its 200."""
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=self.limits.max_head_bytes)
        peer = Peer(reader, writer, conn, UpstreamGone)
        target = wire.format_address(*dst).encode()
        timeout = self.limits.answer_timeout
        try:
            async with asyncio.timeout(timeout):
                await peer.send(h11.Request(method=b"CONNECT", target=target,
                                            headers=[(b"Host", target)]), h11.EndOfMessage())
                event = await peer.next_event()
                while isinstance(event, h11.InformationalResponse):
                    event = await peer.next_event()
        except TimeoutError:
            raise Refused("gateway_timeout", f"no answer to CONNECT in {timeout:g} s") from None
        except UpstreamGone as err:
            raise Refused("gateway_refused", f"CONNECT: {err}") from None
        if not isinstance(event, h11.Response) or event.status_code != 200:
            status = getattr(event, "status_code", None)
            reason = getattr(event, "reason", b"").decode("latin-1")
            raise Refused("gateway_refused", f"gateway answered CONNECT {status} {reason}")
        return conn.trailing_data[0]
