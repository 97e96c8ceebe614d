"""Requests to an actor as Substrate's router sends them, through the worker: mutual TLS to
``ateom serve``'s ingress (--atunnel-listen-address, its data plane process), routed by
Host (``<actor>.<atespace>.actors.resources.substrate.ate.dev``) to the actor's own
network, on gVisor's newest runsc (Debian's refuses actors' namespaces on this kernel).

The actor is busybox's httpd with an in-memory counter served as /count and a CGI that
answers after a while; driven by the node agent (`tests.support.node_agent`): a Run that
answers once its wakeup probe passed, a Checkpoint, a Restore, a Terminate; between them
the router's view: 200, 503 with Retry-After while it is not running (and for a request
in flight when it was checkpointed), 200 again with the counter gone on, 404 once gone.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import _stopped, needs_runsc
from tests.support.certs import ROUTER_ID, Certs, client_context, make_certs
from tests.support.daemon import Daemon, DaemonWorld
from tests.support.newest_runsc import newest_runsc
from tests.support.node_agent import Actor, App, NodeAgent

NEWEST, WHY_NOT = newest_runsc()
pytestmark = [needs_runsc, pytest.mark.root, pytest.mark.runtime,
              pytest.mark.skipif(NEWEST is None,
                                 reason=f"the ingress suite did not run: {WHY_NOT}")]

SLOW_CGI = "#!/bin/sh\\nsleep 4\\necho 'Content-Type: text/plain'\\necho\\necho slow done\\n"
WEB = ("mkdir -p /www/cgi-bin; printf '" + SLOW_CGI + "' > /www/cgi-bin/slow;"
       " chmod +x /www/cgi-bin/slow; i=0; (while true; do i=$((i+1)); echo $i > /www/count;"
       " sleep 0.1; done) & exec httpd -f -p 80 -h /www")
ACTOR = Actor("web-uid-1", (App("app", ("sh", "-c", WEB), wakeup=("/count", 80, 20)),),
              atespace="gpu-demo", name="gpu-1")
HOST = "gpu-1.gpu-demo.actors.resources.substrate.ate.dev"


class Router:
    """HTTPS with the router's client certificate to the worker's ingress."""

    def __init__(self, certs: Certs, address: tuple[str, int]) -> None:
        self.context = client_context(certs, certs.router)
        self.context.check_hostname = False  # the worker's certificate names localhost
        self.address = address

    def get(self, path: str, host: str = HOST,
            timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPSConnection(*self.address, context=self.context,
                                           timeout=timeout)
        try:
            conn.request("GET", path, headers={"Host": host})
            answer = conn.getresponse()
            return answer.status, dict(answer.getheaders()), answer.read()
        finally:
            conn.close()


@pytest.fixture
def routed(world: DaemonWorld, tmp_path: Path) -> Iterator[tuple[Daemon, NodeAgent, Router]]:
    assert NEWEST is not None
    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs")
    daemon = Daemon(world, str(NEWEST.path), run_dir=world.base / "run-ingress",
                    networks=True, atunnel_listen_address="127.0.0.1:0",
                    atunnel_credential_bundle=str(certs.credential),
                    atunnel_trust_bundle=str(certs.trust), atunnel_client_identity=ROUTER_ID)
    node = NodeAgent(f"unix:{daemon.socket}", world.actors_root, world.base / "gcs-ingress",
                     runsc_path=str(NEWEST.path))
    try:
        [ready] = [e for e in daemon.log_events() if e.get("event") == "dataplane ready"]
        host, _, port = ready["ingress"][0].rpartition(":")
        yield daemon, node, Router(certs, (host, int(port)))
    finally:
        node.close()
        _stopped(daemon)


def test_the_router_reaches_the_actor_by_host_through_a_whole_turn(
        routed: tuple[Daemon, NodeAgent, Router]) -> None:
    daemon, node, router = routed
    status, _, body = router.get("/count")
    assert status == 404 and body.count(b"\n") == 1 and b"gpu-1" in body, body
    node.run(ACTOR)
    status, _, body = router.get("/count")
    assert status == 200 and int(body) >= 1
    # A request in flight when the actor is checkpointed ends with a clear status.
    slow: dict[str, object] = {}
    thread = threading.Thread(target=lambda: slow.update(zip(
        ("status", "headers", "body"), router.get("/cgi-bin/slow"), strict=True)))
    thread.start()
    time.sleep(1.0)
    before = int(router.get("/count")[2])
    snapshot = node.checkpoint(ACTOR)
    thread.join(30)
    assert slow["status"] == 503, slow
    assert b"checkpoint" in slow["body"], slow  # type: ignore[operator]
    status, headers, body = router.get("/count")
    assert status in (404, 503), (status, body)  # gone from this worker, or not running
    node.restore(ACTOR, snapshot)
    status, _, body = router.get("/count")
    assert status == 200 and int(body) > before  # its counter went on from memory
    node.terminate(ACTOR)
    assert router.get("/count")[0] == 404


def test_a_caller_that_is_not_the_router_gets_nothing(
        routed: tuple[Daemon, NodeAgent, Router], tmp_path: Path) -> None:
    _, _, router = routed
    (tmp_path / "other-certs").mkdir()
    certs = make_certs(tmp_path / "other-certs")
    intruder = client_context(certs, certs.intruder)
    intruder.check_hostname = False
    conn = http.client.HTTPSConnection(*router.address, context=intruder, timeout=10)
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            # Another CA altogether: the worker trusts only its trust bundle's.
            conn.request("GET", "/count", headers={"Host": HOST})
            conn.getresponse()
    finally:
        conn.close()
