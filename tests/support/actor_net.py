"""An actor's network seen from outside it, as the network suites and benchmarks look:
its address, and a fetch made from inside its sandbox."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Protocol


class Logged(Protocol):
    def log_events(self) -> list[dict[str, Any]]: ...


def actor_network(daemon: Logged, uid: str) -> dict[str, Any]:
    """The daemon's ``actor_network`` line of the actor's last Run or Restore: its
    ``interface``, ``address`` and ``netns`` (named by their /30, not by the actor)."""
    said = [e for e in daemon.log_events()
            if e.get("event") == "actor_network" and e.get("actor_uid") == uid]
    if not said:
        raise AssertionError(f"the daemon said no actor_network for {uid!r}")
    return said[-1]


def actor_ip(daemon: Logged, uid: str) -> str:
    """The actor's address, as the daemon said it at its last Run or Restore."""
    return str(actor_network(daemon, uid)["address"])


def link_indexes() -> dict[str, int]:
    """Each link of this namespace and its ifindex: a link taken down and one made
    again under the same name (the warm pool's, on a freed /30) differ by index."""
    out = subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True)
    return {link["ifname"]: link["ifindex"] for link in json.loads(out.stdout)}


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
