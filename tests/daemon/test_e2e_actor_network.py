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

import contextlib
import ipaddress
import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ateom._proto import ateom_pb2 as pb
from tests.daemon.conftest import _stopped, needs_runsc
from tests.support.actor_net import actor_ip, actor_network, fetch_inside, link_indexes
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


@contextlib.contextmanager
def _networked(world: DaemonWorld, warm: str) -> Iterator[tuple[Daemon, NodeAgent]]:
    assert NEWEST is not None
    daemon = Daemon(world, str(NEWEST.path), run_dir=world.base / f"run-net-{warm}",
                    networks=True, max_actors="4", warm_networks=warm)
    node = NodeAgent(f"unix:{daemon.socket}", world.actors_root, world.base / "gcs-net",
                     runsc_path=str(NEWEST.path))
    try:
        yield daemon, node
    finally:
        node.close()
        _stopped(daemon)
    assert not host_links(), "a link outlived the daemon"


@pytest.fixture
def networked(world: DaemonWorld) -> Iterator[tuple[Daemon, NodeAgent]]:
    """The daemon as deployed: networks made ahead (--warm-networks' default)."""
    with _networked(world, "4") as both:
        yield both


@pytest.fixture
def networked_cold(world: DaemonWorld) -> Iterator[tuple[Daemon, NodeAgent]]:
    """No network made ahead: every link and namespace seen is an actor's."""
    with _networked(world, "0") as both:
        yield both


def namespace_id(path: str) -> int | None:
    """The namespace mounted at `path` (its nsfs inode), None when nothing is there."""
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def test_an_actor_is_reachable_at_its_address_only_once_ready_and_keeps_it_across_a_turn(
        networked: tuple[Daemon, NodeAgent]) -> None:
    daemon, node = networked
    a, b = web("web-a"), web("web-b")
    node.run(a)  # answers only once GET /count answered 200
    node.run(b)
    ip_a, ip_b = actor_ip(daemon, "web-a"), actor_ip(daemon, "web-b")
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
    net_a, net_b = actor_network(daemon, "web-a"), actor_network(daemon, "web-b")
    links = link_indexes()
    a_link, b_link = links[net_a["interface"]], links[net_b["interface"]]
    a_ns = namespace_id(net_a["netns"])
    assert a_ns is not None and a_ns != namespace_id(net_b["netns"])
    snapshot = node.checkpoint(a)
    # Its network went before the answer: neither its link nor its namespace is there
    # (by index and namespace id: the warm pool may have made new ones of the same
    # names on the freed /30 since); b's is untouched.
    links = link_indexes()
    assert links.get(net_a["interface"]) != a_link and links[net_b["interface"]] == b_link
    assert namespace_id(net_a["netns"]) != a_ns
    node.restore(a, snapshot)
    ip_a = actor_ip(daemon, "web-a")
    time.sleep(0.3)
    assert count(ip_a) > before  # the same httpd, its counter going on from memory
    restored = actor_network(daemon, "web-a")
    a_link = link_indexes()[restored["interface"]]
    node.terminate(a)
    node.terminate(b)
    links = link_indexes()
    assert links.get(restored["interface"]) != a_link
    assert links.get(net_b["interface"]) != b_link


def reachable_from(daemon: Daemon, uid: str, url: str) -> bool:
    """Whether busybox wget inside the actor's sandbox fetches `url` (runsc exec)."""
    assert NEWEST is not None
    return fetch_inside(str(NEWEST.path), daemon.run_dir, uid, url) is not None


def test_a_probe_that_never_passes_fails_the_run_naming_it_and_leaves_nothing(
        networked_cold: tuple[Daemon, NodeAgent]) -> None:
    daemon, node = networked_cold
    with pytest.raises(grpc.RpcError) as err:
        node.run(web("never", probe_port=81, timeout=2))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    said = err.value.details() or ""
    assert "container app's wakeup probe GET http://169.254." in said and ":81/count" in said
    assert re.search(r"\(\d+ attempts; last: ", said), said
    status = daemon.inspect.GetStatus(pb.GetStatusRequest(), timeout=30)
    assert not status.actors
    assert actor_network(daemon, "never")  # it had one, and it is gone:
    assert not host_links() and os.listdir(daemon.run_dir / "netns") == []


def test_a_killed_daemons_networks_are_swept_by_the_next(world: DaemonWorld) -> None:
    assert NEWEST is not None
    run_dir = world.base / "run-net-crash"
    first = Daemon(world, str(NEWEST.path), run_dir=run_dir, networks=True)
    node = NodeAgent(f"unix:{first.socket}", world.actors_root, world.base / "gcs-crash",
                     runsc_path=str(NEWEST.path))
    try:
        node.run(web("crashed"))
        crashed = Path(actor_network(first, "crashed")["netns"])
        assert host_links() and crashed.exists() and crashed.parent == run_dir / "netns"
        first.crash()
    finally:
        node.close()
        first.stop()
    # The first's actor and its warm networks alike; the second makes none ahead, so
    # any link or namespace seen would be a leftover.
    second = Daemon(world, str(NEWEST.path), run_dir=run_dir, networks=True,
                    warm_networks="0")
    try:
        assert not host_links()
        assert os.listdir(run_dir / "netns") == []
        table = subprocess.run(["nft", "-j", "list", "set", "inet", "ateom", "egress_ifaces"],
                               capture_output=True, text=True, check=True).stdout
        assert '"elem"' not in table  # the table made afresh, its set empty
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
        assert not [e for e in daemon.log_events() if e.get("event") == "actor_network"]
        with pytest.raises(grpc.RpcError) as err:
            node.run(web("probed"))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "takes every network namespace" in (err.value.details() or "")
        node.terminate(Actor("plain", ()))
    finally:
        node.close()
        _stopped(daemon)

