"""The veth pair, addresses and routes of an actor, with pyroute2 (netlink).

`build`: the pair is made in one request, the actor side created straight
inside the actor's namespace as ``eth0`` (no rename, no moment in the
worker's namespace); the worker side gets the /30's .1 and comes up; in the
actor's namespace ``lo`` comes up, ``eth0`` gets the .2 and a default route
via the .1. IPv6 is off on both ends: address generation ``none`` through
netlink (no link-local address, works where /proc/sys is read-only), and
``disable_ipv6=1`` where /proc/sys is writable (the actor side by the
namespace's default, `ateom.network.namespace`; the worker side here).

`rearm` puts back what runsc took: with ``--network=sandbox`` runsc moves the
namespace's addresses into the sandbox and deletes them from ``eth0`` (the
default route goes with them), so a second boot in the same namespace (a
restore after a checkpoint) finds nothing to copy unless they are re-added.

Deleting the worker side deletes its peer. `host_links` and
`link_local_in_use` serve the start-up sweep and the address plan.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2 import IPRoute

from ateom.errors import AteomError
from ateom.network.addressing import ACTOR_IF, LINK_LOCAL, ActorNet, is_host_ifname
from ateom.network.failures import errno_of, failure
from ateom.network.namespace import write_sysctl

_NO_IPV6_ADDRESSES = {"attrs": [["AF_INET6", {"attrs": [["IFLA_INET6_ADDR_GEN_MODE", 1]]}]]}


@contextmanager
def _step(uid: str, action: str, obj: str) -> Iterator[None]:
    try:
        yield
    except AteomError:
        raise
    except Exception as exc:
        raise failure(uid, obj, action, exc) from exc


def _worker() -> IPRoute:
    return IPRoute(groups=0)


def _index(ipr: IPRoute, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise OSError(errno.ENODEV, "no such interface", ifname)
    return int(found[0])


def _no_ipv6_addresses(ipr: IPRoute, index: int) -> None:
    try:
        ipr.link("set", index=index, IFLA_AF_SPEC=_NO_IPV6_ADDRESSES)
    except Exception as exc:
        if errno_of(exc) != errno.EAFNOSUPPORT:  # a kernel without IPv6: nothing to turn off
            raise


def _actor_side(ns: IPRoute, net: ActorNet) -> None:
    """lo and eth0 up, eth0's address and the default route: idempotent."""
    lo, eth0 = _index(ns, "lo"), _index(ns, ACTOR_IF)
    ns.link("set", index=lo, state="up")
    ns.addr("replace", index=eth0, address=net.actor_ip, prefixlen=net.prefix_len)
    ns.link("set", index=eth0, state="up")
    ns.route("replace", dst="0.0.0.0/0", gateway=net.host_ip, oif=eth0)


def build(net: ActorNet, ns_sock: socket.socket, ns_fd: int) -> None:
    """The pair, addresses and routes of `net`; `ns_sock` a netlink socket inside
    the actor's namespace (taken over and closed), `ns_fd` an fd of it."""
    where = f"interface {net.host_if} (netns {net.netns_path})"
    with _worker() as ipr, IPRoute(fileno=ns_sock.detach(), groups=0) as ns:
        with _step(net.uid, "creating veth", where):
            ipr.link("add", ifname=net.host_if, kind="veth",
                     peer={"ifname": ACTOR_IF, "net_ns_fd": ns_fd})
        with _step(net.uid, "configuring", f"interface {net.host_if}"):
            host = _index(ipr, net.host_if)
            _no_ipv6_addresses(ipr, host)
            write_sysctl(f"/proc/sys/net/ipv6/conf/{net.host_if}/disable_ipv6", "1")
            ipr.addr("replace", index=host, address=net.host_ip, prefixlen=net.prefix_len)
            ipr.link("set", index=host, state="up")
        with _step(net.uid, "configuring", f"{ACTOR_IF} in netns {net.netns_path}"):
            _no_ipv6_addresses(ns, _index(ns, ACTOR_IF))
            _actor_side(ns, net)


def rearm(net: ActorNet, ns_sock: socket.socket) -> None:
    """Put `net`'s actor-side address and default route back (after runsc took them)."""
    with _step(net.uid, "re-adding addresses of", f"{ACTOR_IF} in netns {net.netns_path}"):
        with IPRoute(fileno=ns_sock.detach(), groups=0) as ns:
            _actor_side(ns, net)


def delete(ifname: str) -> bool:
    """Delete link `ifname` (and its veth peer); False when it was not there."""
    with _worker() as ipr:
        try:
            ipr.link("del", index=_index(ipr, ifname))
        except Exception as exc:
            if errno_of(exc) == errno.ENODEV:
                return False
            raise
    return True


def exists(ifname: str) -> bool:
    with _worker() as ipr:
        return bool(ipr.link_lookup(ifname=ifname))


def host_links() -> list[str]:
    """Every link of the worker's namespace named like an actor's worker side."""
    with _worker() as ipr:
        names = [link.get("ifname") for link in ipr.link("dump")]
    return sorted(n for n in names if isinstance(n, str) and is_host_ifname(n))


def _narrow(address: object, prefix_len: object) -> ipaddress.IPv4Network | None:
    if not isinstance(address, str) or not isinstance(prefix_len, int):
        return None
    net = ipaddress.IPv4Network(f"{address}/{prefix_len}", strict=False)
    # A route for the whole 169.254.0.0/16 (zeroconf) names no address in use.
    return net if net.subnet_of(LINK_LOCAL) and prefix_len > LINK_LOCAL.prefixlen else None


def link_local_in_use() -> list[ipaddress.IPv4Network]:
    """What the worker's namespace already uses in 169.254.0.0/16: each address (as a
    /32), each route narrower than the /16, each gateway (as a /32)."""
    found: list[ipaddress.IPv4Network | None] = []
    with _worker() as ipr:
        for addr in ipr.addr("dump", family=socket.AF_INET):
            found.append(_narrow(addr.get("address"), 32))
        for route in ipr.route("dump", family=socket.AF_INET):
            found.append(_narrow(route.get("dst"), route.get("dst_len")))
            found.append(_narrow(route.get("gateway"), 32))
    return [net for net in found if net is not None]
