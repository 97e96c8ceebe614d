"""What Agent Substrate's WorkerPool controller gives a worker container, as facts.

From its `buildDeploymentApplyConfig` (agent-substrate/substrate, the newest
controller files the code search holds; see ../shared/node-agent-contract.md,
"How Substrate starts the worker container"): the exact arguments, the
environment, the mount paths of its volumes. The tests start ateom with exactly
these, as the kubelet would.
"""

from __future__ import annotations

BASE_DIR = "/var/lib/ateom-gvisor"  # hostPath, shared with the node agent at the same path
CAPACITY_DIR = "/run/ateom-capacity"  # downward API: cpu_milli, memory_bytes
IDENTITY_DIR = "/run/podidentity.podcert.ate.dev"  # the Pod's certificate, the trust bundle
EGRESS_TRUST_DIR = "/run/servicedns.podcert.ate.dev"  # the egress gateway's trust bundle
ROUTER_IDENTITY = "spiffe://cluster.local/ns/ate-system/sa/atenet-router"

# The container's args, as written in the Deployment ($(POD_UID) is the kubelet's to expand).
CONTROLLER_ARGS = (
    "--pod-uid=$(POD_UID)",
    "--atunnel-listen-address=:443",
    "--atunnel-connect-listen-address=:8443",
    f"--atunnel-credential-bundle={IDENTITY_DIR}/credential-bundle.pem",
    f"--atunnel-trust-bundle={IDENTITY_DIR}/trust-bundle.pem",
    f"--atunnel-client-identity={ROUTER_IDENTITY}",
    "--atunnel-egress-listen-address=0.0.0.0:15001",
    f"--atunnel-egress-trust-bundle={EGRESS_TRUST_DIR}/trust-bundle.pem",
)
# The capability set the controller gives an unprivileged gVisor worker (drop ALL, add these).
CAPABILITIES = ("NET_ADMIN", "SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE", "SETUID", "SETGID",
                "SETPCAP", "DAC_OVERRIDE", "FOWNER", "CHOWN", "MKNOD", "NET_RAW", "SETFCAP")
READYZ_PORT = 8080


def controller_args(pod_uid: str) -> list[str]:
    """The args as the kubelet runs them: $(POD_UID) expanded from the env var."""
    return [arg.replace("$(POD_UID)", pod_uid) for arg in CONTROLLER_ARGS]
