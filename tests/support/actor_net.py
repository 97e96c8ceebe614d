"""An actor's network seen from outside it, as the network suites and benchmarks look:
its address, and a fetch made from inside its sandbox."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

from ateom.network.addressing import host_ifname


def actor_ip(uid: str) -> str:
    """The actor's address: the /30's .2 beside the worker side's .1 (runsc takes the
    actor side's addresses over into its own network stack, out of the namespace, so
    the worker side's is the one left to read)."""
    out = subprocess.run(["ip", "-j", "-4", "addr", "show", host_ifname(uid)],
                         capture_output=True, text=True, check=True)
    worker_side = ipaddress.ip_address(json.loads(out.stdout)[0]["addr_info"][0]["local"])
    return str(worker_side + 1)


def fetch_inside(runsc: str, run_dir: Path, uid: str, url: str,
                 timeout: float = 20.0) -> str | None:
    """What busybox wget inside the actor's app container (`runsc exec`) fetches from
    `url`; None when it cannot: a reset or a refusal fails wget at once, and a hang
    past `timeout` counts as a failure too. No -T: this busybox's wget crashes with it
    under gVisor."""
    root = run_dir / "actors" / uid
    try:
        done = subprocess.run([runsc, "--root", str(root), "exec", "app",
                               "wget", "-q", "-O", "-", url],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return done.stdout if done.returncode == 0 else None
