"""`ActorNetworks`: every actor's network on this worker, made and taken down.

One object per daemon. `start` (once, before any actor) sweeps what a crashed
daemon left (every ``ate`` + 12 hex link of the worker's namespace, every
file and mount under ``<run_dir>/netns/``, the whole ``inet ateom`` table),
installs the table afresh and starts the warm pool (`ateom.network.warm`);
`create` gives an actor a network: a ready one from the pool, else one made
there and then (a namespace, a veth pair, a /30), and adds its link to the
egress set when it has egress; `remove` takes it down again; `stop` removes
everything. Thread-safe: the bookkeeping is under one lock, the netlink and
nft work of different actors runs in parallel, and one actor is never created
and removed at once (FAILED_PRECONDITION).

A /30 goes back to the pool of addresses only once all of its network is
known gone (the link, the egress element, the namespace): a network that
could not be taken down whole keeps its /30, so the names derived from it
(its link, its namespace file, its egress element) are never another actor's,
and it is tried again at the actor's next `remove` and at `stop`.
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
    assign,
    check_uid,
    index_of,
    netns_dir,
    plan,
)
from ateom.network.failures import NetworkCleanupError, failure, reason_of
from ateom.network.firewall import Nft, Runner
from ateom.network.warm import WarmPool


def find_nft() -> str:
    """nft's absolute path (the sbin directories searched too), or plain "nft"."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/local/sbin"
    return shutil.which("nft", path=path) or "nft"


class ActorNetworks:
    """The actors' networks; `runner` runs nft (the daemon's: `reaper_runner`);
    `warm`: how many networks to keep made ahead (0: none, each made by its Run)."""

    def __init__(self, run_dir: str, *, egress_port: int | None, runner: Runner,
                 nft: str | None = None,
                 reserved: Iterable[ipaddress.IPv4Network] = DEFAULT_RESERVED,
                 warm: int = 0) -> None:
        if egress_port is not None and not 1 <= egress_port <= 65535:
            raise AteomError(f"egress port {egress_port}: must be 1-65535",
                             code=ErrorCode.INVALID_ARGUMENT)
        self.run_dir = run_dir
        self.egress_port = egress_port
        self._nft = Nft(runner, nft=nft or find_nft())
        self._pool = SubnetPool(reserved)
        self.warm = WarmPool(warm, lambda: self._make(""), self._discard)
        self._lock = threading.Lock()
        self._nets: dict[str, ActorNet] = {}
        self._by_index: dict[int, str] = {}
        self._busy: set[str] = set()
        self._left: dict[int, ActorNet] = {}  # k -> a network not all taken down
        self._started = False

    def start(self) -> None:
        """Sweep a previous daemon's leftovers, install the table afresh, start the
        warm pool. NetworkCleanupError names what could not be swept; the table is
        installed and `create` works all the same."""
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
        self.warm.start()
        if leftovers:
            raise NetworkCleanupError("sweeping a previous daemon's actor networks", leftovers)

    def create(self, uid: str, *, egress: bool) -> ActorNet:
        """`uid`'s network (from the warm pool when one is ready), in the egress set
        when `egress`; whatever was made is undone on failure."""
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
            self._busy.add(uid)
        try:
            net = assign(self.warm.take() or self._make(uid), uid, egress=egress)
        except BaseException:
            with self._lock:
                self._busy.discard(uid)
            raise
        try:
            if egress:
                self._nft.apply(firewall.admit(net.host_if),
                                what=f"actor {quote(uid)}: adding interface {net.host_if}"
                                     f" to set {firewall.EGRESS_SET}")
        except BaseException as exc:
            self._undo(net, exc)
            with self._lock:
                self._busy.discard(uid)
            raise
        with self._lock:
            self._busy.discard(uid)
            self._nets[uid] = net
            self._by_index[net.index] = uid
        return net

    def _make(self, uid: str) -> ActorNet:
        """A new network on the lowest free /30 ("" for the warm pool's: no actor
        yet); undone on failure."""
        with self._lock:
            k = self._pool.allocate()
        net = assign(plan(self.run_dir, k), uid, egress=False)
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
        return net

    def _build(self, net: ActorNet) -> None:
        if os.path.lexists(net.netns_path) or links.exists(net.host_if):
            self._clear(net)  # what an earlier failed remove left on this /30
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
        leftovers = self._settle(net)
        if leftovers and isinstance(exc, AteomError):
            exc.message += "; undoing it left: " + "; ".join(leftovers)
            exc.args = (exc.message,)

    def _discard(self, net: ActorNet) -> None:
        """A warm network made after `stop`: taken down (what stays, `stop` named)."""
        self._settle(net)

    def _settle(self, net: ActorNet) -> list[str]:
        """Take `net` down; its /30 back to the pool when all of it is gone, else the
        network kept in `_left` (its /30 held). What is left, with why."""
        leftovers = self._teardown(net)
        with self._lock:
            if leftovers:
                self._left[net.index] = net
            else:
                self._left.pop(net.index, None)
                self._pool.release(net.index)
        return leftovers

    def _clear(self, net: ActorNet) -> None:
        leftovers = self._teardown(net)
        if leftovers:
            who = f"actor {quote(net.uid)}: " if net.uid else ""
            raise NetworkCleanupError(f"{who}clearing a previous network on {net.host_if}",
                                      leftovers)

    def _teardown(self, net: ActorNet) -> list[str]:
        """Delete `net`'s link, egress element (when it may have one) and namespace,
        each tried whatever the others did: what is left, with why."""
        leftovers: list[str] = []
        try:
            links.delete(net.host_if)
        except Exception as exc:
            leftovers.append(f"interface {net.host_if}: {reason_of(exc)}")
        if net.egress:
            try:
                self._nft.apply(firewall.expel(net.host_if), missing_ok=True,
                                what=f"removing {net.host_if} from set {firewall.EGRESS_SET}")
            except AteomError as exc:
                leftovers.append(f"egress element {net.host_if}: {exc.message}")
        try:
            namespace.remove(self.run_dir, net.netns_path)
        except Exception as exc:
            leftovers.append(f"netns {net.netns_path}: {reason_of(exc)}")
        return leftovers

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
            if net is not None:
                self._by_index.pop(net.index, None)
            else:
                # What an earlier remove of this actor could not take down, if anything;
                # nothing: removed already (a checkpoint's answer, then its release), or
                # never made by this process (a dead one's went in `start`'s sweep).
                net = next((n for n in self._left.values() if n.uid == uid), None)
                if net is None:
                    return
            self._busy.add(uid)
        try:
            leftovers = self._settle(net)
        finally:
            with self._lock:
                self._busy.discard(uid)
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
        """Remove every actor's network, the warm ones, any leftover by its shape,
        and the table."""
        with self._lock:
            self._started = False
            uids = sorted(self._nets)
        leftovers: list[str] = []
        for net in self.warm.stop():
            leftovers += self._settle(net)
        for uid in uids:
            try:
                self.remove(uid)
            except AteomError as exc:
                leftovers.append(exc.message)
        with self._lock:
            self._left.clear()  # the sweep below takes what they left, or names it
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
