"""The data plane's table of actors: who is where, and in what state (pure).

The daemon tells the data plane about every actor it hosts as a `Route`; the
ingress and CONNECT listeners look an actor up by the Host a request names
(``<actor_name>.<atespace>.<rest>``), the egress relay by the address an actor's
connection comes from. Nothing here does I/O: the table is plain dicts, updated
by the control stream (`ateom.dataplane.control`) and read by the listeners, all
on one event loop, so no locking.

The table also holds, per actor, how to cut the connections the listeners have
open to it (`RouteTable.hold`): when an actor stops running (checkpointed,
terminated, forgotten) or moves, they are cut at once, so a request in flight
is answered 503 the moment the daemon says so instead of waiting on an address
that no longer answers (its veth is gone: no RST ever comes).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RUNNING = "running"
# Every state the daemon reports. Only a running actor is served; the others get
# 503 + Retry-After (ingress, CONNECT) or a reset (egress).
STATES = frozenset({RUNNING, "booting", "restoring", "checkpointing", "releasing",
                    "terminating", "exited"})

# A DNS label as Kubernetes names actors and atespaces (RFC 1123), lowercased.
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_FIELDS = ("uid", "atespace", "name", "ip", "port", "state", "egress_gateway")


class RouteError(ValueError):
    """A route, a Host or a gateway address that is not well formed; str() says why."""


@dataclass(frozen=True, slots=True)
class Route:
    """One actor as the data plane serves it."""

    uid: str
    atespace: str
    name: str
    ip: str | None  # None: it has no network here (its runsc runs it --network=none)
    port: int = 80
    state: str = RUNNING
    # "host:port" of the egress gateway its outbound TCP goes to; None: no egress.
    egress_gateway: str | None = None

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    @property
    def label(self) -> str:
        """How logs and answers name the actor: ``<atespace>/<name>``."""
        return f"{self.atespace}/{self.name}"

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Route:
        """Checks every field of a control message's route (`RouteError` if any is
        wrong) and returns it with its names lowercased and its ip normalised."""
        unknown = sorted(set(obj) - set(_FIELDS))
        if unknown:
            raise RouteError(f"unknown route fields {unknown}")
        uid = obj.get("uid")
        if not isinstance(uid, str) or not uid or len(uid) > 256:
            raise RouteError("uid must be a non-empty string")
        names = {k: obj.get(k) for k in ("atespace", "name")}
        for key, value in names.items():
            if not isinstance(value, str) or not _LABEL.match(value.lower()):
                raise RouteError(f"{key} {value!r} is not a DNS label")
        if "ip" not in obj:
            raise RouteError("ip is required (null: the actor has no network)")
        try:
            ip = None if obj["ip"] is None else _normal_ip(obj["ip"])
        except ValueError:
            raise RouteError(f"ip {obj.get('ip')!r} is not an IP address or null") from None
        port = obj.get("port", 80)
        if type(port) is not int or not 0 < port < 65536:
            raise RouteError(f"port {port!r} is not a TCP port")
        state = obj.get("state", RUNNING)
        if state not in STATES:
            raise RouteError(f"state {state!r} is not one of {sorted(STATES)}")
        gateway = obj.get("egress_gateway")
        if gateway is not None:
            if not isinstance(gateway, str):
                raise RouteError("egress_gateway must be a string or null")
            split_host_port(gateway)
        return cls(uid, str(names["atespace"]).lower(), str(names["name"]).lower(), ip,
                   port, state, gateway)


def no_network(route: Route) -> str:
    """Why an actor that runs cannot be reached: the one line the router is told."""
    return (f"actor {route.label} has no network on this worker (its runsc runs it with"
            " --network=none)")


def _normal_ip(value: object) -> str:
    """An address as the table keeps it; an IPv4-mapped IPv6 one (a peer on a
    dual-stack socket) as IPv4. ValueError if it is none."""
    if not isinstance(value, str):
        raise ValueError(value)
    addr = ipaddress.ip_address(value)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def split_host_port(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); `RouteError` if either is
    missing or the port is not one."""
    host, sep, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RouteError(f"{address!r} is not host:port")
    return host, int(port)


