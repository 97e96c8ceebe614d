"""An actor's way out, as Substrate gives it one: every outbound TCP connect of an actor
with an egress gateway is redirected (nftables) to the worker's egress relay, which
carries it over mutual TLS and HTTP CONNECT to the gateway (a real squid here), and
on to its destination; an actor without one is reset at once; nothing reaches the
worker's own addresses that way. On gVisor's newest runsc (Debian's refuses actors'
namespaces on this kernel), driven as the node agent drives ateom.

"The internet" is a network namespace of its own beside the worker's, reached over
a veth pair (198.51.100.0/24, TEST-NET-2), with a real HTTP server in it; the actor
fetches from it with busybox's wget, run inside its sandbox (runsc exec).
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ateom._proto import ateom_pb2 as pb
from tests.daemon.conftest import _stopped, needs_runsc
from tests.support.actor_net import fetch_inside
from tests.support.certs import Certs, make_certs
from tests.support.daemon import Daemon, DaemonWorld
from tests.support.internet import AddressTaken, stand_in_internet
from tests.support.newest_runsc import newest_runsc
from tests.support.node_agent import Actor, App, NodeAgent
from tests.support.squid import free_port, running_squid

NEWEST, WHY_NOT = newest_runsc()
pytestmark = [needs_runsc, pytest.mark.root, pytest.mark.runtime,
              pytest.mark.skipif(NEWEST is None,
                                 reason=f"the egress suite did not run: {WHY_NOT}")]

INTERNET_IP, WORKER_SIDE_IP = "198.51.100.1", "198.51.100.2"
WEB = ("mkdir -p /www; echo up > /www/ready; exec httpd -f -p 80 -h /www")


def actor(uid: str) -> Actor:
    return Actor(uid, (App("app", ("sh", "-c", WEB), wakeup=("/ready", 80, 20)),))


@pytest.fixture(scope="module")
def internet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A namespace with an HTTP server at 198.51.100.1:80 serving /hello (a fresh
    token), routed from the worker's namespace over a veth; yields the token."""
    www = tmp_path_factory.mktemp("internet")
    token = secrets.token_hex(8)
    (www / "hello").write_text(token + "\n")
    server = [sys.executable, "-m", "http.server", "80", "--bind", INTERNET_IP,
              "--directory", str(www)]
    try:
        with stand_in_internet(INTERNET_IP.rpartition(".")[0], server, tag="test"):
            yield token
    except AddressTaken as why:
        pytest.skip(str(why))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def squid(certs: Certs) -> Iterator[tuple[int, Path]]:
    with running_squid(certs) as started:
        yield started


@pytest.fixture
def egressing(world: DaemonWorld, internet: str, certs: Certs,
              ) -> Iterator[tuple[Daemon, NodeAgent]]:
    assert NEWEST is not None
    daemon = Daemon(world, str(NEWEST.path), run_dir=world.base / "run-egress", networks=True,
                    max_actors="4",
                    atunnel_egress_listen_address=f"0.0.0.0:{free_port()}",
                    atunnel_credential_bundle=str(certs.credential),
                    atunnel_egress_trust_bundle=str(certs.trust))
    node = NodeAgent(f"unix:{daemon.socket}", world.actors_root, world.base / "gcs-egress",
                     runsc_path=str(NEWEST.path))
    try:
        yield daemon, node
    finally:
        node.close()
        _stopped(daemon)


def fetch_from(daemon: Daemon, uid: str, url: str) -> str | None:
    """What busybox wget inside the actor's sandbox fetches from `url`; None when it
    cannot (a reset or a refusal: wget fails at once; a hang is a failure too)."""
    assert NEWEST is not None
    return fetch_inside(str(NEWEST.path), daemon.run_dir, uid, url)


def worker_address() -> str:
    """An address of the worker's own, other than loopback and the internet's link."""
    out = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True,
                         check=True).stdout
    for link in json.loads(out):
        for addr in link.get("addr_info", ()):
            if addr.get("scope") == "global" and addr["local"] != WORKER_SIDE_IP:
                return str(addr["local"])
    pytest.skip("the worker has no global IPv4 address of its own to aim at")


def test_egress_reaches_the_internet_through_the_gateway_and_nothing_else(
        egressing: tuple[Daemon, NodeAgent], squid: tuple[int, Path], internet: str) -> None:
    daemon, node = egressing
    port, squid_dir = squid
    gateway = pb.EgressGateway(address=f"localhost:{port}")
    out, shut = actor("egress-out"), actor("egress-none")
    node.run(out, egress_gateway=gateway)
    node.run(shut)
    url = f"http://{INTERNET_IP}/hello"
    assert fetch_from(daemon, "egress-out", url) == internet + "\n"
    assert f"CONNECT {INTERNET_IP}:80" in _eventually(squid_dir / "access.log",
                                                     f"CONNECT {INTERNET_IP}:80")
    # Without a gateway: reset at once (wget fails; a hang would run into the 20 s bound).
    start = time.monotonic()
    assert fetch_from(daemon, "egress-none", url) is None
    assert time.monotonic() - start < 10
    # The worker's own addresses are no destination, gateway or not.
    with socket.create_server(("0.0.0.0", 0)) as listener:
        own = f"http://{worker_address()}:{listener.getsockname()[1]}/"
        assert fetch_from(daemon, "egress-out", own) is None
    # A checkpoint takes the way out with the network; the restore brings both back.
    snapshot = node.checkpoint(out)
    node.restore(out, snapshot, egress_gateway=gateway)
    assert fetch_from(daemon, "egress-out", url) == internet + "\n"
    node.terminate(out)
    node.terminate(shut)
    reset = [e for e in daemon.log_events() if e.get("event") == "egress reset"]
    assert [e["outcome"] for e in reset] == ["forbidden"], reset
    assert reset[0]["actor"] == "demo/egress-out"


def _eventually(path: Path, text: str, timeout: float = 10) -> str:
    """squid logs a tunnel when it ends."""
    deadline = time.monotonic() + timeout
    while True:
        got = path.read_text(errors="replace") if path.exists() else ""
        if text in got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_an_egress_gateway_without_the_relay_is_refused_naming_the_flag(
        world: DaemonWorld) -> None:
    assert NEWEST is not None
    daemon = Daemon(world, str(NEWEST.path), run_dir=world.base / "run-no-relay",
                    networks=True)
    node = NodeAgent(f"unix:{daemon.socket}", world.actors_root, world.base / "gcs-no-relay",
                     runsc_path=str(NEWEST.path))
    try:
        import grpc
        with pytest.raises(grpc.RpcError) as err:
            node.run(actor("no-relay"), egress_gateway=pb.EgressGateway(address="gw:443"))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "--atunnel-egress-listen-address" in (err.value.details() or "")
    finally:
        node.close()
        _stopped(daemon)
    assert shutil.which("nft") is not None
