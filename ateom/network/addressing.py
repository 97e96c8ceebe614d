"""The address plan: names, one link-local /30 per actor, and `ActorNet` (pure).

Each actor gets a veth pair and a network namespace, both named after the
index k of its /30 (not after the actor): a network can then be made before
its actor is known (`ateom.network.warm` keeps a few ready) and handed to
whichever actor comes next. The worker side, in the daemon's (the Pod's)
namespace, is ``ate`` + k as 12 decimal digits (15 characters, Linux's
IFNAMSIZ limit); every link named ``ate*`` is an actor's to the firewall
(`ateom.network.firewall`), and a fresh daemon sweeps every leftover of the
shape ``ate`` + 12 hex digits. The actor side is ``eth0`` in the actor's own
namespace, bind-mounted at ``<run_dir>/netns/net-<k>`` (ateom's run dir, never
/run/netns: `ip netns` names must not collide with ours, and the next daemon
sweeps that directory).

Addresses: a distinct /30 per actor, out of 169.254.0.0/16 (link-local, never
routed beyond a link, so nothing an actor is given can shadow a real
destination of the worker). Subnet k is 169.254.(k>>6).((k&63)<<2)/30 for k in
1..16383; the worker side is its .1, the actor side its .2, and the actor's
default route goes via the worker side. Why distinct and not the same
169.254.17.2 everywhere: the worker tells actors apart by address (the
ingress proxy connects to an actor's address; the egress relay knows the
actor from the peer address of a redirected connection, `ActorNetworks.owner`),
and the worker's own routing table never holds the same prefix on two
interfaces, which would make the route to an actor depend on interface order.
k=0 is never used, nor any /30 that overlaps a reserved range: the cloud
metadata address 169.254.169.254 always, and by default the other link-local
addresses that clusters use from inside a Pod (`DEFAULT_RESERVED`: the
Calico / AWS VPC CNI Pod gateway, NodeLocal DNSCache, cloud DNS, NTP and
credential endpoints). A /30 holding one of those would turn the worker's own
traffic to it towards an actor. `ActorNetworks.start` adds whatever the worker's
namespace already routes in 169.254.0.0/16.

`SubnetPool` hands out the lowest free k (thread-safe). Addresses are strings
(what sockets take); `ActorNet.network` is the /30.
"""

from __future__ import annotations

import dataclasses
import heapq
import ipaddress
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from ateom.errors import AteomError, ErrorCode, quote

HOST_IF_PREFIX = "ate"
ACTOR_IF = "eth0"
PREFIX_LEN = 30
NETNS_DIR = "netns"
LINK_LOCAL = ipaddress.IPv4Network("169.254.0.0/16")
METADATA = ipaddress.IPv4Network("169.254.169.254/32")
MAX_INDEX = 16383
DEFAULT_RESERVED: tuple[ipaddress.IPv4Network, ...] = tuple(
    ipaddress.IPv4Network(n) for n in (
        "169.254.1.1/32",     # Calico's and the AWS VPC CNI's Pod default gateway
        "169.254.20.10/32",   # NodeLocal DNSCache
        "169.254.25.10/32",   # kubespray's nodelocaldns
        "169.254.169.0/24",   # metadata (.254), AWS DNS (.253) and NTP (.123), GKE (.252)
        "169.254.170.0/24",   # ECS task metadata (.2), EKS Pod Identity (.23)
    ))

_HOST_IF = re.compile(r"^ate[0-9a-f]{12}$")
# As the daemon's actor_uid check: a file name, never "..", no "/", no leading "-".
_SAFE_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_uid(uid: str) -> None:
    """INVALID_ARGUMENT unless `uid` can name a file under netns/."""
    if not _SAFE_UID.match(uid) or ".." in uid:
        raise AteomError(f"actor_uid {quote(uid)}: must be 1-128 letters, digits, '.', '_'"
                         " or '-', starting with a letter or digit",
                         code=ErrorCode.INVALID_ARGUMENT)


def host_ifname(k: int) -> str:
    """The worker-side veth of subnet k: ``ate`` + k as 12 decimal digits."""
    return f"{HOST_IF_PREFIX}{k:012d}"


def is_host_ifname(name: str) -> bool:
    """Whether `name` has the shape of an actor's worker-side veth."""
    return bool(_HOST_IF.match(name))


def netns_dir(run_dir: str) -> str:
    return os.path.join(run_dir, NETNS_DIR)