def parse_address(text: str) -> tuple[str | None, int]:
    """``:443``, ``0.0.0.0:15001``, ``[::]:443`` -> (host, port); host None means
    every address, IPv4 and IPv6, as Go (Substrate's controller) reads ``:443``
    and ``[::]:443`` (asyncio would make ``::`` IPv6-only)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not [host]:port")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return (None if host in ("", "::") else host), int(port)


def parse_host(host: str) -> tuple[str, str]:
    """A Host header's (actor name, atespace): ``<name>.<atespace>[.<rest>][:port]``,
    case-insensitive. `RouteError` (a bad request) for fewer than two labels, an
    empty label or an IP literal."""
    host = host.strip().lower()
    if host.startswith("["):
        raise RouteError(f"Host {host!r} is an IP literal, not <actor>.<atespace>")
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit():
        host = name
    host = host.removesuffix(".")
    labels = host.split(".")
    if len(labels) < 2 or not labels[0] or not labels[1]:
        raise RouteError(f"Host {host!r} does not name <actor>.<atespace>")
    return labels[0], labels[1]


@dataclass(slots=True)
class RouteTable:
    """Routes by uid, with indexes by (atespace, name) and by ip.

    An index entry names a uid; when two routes claim the same name or ip (an actor
    re-created before the old one is forgotten), the latest upsert wins, and
    forgetting the older one leaves the newer one's entries alone.
    """

    by_uid: dict[str, Route] = field(default_factory=dict)
    _by_name: dict[tuple[str, str], str] = field(default_factory=dict)
    _by_ip: dict[str, str] = field(default_factory=dict)
    _cuts: dict[str, dict[int, Callable[[], None]]] = field(default_factory=dict)
    _next_hold: int = 0

    def upsert(self, route: Route) -> None:
        old = self.by_uid.get(route.uid)
        if old is not None and ((old.ip, old.port) != (route.ip, route.port)
                                or (old.running and not route.running)):
            self._cut(route.uid)
        self._unindex(route.uid)
        self.by_uid[route.uid] = route
        self._by_name[(route.atespace, route.name)] = route.uid
        if route.ip is not None:
            self._by_ip[route.ip] = route.uid

    def forget(self, uid: str) -> Route | None:
        self._cut(uid)
        return self._unindex(uid)

    def hold(self, uid: str, cut: Callable[[], None]) -> Callable[[], None]:
        """Registers a connection open to actor `uid`: `cut` is called (once) when
        the actor stops running or is forgotten. Returns the release to call when
        the connection ends by itself. An actor that stopped while the connection
        was being opened has it cut at once."""
        route = self.by_uid.get(uid)
        if route is None or not route.running:
            cut()
            return lambda: None
        self._next_hold += 1
        key = self._next_hold
        self._cuts.setdefault(uid, {})[key] = cut

        def release() -> None:
            held = self._cuts.get(uid)
            if held is not None:
                held.pop(key, None)
                if not held:
                    del self._cuts[uid]
        return release

    def held(self, uid: str) -> int:
        """How many connections to actor `uid` are open."""
        return len(self._cuts.get(uid, ()))

    def _cut(self, uid: str) -> None:
        for cut in self._cuts.pop(uid, {}).values():
            cut()

    def _unindex(self, uid: str) -> Route | None:
        old = self.by_uid.pop(uid, None)
        if old is not None:
            if self._by_name.get((old.atespace, old.name)) == uid:
                del self._by_name[(old.atespace, old.name)]
            if old.ip is not None and self._by_ip.get(old.ip) == uid:
                del self._by_ip[old.ip]
        return old

    def by_name(self, name: str, atespace: str) -> Route | None:
        uid = self._by_name.get((atespace, name))
        return self.by_uid.get(uid) if uid is not None else None

    def by_host(self, host: str) -> Route | None:
        """The route a Host header names (`parse_host`; `RouteError` if malformed)."""
        name, atespace = parse_host(host)
        return self.by_name(name, atespace)

    def by_ip(self, ip: str) -> Route | None:
        """The route whose actor has this address (as a peer's address reads)."""
        try:
            uid = self._by_ip.get(_normal_ip(ip))
        except ValueError:
            return None
        return self.by_uid.get(uid) if uid is not None else None

    def __len__(self) -> int:
        return len(self.by_uid)
