"""Counters for operators: what the data plane answered, held open and refused.

Plain integers bumped on the event loop (one thread, so no locks); the control
stream's ``{"op":"stats"}`` returns `Counters.snapshot`, and the daemon exports
it as Prometheus metrics. Names are stable: the daemon maps them one to one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# Why the data plane answered a request itself (the keys of "answers").
ANSWERS = ("bad_request", "forbidden", "unknown_actor", "not_running", "no_network",
           "upstream_failed",
           "upstream_timeout", "checkpointed", "head_timeout", "head_too_large")
# How an egress connection ended up (the keys of "egress").
EGRESS_OUTCOMES = ("relayed", "unknown_peer", "not_running", "no_gateway", "no_destination",
                   "forbidden",
                   "gateway_unreachable", "gateway_tls", "gateway_refused", "gateway_timeout",
                   "at_cap")
# How a CONNECT tunnel request ended up (the keys of "tunnels").
TUNNEL_OUTCOMES = ("spliced", "unknown_actor", "not_running", "no_network", "bad_request",
                   "forbidden", "upstream_failed")


@dataclass(slots=True)
class Counters:
    """Every counter the data plane keeps; ``*_open`` are gauges."""

    # Responses sent to ingress clients, by status class: "1xx" .. "5xx".
    requests: Counter[str] = field(default_factory=Counter)
    # Responses the data plane made itself, by reason (`ANSWERS`).
    answers: Counter[str] = field(default_factory=Counter)
    connections_open: int = 0      # ingress + CONNECT client connections now open
    connections_total: int = 0     # accepted and let in (under the cap)
    connections_refused: int = 0   # closed at once: the cap was reached
    tls_failed: int = 0            # handshakes that failed (untrusted CA, no cert, ...)
    identity_rejected: int = 0     # handshakes that succeeded with the wrong SPIFFE id
    upstream_opened: int = 0       # upstream connections made to actors
    tunnels: Counter[str] = field(default_factory=Counter)
    egress_open: int = 0
    egress: Counter[str] = field(default_factory=Counter)
    control_errors: int = 0        # control lines skipped as malformed
    tls_reloads: int = 0           # credential/trust bundles re-read after a change
    tls_reload_failures: int = 0   # changed bundles that could not be loaded

    def status(self, code: int) -> None:
        self.requests[f"{code // 100}xx"] += 1

    def snapshot(self) -> dict[str, Any]:
        """Every counter, with every known key present (zeros included), JSON-ready."""
        return {
            "requests": {f"{c}xx": self.requests[f"{c}xx"] for c in range(1, 6)},
            "answers": {k: self.answers[k] for k in ANSWERS},
            "connections_open": self.connections_open,
            "connections_total": self.connections_total,
            "connections_refused": self.connections_refused,
            "tls_failed": self.tls_failed,
            "identity_rejected": self.identity_rejected,
            "upstream_opened": self.upstream_opened,
            "tunnels": {k: self.tunnels[k] for k in TUNNEL_OUTCOMES},
            "egress_open": self.egress_open,
            "egress": {k: self.egress[k] for k in EGRESS_OUTCOMES},
            "control_errors": self.control_errors,
            "tls_reloads": self.tls_reloads,
            "tls_reload_failures": self.tls_reload_failures,
        }
