"""`ActorNetworks`: every actor's network on this worker, made and taken down.

One object per daemon. `start` (once, before any actor) sweeps what a crashed
daemon left (every ``ate`` + 12 hex link of the worker's namespace, every
file and mount under ``<run_dir>/netns/``, the whole ``inet ateom`` table) and
installs the table afresh; `create` gives an actor its namespace, veth pair,
/30 and set elements (elements first: the interface is filtered from the
moment it exists); `remove` takes them down again, by names derived from the
uid, so it also clears what an earlier failed `remove` or a crash left;
`stop` removes everything. Thread-safe: the bookkeeping is under one lock,
the netlink and nft work of different actors runs in parallel, and one actor
is never created and removed at once (FAILED_PRECONDITION).

A /30 goes back to the pool only once its worker-side link is known gone: a
link that could not be deleted keeps its address, and no other actor gets it.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import shutil
import threading
from collections.abc import Iterable

from ateom import safefs
from ateom.errors import AteomError, ErrorCode, quote
from ateom.network import firewall, links, namespace
from ateom.network.addressing import (
    DEFAULT_RESERVED,
    ActorNet,
    SubnetPool,
    check_uid,
    host_ifname,
    index_of,
    netns_dir,
    netns_path,
    plan,
)
from ateom.network.failures import NetworkCleanupError, failure, reason_of
from ateom.network.firewall import Nft, Runner


def find_nft() -> str:
    """nft's absolute path (the sbin directories searched too), or plain "nft"."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/local/sbin"
    return shutil.which("nft", path=path) or "nft"


