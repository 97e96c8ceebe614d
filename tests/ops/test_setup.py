"""What the set-up (scripts/bootstrap.sh) installed, checked on the machine it ran on.

The set-up installs without Recommends; these tests say which of its packages are here
and that podman's network backend has the firewall tool it calls, the piece a minimal
Debian 13 lacked (netavark recommends nftables but fails a build's RUN step without it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BOOTSTRAP = REPO / "scripts" / "bootstrap.sh"


def bootstrap_packages(array: str = "APT_PACKAGES") -> list[str]:
    """The packages the set-up installs (read from the script itself): APT_PACKAGES, which
    it cannot go on without, or OPTIONAL_APT_PACKAGES, which it goes on without."""
    match = re.search(rf"^{array}=\(([^)]*)\)", BOOTSTRAP.read_text(), re.M)
    assert match, f"{BOOTSTRAP}: no {array}=(...) line"
    return match.group(1).split()


def installed(package: str) -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True,
                          text=True, timeout=30, check=False)
    return done.returncode == 0 and "install ok installed" in done.stdout


needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-query") is None,
                                reason="not a Debian or Ubuntu machine: no dpkg to ask")


@needs_dpkg
def test_every_package_the_set_up_needs_is_installed() -> None:
    packages = bootstrap_packages()
    assert {"nftables", "busybox-static", "gcc"} <= set(packages)
    missing = [p for p in packages if not installed(p)]
    assert not missing, f"set-up packages not installed: {missing} (run scripts/bootstrap.sh)"


@needs_dpkg
def test_the_optional_helpers_are_installed_or_said_not_to_be() -> None:
    optional = bootstrap_packages("OPTIONAL_APT_PACKAGES")
    assert {"podman", "mmdebstrap"} <= set(optional)
    missing = [p for p in optional if not installed(p)]
    if missing:  # the set-up went on without them, as it said; so does this check
        pytest.skip(f"optional set-up packages not installed here: {missing} "
                    "(the worker image test does not run)")


@needs_dpkg
@pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed")
def test_podmans_network_backend_has_its_firewall_tool() -> None:
    done = subprocess.run(["podman", "info", "--format", "{{.Host.NetworkBackend}}"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    backend = done.stdout.strip()
    # netavark (Debian 13) drives nftables; the CNI plugins (Debian 12) drive iptables.
    tool = {"netavark": "nft", "cni": "iptables"}.get(backend)
    assert tool is not None, f"podman network backend {backend!r} is not one the set-up knows"
    assert shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"), (
        f"podman's {backend} backend needs {tool}, which is not installed")