def netns_path(run_dir: str, k: int) -> str:
    return os.path.join(netns_dir(run_dir), f"net-{k}")


def subnet(k: int) -> ipaddress.IPv4Network:
    """Subnet k: 169.254.(k>>6).((k&63)<<2)/30."""
    if not 0 <= k <= MAX_INDEX:
        raise ValueError(f"subnet index {k} is outside 0..{MAX_INDEX}")
    return ipaddress.IPv4Network(f"169.254.{k >> 6}.{(k & 63) << 2}/{PREFIX_LEN}")


def index_of(address: str) -> int | None:
    """The k whose /30 holds `address`, or None outside 169.254.0.0/16."""
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        return None
    if ip not in LINK_LOCAL:
        return None
    offset = int(ip) - int(LINK_LOCAL.network_address)
    return offset >> 2


class SubnetPool:
    """The /30s of 169.254.0.0/16 an actor may get; the lowest free k first.

    Every k up to `_mark` has been handed out once; those given back wait in a
    heap, so the lowest free k is the heap's least, else the next usable k
    above the mark.
    """

    def __init__(self, reserved: Iterable[ipaddress.IPv4Network] = DEFAULT_RESERVED) -> None:
        self._lock = threading.Lock()
        self._used: set[int] = set()
        self._free: list[int] = []
        self._mark = 0
        self._blocked: set[int] = {0}
        self.reserve([METADATA, *reserved])

    def reserve(self, networks: Iterable[ipaddress.IPv4Network]) -> None:
        """Never hand out a /30 that overlaps any of `networks` (from now on)."""
        blocked: set[int] = set()
        base = int(LINK_LOCAL.network_address)
        for net in networks:
            if net.overlaps(LINK_LOCAL):
                first = max(int(net.network_address), base)
                last = min(int(net.broadcast_address), int(LINK_LOCAL.broadcast_address))
                blocked.update(range((first - base) >> 2, ((last - base) >> 2) + 1))
        with self._lock:
            self._blocked |= blocked

    def usable(self, k: int) -> bool:
        """k in 1..16383 and its /30 overlaps no reserved range."""
        return 1 <= k <= MAX_INDEX and k not in self._blocked

    def allocate(self) -> int:
        """The lowest free usable k; RESOURCE_EXHAUSTED when none is left."""
        with self._lock:
            while self._free:
                k = heapq.heappop(self._free)
                if self.usable(k):
                    self._used.add(k)
                    return k
            k = self._mark + 1
            while k <= MAX_INDEX and not self.usable(k):
                k += 1
            if k <= MAX_INDEX:
                self._mark = k
                self._used.add(k)
                return k
            in_use = len(self._used)
        raise AteomError(f"no free /{PREFIX_LEN} left in {LINK_LOCAL} for another actor"
                         f" ({in_use} in use)", code=ErrorCode.RESOURCE_EXHAUSTED)

    def release(self, k: int) -> None:
        """Give k back (no-op when it is not taken)."""
        with self._lock:
            if k in self._used:
                self._used.remove(k)
                heapq.heappush(self._free, k)

    def in_use(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._used)


@dataclass(frozen=True, slots=True)
class ActorNet:
    """One network, as `ActorNetworks` made it; `uid` is "" until an actor has it."""

    uid: str
    netns_path: str  # the OCI spec's linux.namespaces {"type": "network", "path": ...}
    host_if: str  # worker side, in the daemon's namespace
    host_ip: str  # .1: the actor's gateway, where its redirected egress lands
    actor_ip: str  # .2: where the worker connects to the actor
    prefix_len: int
    index: int  # k of the /30
    egress: bool  # TCP egress redirected to the worker's relay

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"{self.host_ip}/{self.prefix_len}", strict=False)

    @property
    def actor_if(self) -> str:
        return ACTOR_IF


def plan(run_dir: str, k: int) -> ActorNet:
    """The network on subnet k, no actor's yet (names and addresses only)."""
    net = subnet(k)
    return ActorNet(uid="", netns_path=netns_path(run_dir, k), host_if=host_ifname(k),
                    host_ip=str(net.network_address + 1),
                    actor_ip=str(net.network_address + 2), prefix_len=PREFIX_LEN,
                    index=k, egress=False)


def assign(net: ActorNet, uid: str, *, egress: bool) -> ActorNet:
    """`net` as `uid`'s, with egress or not."""
    return dataclasses.replace(net, uid=uid, egress=egress)
