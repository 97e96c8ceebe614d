"""How an actor is reached: its network of its own, its route through the data plane,
its wakeup probes. The lifecycle's calls ask `Reach` at their steps:

    validate:   `check_asks` (a probe or egress needs a network, egress the relay)
    host:       `routed` (503 until it is up) ... `wakeup` ... `running`
    checkpoint: `checkpointing` ... `after_checkpoint` (running on, or forgotten)
    terminate:  `terminating` ... `forget`

The networks themselves are `ateom.network`'s (made and removed with the sandbox by
`Hosting`); the data plane's process and routes are `dataplane`'s. A worker that
cannot make networks, or whose data plane is down, is NOT_SERVING (`problems`).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from ateom.daemon.actors.table import Actor, ActorTable, Phase
from ateom.daemon.calls import deadline
from ateom.daemon.calls.phases import phase
from ateom.daemon.calls.requests import ActorRef, RestoreRequest, RunRequest
from ateom.daemon.lifecycle.config import DaemonConfig
from ateom.daemon.lifecycle.dataplane import NoRoutes, RouteFeed, route_of, start_routes
from ateom.errors import AteomError, ErrorCode, quote
from ateom.network import (
    ActorNet,
    ActorNetworks,
    NetworkCleanupError,
    WakeupProbe,
    netns_problem,
    wait_ready,
)
from ateom.network.wakeup import DEFAULT_TIMEOUT
from ateom.process.reaper import Reaper
from ateom.runsc.probe import RunscInfo

log = structlog.get_logger("ateom.service")


class Reach:
    """The worker's side of reaching actors (see the module)."""

    def __init__(self, config: DaemonConfig, networks: ActorNetworks | None,
                 reaper: Reaper) -> None:
        self.config = config
        self.networks = networks
        self.reaper = reaper
        self.routes: RouteFeed = NoRoutes()  # the data plane's, once `start_dataplane`
        self.network_problem = ""  # why actors' networks cannot be made ("" when they can)
        self._dataplane_problem: Callable[[], str] = lambda: ""
        self._stop_dataplane: Callable[[], None] = lambda: None

    def problems(self) -> list[str]:
        """Why no actor can be reached now, one line each; [] when one can."""
        return [p for p in (self.network_problem, self._dataplane_problem()) if p]

    # -- the worker ------------------------------------------------------------------

    def start_networks(self) -> None:
        """Every namespace, link and rule a dead daemon left swept, the table installed
        afresh. What cannot be swept is said, not fatal; a worker that cannot make
        networks at all (no nft, no CAP_NET_ADMIN) is NOT_SERVING, saying why."""
        if self.networks is None:
            return
        try:
            self.networks.start()
        except NetworkCleanupError as exc:
            log.error("network_left_behind", leftovers=list(exc.leftovers))
        except AteomError as exc:
            self.network_problem = f"actors' networks cannot be made here: {exc}"
            log.error("networks_unavailable", error=str(exc))

    def stop_networks(self) -> None:
        """At shutdown, once the actors are gone: the warm networks, anything left and
        the table removed. What could not be is said (the next start sweeps it)."""
        if self.networks is None or self.network_problem:
            return
        try:
            self.networks.stop()
        except AteomError as exc:
            log.error("network_left_behind", error=str(exc))

    def start_dataplane(self) -> None:
        """The data plane (ingress, CONNECT, egress) for the --atunnel-* addresses given,
        as a child process of its own; none when none is given (spawns a process)."""
        self.routes, self._dataplane_problem, self._stop_dataplane = start_routes(
            self.config.atunnel, self.reaper)

    def stop_dataplane(self) -> None:
        self._stop_dataplane()

    # -- validate --------------------------------------------------------------------

    def no_network(self, info: RunscInfo) -> str:
        """Why actors of this runsc get no network of their own, "" when they do: the
        operator's --network=none, or a runsc that cannot take a namespace over here."""
        if self.networks is None:
            return ("this worker runs actors with runsc --network=none (the operator's"
                    " choice, in --runsc-global-flag / $ATEOM_RUNSC_GLOBAL_FLAGS)")
        return netns_problem(info)

    def check_asks(self, req: RunRequest | RestoreRequest, info: RunscInfo) -> None:
        """A wakeup probe or an egress gateway needs the actor's network, and egress the
        relay: FAILED_PRECONDITION naming why this worker cannot, before anything runs."""
        probed = [c.name for c in req.containers if c.wakeup_probe is not None]
        why_not = self.no_network(info)
        if why_not and (probed or req.egress_gateway is not None):
            what = (f"the wakeup probe of container {probed[0]}" if probed
                    else "egress_gateway")
            raise AteomError(f"actor {req.actor.actor_uid}: {what} needs the actor's own"
                             f" network, and {why_not}", code=ErrorCode.FAILED_PRECONDITION)
        if req.egress_gateway is not None and self.config.egress_port is None:
            raise AteomError(
                f"actor {req.actor.actor_uid}: egress_gateway {quote(req.egress_gateway)}"
                " needs the egress relay, and this worker has no"
                " --atunnel-egress-listen-address", code=ErrorCode.FAILED_PRECONDITION)

    # -- host ------------------------------------------------------------------------

    def routed(self, ref: ActorRef, net: ActorNet | None, phase_now: Phase,
               egress: str | None) -> None:
        """Routed from the moment its network exists: requests get 503 until it runs.
        An actor without a network is routed too, so the router is told that (502),
        not that no such actor is here."""
        ip = net.actor_ip if net is not None else None
        self.routes.route(route_of(ref, ip, phase_now.value, egress))

    def wakeup(self, req: RunRequest | RestoreRequest, net: ActorNet | None) -> None:
        """Every container's wakeup probe answered 200 at the actor's address (bounded by
        each probe's timeout and the caller's deadline); DEADLINE_EXCEEDED naming the
        container, the URL, the attempts and the last error otherwise."""
        probes = [WakeupProbe(c.name, p.path, p.port, p.timeout_seconds or DEFAULT_TIMEOUT)
                  for c in req.containers if (p := c.wakeup_probe) is not None]
        if not probes:
            return
        if net is None:  # `check_asks` refuses a probe without a network
            raise AteomError(f"actor {req.actor.actor_uid}: a wakeup probe and no network",
                             code=ErrorCode.INTERNAL)
        with phase("wakeup"):
            attempts = wait_ready(net.actor_ip, probes, uid=req.actor.actor_uid,
                                  limit=deadline.wait_limit)
        log.info("actor_awake", attempts=attempts, probes=[p.container for p in probes])

    def running(self, uid: str) -> None:
        """Served from now on; the call answers once the data plane has it (bounded)."""
        self.routes.state(uid, "running")
        if not self.routes.sync():
            log.warning("route_not_confirmed", reason="the data plane did not answer")

    # -- checkpoint, terminate, exit -------------------------------------------------

    def checkpointing(self, uid: str) -> None:
        """New requests get 503 from now on; one in flight is cut and answered 503
        naming the checkpoint, not left waiting on an address about to vanish."""
        self.routes.state(uid, "checkpointing")

    def after_checkpoint(self, actor: Actor, actors: ActorTable) -> None:
        """Before a checkpoint's answer: routed again if it runs on (a DATA snapshot, a
        refused save), forgotten if it went."""
        uid = actor.ref.actor_uid
        if actors.get(uid) is actor and actor.phase in (Phase.RUNNING, Phase.CHECKPOINTING):
            self.routes.state(uid, "running")
        else:
            self.routes.forget(uid)

    def terminating(self, uid: str) -> None:
        self.routes.state(uid, "terminating")

    def exited(self, uid: str) -> None:
        self.routes.state(uid, "exited")

    def forget(self, uid: str) -> None:
        self.routes.forget(uid)
