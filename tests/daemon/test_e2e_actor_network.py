"""Each actor's own network, on gVisor's newest runsc (which takes an actor's namespace
over on this kernel; Debian's 0.0~20240729 refuses every namespace here, see
`ateom.network.runsc_support`), driven as the node agent drives ateom.

- Run answers only once the app's wakeup probe has answered 200 at the actor's address;
  the worker reaches the app there; an actor reaches neither the worker's listeners nor
  another actor (from inside the sandbox, busybox's wget);
- a Checkpoint removes the network before it answers; a Restore makes it again, and the
  app's listening socket and counter come back (an HTTP counter that goes on);
- a probe that never passes fails the Run with DEADLINE_EXCEEDED naming the container,
  the URL and the attempts, and leaves nothing (sandbox, network, slot);
- a daemon killed -9 leaves namespaces, links and rules that the next one sweeps;
- with the operator's --network=none a probe is refused, naming why.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

from ateom._proto import ateom_pb2 as pb
from tests.daemon.conftest import _stopped, needs_runsc
from tests.support.actor_net import actor_ip, fetch_inside
from tests.support.daemon import RUNSC, Daemon, DaemonWorld
from tests.support.newest_runsc import newest_runsc
from tests.support.node_agent import Actor, App, NodeAgent

NEWEST, WHY_NOT = newest_runsc()
pytestmark = [needs_runsc, pytest.mark.root, pytest.mark.runtime,
              pytest.mark.skipif(NEWEST is None,
                                 reason=f"the actor-network suite did not run: {WHY_NOT}")]

# busybox's httpd serves /www; a loop keeps the in-memory counter there, as a file.
WEB = ("mkdir -p /www; i=0; (while true; do i=$((i+1)); echo $i > /www/count;"
       " sleep 0.1; done) & exec httpd -f -p 80 -h /www")


def web(uid: str, probe_port: int = 80, timeout: int = 20) -> Actor:
    return Actor(uid, (App("app", ("sh", "-c", WEB), wakeup=("/count", probe_port, timeout)),))


def host_links() -> list[str]:
    out = subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True)
    return [link["ifname"] for link in json.loads(out.stdout)
            if re.fullmatch(r"ate[0-9a-f]{12}", link["ifname"])]


def count(ip: str) -> int:
    with urllib.request.urlopen(f"http://{ip}/count", timeout=5) as answer:
        return int(answer.read())


@pytest.fixture
def networked(world: DaemonWorld) -> Iterator[tuple[Daemon, NodeAgent]]:
    assert NEWEST is not None
    daemon = Daemon(world, str(NEWEST.path), run_dir=world.base / "run-net", networks=True,
                    max_actors="4")
    node = NodeAgent(f"unix:{daemon.socket}", world.actors_root, world.base / "gcs-net",
                     runsc_path=str(NEWEST.path))
    try:
        yield daemon, node
    finally:
        node.close()
        _stopped(daemon)
    assert not host_links(), "an actor's link outlived the daemon"


def test_an_actor_is_reachable_at_its_address_only_once_ready_and_keeps_it_across_a_turn(
        networked: tuple[Daemon, NodeAgent]) -> None:
    daemon, node = networked
    a, b = web("web-a"), web("web-b")
    node.run(a)  # answers only once GET /count answered 200
    node.run(b)
    ip_a, ip_b = actor_ip("web-a"), actor_ip("web-b")
    assert ip_a != ip_b and count(ip_a) >= 1
    awake = [e for e in daemon.log_events() if e.get("event") == "actor_awake"]
    assert len(awake) == 2 and all(e["attempts"] >= 1 for e in awake)
    # From inside actor a: neither actor b nor a listener of the worker (on all of its
    # addresses, the actor's gateway among them) answers; a itself does.
    with socket.create_server(("0.0.0.0", 0)) as worker_listener:
        port = worker_listener.getsockname()[1]
        gateway = str(ipaddress.ip_address(ip_a) - 1)
        assert reachable_from(daemon, "web-a", "http://127.0.0.1/count")
        for target in (f"http://{ip_b}/count", f"http://{gateway}:{port}/"):
            assert not reachable_from(daemon, "web-a", target), target
    before = count(ip_a)
    snapshot = node.checkpoint(a)
    # Its network went before the answer: no link, no namespace of it.
    assert not (daemon.run_dir / "netns" / "web-a").exists()
    assert len(host_links()) == 1  # b's only
    node.restore(a, snapshot)
    ip_a = actor_ip("web-a")
    time.sleep(0.3)
    assert count(ip_a) > before  # the same httpd, its counter going on from memory
    node.terminate(a)
    node.terminate(b)
    assert not host_links()


def reachable_from(daemon: Daemon, uid: str, url: str) -> bool:
    """Whether busybox wget inside the actor's sandbox fetches `url` (runsc exec)."""
    assert NEWEST is not None
    return fetch_inside(str(NEWEST.path), daemon.run_dir, uid, url) is not None


