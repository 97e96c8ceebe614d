"""Where a redirected connection was going: what the egress relay asks of each
connection it accepts.

The firewall redirects an actor's TCP (``redirect to :<egress_port>``) to the
worker; conntrack keeps the destination the actor asked for, and
``getsockopt(SOL_IP, SO_ORIGINAL_DST)`` on the accepted socket returns it as a
``struct sockaddr_in``. The relay must still refuse what it must not reach for
an actor (the worker's own addresses, 169.254.169.254 and the rest of
169.254.0.0/16, other actors): the redirect hands it every TCP destination.
The peer address of that socket is the actor's (its /30 names the actor:
`ActorNetworks.owner`).
"""

from __future__ import annotations

import socket
import struct

from ateom.errors import AteomError, ErrorCode

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h; IP6T_SO_ORIGINAL_DST is the same number
_SOCKADDR_IN = struct.Struct("!2xH4s8x")  # family (host order, skipped), port, address
_SOCKADDR_IN6 = struct.Struct("!2xHI16sI")  # family, port, flowinfo, address, scope


def parse_sockaddr(raw: bytes) -> tuple[str, int]:
    """(host, port) of a ``sockaddr_in`` or ``sockaddr_in6`` as the kernel wrote it (pure)."""
    if len(raw) == _SOCKADDR_IN.size:
        port, addr = _SOCKADDR_IN.unpack(raw)
        return socket.inet_ntop(socket.AF_INET, addr), int(port)
    if len(raw) == _SOCKADDR_IN6.size:
        port, _flow, addr, _scope = _SOCKADDR_IN6.unpack(raw)
        return socket.inet_ntop(socket.AF_INET6, addr), int(port)
    raise ValueError(f"not a sockaddr_in or sockaddr_in6: {len(raw)} bytes")


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """The (host, port) an accepted, redirected TCP connection was addressed to.

    A connection that was not translated gives the address it was sent to (the
    listener's own) when conntrack tracks it; FAILED_PRECONDITION when conntrack
    has no entry for it (ENOENT) or the socket is not connected.
    """
    if sock.family == socket.AF_INET6:
        level, size = socket.IPPROTO_IPV6, _SOCKADDR_IN6.size
    else:
        level, size = socket.SOL_IP, _SOCKADDR_IN.size
    try:
        raw = sock.getsockopt(level, SO_ORIGINAL_DST, size)
    except OSError as exc:
        raise AteomError(f"original destination of the connection from {_peer(sock)}:"
                         f" {exc.strerror or exc} (not a redirected connection?)",
                         code=ErrorCode.FAILED_PRECONDITION) from exc
    return parse_sockaddr(raw)


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "an unconnected socket"
    return f"{host}:{port}"
