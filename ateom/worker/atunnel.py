"""The worker's ingress, connect and egress settings, as Substrate's controller gives them.

The controller starts every worker with the ``--atunnel-*`` flags (the router's
HTTPS ingress on ``:443`` under mutual TLS, CONNECT tunnels on ``:8443``, actors'
egress intercepted on ``:15001`` and carried to a gateway). A worker that refused
them would crash-loop, so they are all accepted and kept here. Serving them is the
actor network's work; until it is built, `unserved` says plainly which ones are
accepted and not served, for ``ateom doctor`` and the start-up log.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

DEFAULT_CLIENT_IDENTITY = "spiffe://cluster.local/ns/ate-system/sa/atenet-router"


@dataclass(frozen=True, slots=True)
class AtunnelSettings:
    """Each ``--atunnel-*`` flag's value, "" when not given."""

    listen_address: str = ""
    connect_listen_address: str = ""
    credential_bundle: str = ""
    trust_bundle: str = ""
    client_identity: str = ""
    egress_listen_address: str = ""
    egress_trust_bundle: str = ""
    broker_identity: str = ""

    def given(self) -> dict[str, str]:
        """The flags given, as ``--atunnel-<name>`` -> value."""
        return {f"--atunnel-{f.name.replace('_', '-')}": getattr(self, f.name)
                for f in fields(self) if getattr(self, f.name)}

    def unserved(self) -> dict[str, str]:
        """What a given flag asks for that this worker does not serve yet: every
        one of them today (ingress, CONNECT and egress need the actor network)."""
        return self.given()