def test_a_probe_that_never_passes_fails_the_run_naming_it_and_leaves_nothing(
        networked: tuple[Daemon, NodeAgent]) -> None:
    daemon, node = networked
    with pytest.raises(grpc.RpcError) as err:
        node.run(web("never", probe_port=81, timeout=2))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    said = err.value.details() or ""
    assert "container app's wakeup probe GET http://169.254." in said and ":81/count" in said
    assert re.search(r"\(\d+ attempts; last: ", said), said
    status = daemon.inspect.GetStatus(pb.GetStatusRequest(), timeout=30)
    assert not status.actors
    assert not host_links() and not (daemon.run_dir / "netns" / "never").exists()


def test_a_killed_daemons_networks_are_swept_by_the_next(world: DaemonWorld) -> None:
    assert NEWEST is not None
    run_dir = world.base / "run-net-crash"
    first = Daemon(world, str(NEWEST.path), run_dir=run_dir, networks=True)
    node = NodeAgent(f"unix:{first.socket}", world.actors_root, world.base / "gcs-crash",
                     runsc_path=str(NEWEST.path))
    try:
        node.run(web("crashed"))
        assert host_links() and (run_dir / "netns" / "crashed").exists()
        first.crash()
    finally:
        node.close()
        first.stop()
    second = Daemon(world, str(NEWEST.path), run_dir=run_dir, networks=True)
    try:
        assert not host_links()
        assert not (run_dir / "netns" / "crashed").exists()
        table = subprocess.run(["nft", "-j", "list", "set", "inet", "ateom", "actor_ifaces"],
                               capture_output=True, text=True, check=True).stdout
        assert '"elem"' not in table  # the table made afresh, its sets empty
    finally:
        _stopped(second)


def test_with_the_operators_network_none_a_probe_is_refused_naming_why(
        world: DaemonWorld) -> None:
    assert RUNSC is not None
    daemon = Daemon(world, str(NEWEST.path), run_dir=world.base / "run-nonet")  # type: ignore[union-attr]
    node = NodeAgent(f"unix:{daemon.socket}", world.actors_root, world.base / "gcs-nonet",
                     runsc_path=str(NEWEST.path))  # type: ignore[union-attr]
    try:
        with pytest.raises(grpc.RpcError) as err:
            node.run(web("nonet"))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "runs actors with runsc --network=none" in (err.value.details() or "")
    finally:
        node.close()
        _stopped(daemon)


def test_debians_runsc_runs_actors_without_a_network_here_and_says_why(
        world: DaemonWorld) -> None:
    # 0.0~20240729 takes every namespace of this kernel for the host's: its actors run
    # with --network=none, and one that needs a network is refused naming the runsc.
    assert RUNSC is not None
    daemon = Daemon(world, RUNSC, run_dir=world.base / "run-debian-net", networks=True)
    node = NodeAgent(f"unix:{daemon.socket}", world.actors_root, world.base / "gcs-deb",
                     runsc_path=RUNSC)
    try:
        from ateom.network import netns_problem
        from ateom.runsc.probe import probe_runsc

        why = netns_problem(probe_runsc(RUNSC))
        if not why:
            pytest.skip("this kernel gives Debian's runsc no trouble with namespaces")
        node.run(Actor("plain", (App("app", ("sleep", "1000")),)))  # runs, no network
        assert not host_links()
        with pytest.raises(grpc.RpcError) as err:
            node.run(web("probed"))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "takes every network namespace" in (err.value.details() or "")
        node.terminate(Actor("plain", ()))
    finally:
        node.close()
        _stopped(daemon)