class ActorNetworks:
    """The actors' networks; `runner` runs nft (the daemon's: `reaper_runner`)."""

    def __init__(self, run_dir: str, *, egress_port: int | None, runner: Runner,
                 nft: str | None = None,
                 reserved: Iterable[ipaddress.IPv4Network] = DEFAULT_RESERVED) -> None:
        if egress_port is not None and not 1 <= egress_port <= 65535:
            raise AteomError(f"egress port {egress_port}: must be 1-65535",
                             code=ErrorCode.INVALID_ARGUMENT)
        self.run_dir = run_dir
        self.egress_port = egress_port
        self._nft = Nft(runner, nft=nft or find_nft())
        self._pool = SubnetPool(reserved)
        self._lock = threading.Lock()
        self._nets: dict[str, ActorNet] = {}
        self._by_index: dict[int, str] = {}
        self._busy: set[str] = set()
        self._kept: dict[str, int] = {}  # uid -> k whose link could not be deleted
        self._dirty: set[str] = set()  # uids whose last teardown left something
        self._started = False

    def start(self) -> None:
        """Sweep a previous daemon's leftovers, then install the table afresh.
        NetworkCleanupError names what could not be swept; the table is installed
        and `create` works all the same."""
        with self._lock:
            if self._started:
                raise AteomError("actor networks already started",
                                 code=ErrorCode.FAILED_PRECONDITION)
        try:
            safefs.makedirs(netns_dir(self.run_dir), beneath=self.run_dir, mode=0o711)
        except OSError as exc:
            raise failure(None, f"directory {netns_dir(self.run_dir)}", "creating", exc) from exc
        leftovers = self._sweep()
        self._nft.apply(firewall.ruleset(self.egress_port),
                        what=f"installing table {firewall.FAMILY} {firewall.TABLE}")
        try:
            self._pool.reserve(links.link_local_in_use())
        except Exception as exc:
            raise failure(None, "the worker's routes", "reading", exc) from exc
        with self._lock:
            self._started = True
        if leftovers:
            raise NetworkCleanupError("sweeping a previous daemon's actor networks", leftovers)

    def create(self, uid: str, *, egress: bool) -> ActorNet:
        """`uid`'s namespace, veth pair, /30 and set elements; undone on failure."""
        check_uid(uid)
        if egress and self.egress_port is None:
            raise AteomError(f"actor {quote(uid)}: egress asked but no egress port is set",
                             code=ErrorCode.FAILED_PRECONDITION)
        with self._lock:
            if not self._started:
                raise AteomError(f"actor {quote(uid)}: actor networks are not started",
                                 code=ErrorCode.FAILED_PRECONDITION)
            if uid in self._nets or uid in self._busy:
                raise AteomError(f"actor {quote(uid)}: has a network already",
                                 code=ErrorCode.ALREADY_EXISTS)
            k = self._pool.allocate()
            self._busy.add(uid)
        net = plan(self.run_dir, uid, k, egress=egress)
        try:
            self._build(net)
        except Exception as exc:
            error = failure(uid, f"network (interface {net.host_if}, netns {net.netns_path})",
                            "creating", exc)
            self._undo(net, error)
            if error is exc:
                raise
            raise error from exc
        except BaseException as exc:
            self._undo(net, exc)
            raise
        with self._lock:
            self._busy.discard(uid)
            self._nets[uid] = net
            self._by_index[k] = uid
        return net

    def _build(self, net: ActorNet) -> None:
        if os.path.lexists(net.netns_path) or links.exists(net.host_if):
            self._clear(net.uid)  # what an earlier failed remove left
        self._nft.apply(firewall.admit(net.host_if, egress=net.egress),
                        what=f"actor {quote(net.uid)}: adding interface {net.host_if}"
                             f" to table {firewall.FAMILY} {firewall.TABLE}")
        try:
            sock, ns_fd = namespace.create(self.run_dir, net.netns_path)
        except Exception as exc:
            raise failure(net.uid, f"netns {net.netns_path}", "creating", exc) from exc
        try:
            links.build(net, sock, ns_fd)
        finally:
            os.close(ns_fd)
            sock.close()

    def _undo(self, net: ActorNet, exc: BaseException) -> None:
        leftovers, link_gone = self._teardown(net.uid)
        with self._lock:
            self._busy.discard(net.uid)
            if link_gone:
                self._pool.release(net.index)
            else:
                self._kept[net.uid] = net.index
            if leftovers:
                self._dirty.add(net.uid)
        if leftovers and isinstance(exc, AteomError):
            exc.message += "; undoing it left: " + "; ".join(leftovers)
            exc.args = (exc.message,)

    def _clear(self, uid: str) -> None:
        leftovers, _ = self._teardown(uid)
        if leftovers:
            raise NetworkCleanupError(f"actor {quote(uid)}: clearing a previous network",
                                      leftovers)

    def _teardown(self, uid: str) -> tuple[list[str], bool]:
        """Delete `uid`'s link, set elements and namespace, each tried whatever the
        others did: (what is left, with why; whether the link is gone)."""
        host_if, path = host_ifname(uid), netns_path(self.run_dir, uid)
        leftovers: list[str] = []
        link_gone = True
        try:
            links.delete(host_if)
        except Exception as exc:
            link_gone = False
            leftovers.append(f"interface {host_if}: {reason_of(exc)}")
        try:
            self._nft.apply(firewall.expel(host_if), missing_ok=True,
                            what=f"removing {host_if} from table inet ateom")
        except AteomError as exc:
            leftovers.append(f"set elements {host_if}: {exc.message}")
        try:
            namespace.remove(self.run_dir, path)
        except Exception as exc:
            leftovers.append(f"netns {path}: {reason_of(exc)}")
        return leftovers, link_gone

    def remove(self, uid: str) -> None:
        """Take `uid`'s network down; nothing to do when there is none (no nft run,
        no netlink: a checkpoint's release asks again after its answer).
        NetworkCleanupError names whatever could not be removed."""
        check_uid(uid)
        with self._lock:
            if uid in self._busy:
                raise AteomError(f"actor {quote(uid)}: its network is being created or removed",
                                 code=ErrorCode.FAILED_PRECONDITION)
            net = self._nets.pop(uid, None)
            k = net.index if net is not None else self._kept.pop(uid, None)
            if net is None and k is None and uid not in self._dirty:
                # Removed already (a checkpoint's answer, then its release), or never
                # made by this process (what a dead one left went in `start`'s sweep).
                return
            self._dirty.discard(uid)
            if net is not None:
                self._by_index.pop(net.index, None)
            self._busy.add(uid)
        leftovers: list[str] = []
        link_gone = False
        try:
            leftovers, link_gone = self._teardown(uid)
        finally:
            with self._lock:
                self._busy.discard(uid)
                if k is not None and link_gone:
                    self._pool.release(k)
                elif k is not None:
                    self._kept[uid] = k
                if leftovers:
                    self._dirty.add(uid)
        if leftovers:
            raise NetworkCleanupError(f"actor {quote(uid)}", leftovers)

    def rearm(self, uid: str) -> ActorNet:
        """Re-add `uid`'s actor-side address and default route, which runsc takes
        from the namespace at each create and restore: before a second boot."""
        net = self.get(uid)
        if net is None:
            raise AteomError(f"actor {quote(uid)}: has no network", code=ErrorCode.NOT_FOUND)
        try:
            sock = namespace.netlink_in(self.run_dir, net.netns_path)
        except Exception as exc:
            raise failure(uid, f"netns {net.netns_path}", "entering", exc) from exc
        links.rearm(net, sock)
        return net

    def get(self, uid: str) -> ActorNet | None:
        with self._lock:
            return self._nets.get(uid)

    def owner(self, address: str) -> ActorNet | None:
        """The actor whose /30 holds `address` (a redirected connection's peer)."""
        k = index_of(address)
        with self._lock:
            uid = self._by_index.get(k) if k is not None else None
            return self._nets.get(uid) if uid is not None else None

    def actors(self) -> list[ActorNet]:
        with self._lock:
            return sorted(self._nets.values(), key=lambda n: n.uid)

    def stop(self) -> None:
        """Remove every actor's network, any leftover by its shape, and the table."""
        with self._lock:
            self._started = False
            uids = sorted({*self._nets, *self._kept, *self._dirty})
        leftovers: list[str] = []
        for uid in uids:
            try:
                self.remove(uid)
            except AteomError as exc:
                leftovers.append(exc.message)
        leftovers += self._sweep()
        try:
            self._nft.apply(firewall.drop_table(), what="deleting table inet ateom")
        except AteomError as exc:
            leftovers.append(exc.message)
        if leftovers:
            raise NetworkCleanupError("stopping actor networks", leftovers)

    def _sweep(self) -> list[str]:
        """Delete every actor-shaped link and everything under netns/."""
        leftovers: list[str] = []
        try:
            names = links.host_links()
        except Exception as exc:
            return [f"the worker's links: {reason_of(exc)}"]
        for name in names:
            try:
                links.delete(name)
            except Exception as exc:
                leftovers.append(f"interface {name}: {reason_of(exc)}")
        directory = netns_dir(self.run_dir)
        for name in namespace.leftovers(self.run_dir, directory):
            path = os.path.join(directory, name)
            try:
                namespace.remove(self.run_dir, path)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    leftovers.append(f"netns {path}: {reason_of(exc)}")
        return leftovers
