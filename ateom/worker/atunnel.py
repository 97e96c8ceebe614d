"""The worker's ingress, connect and egress settings, as Substrate's controller gives them.

The controller starts every worker with the ``--atunnel-*`` flags (the router's
HTTPS ingress on ``:443`` under mutual TLS, CONNECT tunnels on ``:8443``, actors'
egress intercepted on ``:15001`` and carried to a gateway). A worker that refused
them would crash-loop, so they are all accepted and kept here; the daemon's data
plane (`ateom.dataplane`, started by `ateom.daemon.lifecycle.dataplane`) serves
them. `problems` checks them the way the data plane will read them, so a mistake
is one line at start, not a data plane that exits again and again. `unserved`
says which are accepted and not used (``ateom doctor``, the start-up log).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ateom.dataplane.routes import parse_address


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
        """What a given flag asks for that this worker does not use: a relocated
        install's broker identity (ateom's node agent socket is local)."""
        return {flag: value for flag, value in self.given().items()
                if flag == "--atunnel-broker-identity"}

    def problems(self) -> list[str]:
        """Each flag the data plane could not start with, as "flag: why"; [] when
        it can (pure: the bundles' contents are read by the data plane)."""
        out = []
        for flag, value in self.given().items():
            if flag.endswith("-address"):
                try:
                    port = parse_address(value)[1]
                except ValueError as err:
                    out.append(f"{flag}={value}: {err}")
                    continue
                if port == 0 and flag == "--atunnel-egress-listen-address":
                    out.append(f"{flag}={value}: must name its port (actors' outbound TCP"
                               " is redirected to it)")
        ingress = bool(self.listen_address or self.connect_listen_address)
        egress = bool(self.egress_listen_address)
        needed = [("--atunnel-credential-bundle", self.credential_bundle, ingress or egress),
                  ("--atunnel-trust-bundle", self.trust_bundle, ingress),
                  ("--atunnel-egress-trust-bundle", self.egress_trust_bundle, egress)]
        out += [f"{flag}: required with the listen addresses given"
                for flag, value, needs in needed if needs and not value]
        return out
