"""One network of its own per actor: a network namespace, a veth pair to the
worker, a link-local /30, and ateom's nftables table around them.

runsc (``--network=sandbox``, its default) takes over the interfaces,
addresses and routes of the namespace the OCI spec names
(``linux.namespaces: {"type": "network", "path": ActorNet.netns_path}``), at
create and at restore. The worker reaches each actor at its own address; an
actor reaches nothing of the worker but its egress relay (and that only when
it has egress), and no other actor.

Read in this order (each module imports only those before it; below the
daemon: ``ateom.errors``, ``ateom.safefs``, the standard library, pyroute2 and
structlog):

1. `failures`: errors as `AteomError` with a code (FAILED_PRECONDITION when the
   worker cannot, INTERNAL otherwise), `NetworkCleanupError` (what was left).
2. `addressing`: the address plan and why (pure) — interface names, netns
   paths, `SubnetPool` (a /30 of 169.254.0.0/16 per actor), `ActorNet`.
3. `firewall`: ``table inet ateom`` as JSON from pure functions, applied by
   ``nft -j`` (`Nft`, over a `Runner`); actors known by their links' names,
   the egress set's elements in and out.
4. `namespace`: the namespace made (on a thread of its own, no fork),
   bind-mounted under ``<run_dir>/netns/``, removed; the sweep's to-do list.
5. `links`: the veth pair, addresses, routes and IPv6 off, with pyroute2.
6. `redirect`: `original_destination`, where a redirected connection was going.
7. `warm`: `WarmPool`, a few networks made ahead of their actors, on a thread
   of its own.
8. `networks`: `ActorNetworks` — `start`, `create`, `remove`, `rearm`, `get`,
   `owner`, `stop`.
9. `wakeup`: the containers' wakeup probes, HTTP GET at the actor's address until
   each answers 200 (every attempt and the whole wait bounded).
10. `runsc_support`: whether a runsc can take over an actor's namespace on this
    kernel (`netns_problem`).
"""

from ateom.network.addressing import ActorNet, SubnetPool
from ateom.network.failures import NetworkCleanupError
from ateom.network.firewall import Runner
from ateom.network.networks import ActorNetworks
from ateom.network.redirect import original_destination
from ateom.network.runsc_support import netns_problem
from ateom.network.wakeup import WakeupProbe, check_probe, wait_ready

__all__ = [
    "ActorNet",
    "ActorNetworks",
    "NetworkCleanupError",
    "Runner",
    "SubnetPool",
    "WakeupProbe",
    "check_probe",
    "netns_problem",
    "original_destination",
    "wait_ready",
]
