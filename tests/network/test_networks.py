"""Actor networks for real: namespaces, veth pairs, addresses and the nftables table,
seen from the worker and from inside an actor. Root and nft, or skipped."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ateom.errors import AteomError, ErrorCode
from ateom.network import ActorNet, ActorNetworks, NetworkCleanupError, links, original_destination
from ateom.network.addressing import host_ifname
from ateom.network.networks import find_nft
from ateom.process.runner import subprocess_runner
from tests.network.conftest import (
    NFT,
    connect,
    listener,
    mounts_under,
    needs_root_and_nft,
    pod_namespace,
    run_in,
    socket_in,
    table_sets,
    worker_links,
)
from tests.support.actor_net import link_indexes

pytestmark = [needs_root_and_nft, pytest.mark.root, pytest.mark.usefixtures("worker_netns")]

# Reset at once: far under the 1 s a dropped SYN would take to time out.
AT_ONCE = 0.5


def test_a_network_has_its_namespace_pair_addresses_and_route(networks: ActorNetworks) -> None:
    net = networks.create("actor-a", egress=False)
    assert os.path.realpath(net.netns_path).startswith(os.path.realpath(networks.run_dir))
    assert net.netns_path.endswith(f"/netns/net-{net.index}") and net.host_if == host_ifname(1)
    assert os.stat(net.netns_path).st_ino != os.stat("/proc/self/ns/net").st_ino
    addrs = {a["ifname"]: a for a in json.loads(run_in(net.netns_path, "ip", "-j", "addr"))}
    assert set(addrs) == {"lo", "eth0"}
    assert "UP" in addrs["lo"]["flags"] and "UP" in addrs["eth0"]["flags"]
    assert [(i["family"], i["local"], i["prefixlen"]) for i in addrs["eth0"]["addr_info"]] == [
        ("inet", net.actor_ip, 30)]
    routes = json.loads(run_in(net.netns_path, "ip", "-j", "route"))
    assert {"dst": "default", "gateway": net.host_ip, "dev": "eth0"}.items() <= routes[0].items()
    worker = json.loads(subprocess.run(["ip", "-j", "addr", "show", "dev", net.host_if],
                                       capture_output=True, text=True, check=True).stdout)[0]
    assert [(i["family"], i["local"], i["prefixlen"]) for i in worker["addr_info"]] == [
        ("inet", net.host_ip, 30)]
    assert "UP" in worker["flags"] and networks.get("actor-a") == net
    assert networks.owner(net.actor_ip) == net and networks.owner("169.254.0.7") == net
    assert networks.owner("10.0.0.1") is None


def test_ipv6_is_off_on_both_ends_and_lo_keeps_its_own(networks: ActorNetworks) -> None:
    net = networks.create("actor-a", egress=False)
    with open(f"/proc/sys/net/ipv6/conf/{net.host_if}/disable_ipv6") as f:
        assert f.read().strip() == "1"
    assert run_in(net.netns_path, "cat", "/proc/sys/net/ipv6/conf/eth0/disable_ipv6").strip() == "1"
    inside = json.loads(run_in(net.netns_path, "ip", "-j", "-6", "addr"))
    assert [(a["ifname"], [i["local"] for i in a["addr_info"]]) for a in inside] == [
        ("lo", ["::1"])]
    detail = run_in(net.netns_path, "ip", "-d", "link", "show", "eth0")
    assert "addrgenmode none" in detail


def test_the_ruleset_reads_as_intended(networks: ActorNetworks, egress_port: int) -> None:
    text = subprocess.run([NFT, "list", "table", "inet", "ateom"], capture_output=True,
                          text=True, check=True).stdout
    lines = [" ".join(line.split()) for line in text.splitlines()]
    for rule in [
        f"iifname @egress_ifaces meta l4proto tcp redirect to :{egress_port}",
        'iifname "ate*" fib saddr . iif oif missing drop',
        'iifname "ate*" ct state established,related accept',
        f"iifname @egress_ifaces ct status dnat tcp dport {egress_port} accept",
        'iifname "ate*" meta l4proto tcp reject with tcp reset',
        'iifname "ate*" drop',
        'oifname "ate*" drop',
    ]:
        assert rule in lines, text


def test_an_actor_gets_a_reset_from_every_worker_listener(networks: ActorNetworks,
                                                          egress_port: int) -> None:
    net = networks.create("actor-a", egress=False)
    with listener(socket.socket()) as lsock, listener(socket.socket(), egress_port):
        port = lsock.getsockname()[1]
        for target in [(net.host_ip, port), (net.host_ip, egress_port)]:
            with socket_in(net.netns_path) as sock:
                attempt = connect(sock, target)
            assert attempt.outcome == "refused", (target, attempt)
            assert attempt.seconds < AT_ONCE, (target, attempt)


def test_an_actor_cannot_pass_for_another(networks: ActorNetworks) -> None:
    # The worker talks UDP with b; a, with b's address added and bound, sends the
    # worker what would read as b's reply (conntrack: established). Only the spoof
    # check stops it: the source is not routed back through a's interface.
    a = networks.create("actor-a", egress=False)
    b = networks.create("actor-b", egress=False)
    run_in(a.netns_path, "ip", "addr", "add", f"{b.actor_ip}/32", "dev", "eth0")
    with socket_in(b.netns_path, socket.SOCK_DGRAM) as in_b, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as worker, \
            socket_in(a.netns_path, socket.SOCK_DGRAM) as in_a:
        in_b.bind(("0.0.0.0", 0))
        worker.bind((b.host_ip, 0))
        worker.settimeout(0.5)
        worker.sendto(b"hi b", (b.actor_ip, in_b.getsockname()[1]))
        in_b.settimeout(2)
        assert in_b.recvfrom(16)[0] == b"hi b"
        in_b.sendto(b"from b", worker.getsockname())
        assert worker.recvfrom(16) == (b"from b", (b.actor_ip, in_b.getsockname()[1]))
        in_a.bind((b.actor_ip, in_b.getsockname()[1]))
        in_a.sendto(b"spoofed", worker.getsockname())
        with pytest.raises(TimeoutError):
            worker.recvfrom(16)


def test_actors_cannot_reach_each_other(networks: ActorNetworks) -> None:
    a = networks.create("actor-a", egress=False)
    b = networks.create("actor-b", egress=True)  # its egress goes to the relay, not to a
    with listener(socket_in(b.netns_path)) as in_b:
        port = in_b.getsockname()[1]
        with listener(socket_in(a.netns_path), port):
            for source, target in ((a, b), (b, a)):
                with socket_in(source.netns_path) as sock:
                    attempt = connect(sock, (target.actor_ip, port))
                assert attempt.outcome != "connected", (source.uid, attempt)


def test_the_worker_reaches_an_actor_listener(networks: ActorNetworks) -> None:
    net = networks.create("actor-a", egress=False)
    with listener(socket_in(net.netns_path)) as inside:
        with socket.socket() as sock:
            attempt = connect(sock, (net.actor_ip, inside.getsockname()[1]))
            assert attempt.outcome == "connected", attempt
            conn, peer = inside.accept()
            with conn:
                sock.sendall(b"ping")
                assert conn.recv(4) == b"ping" and peer[0] == net.host_ip


def test_egress_lands_on_the_relay_with_its_original_destination(
        networks: ActorNetworks, egress_port: int) -> None:
    net = networks.create("actor-a", egress=True)
    with listener(socket.socket(), egress_port) as relay, socket_in(net.netns_path) as sock:
        attempt = connect(sock, ("192.0.2.1", 443))
        assert attempt.outcome == "connected", attempt
        conn, peer = relay.accept()
        with conn:
            assert original_destination(conn) == ("192.0.2.1", 443)
            assert peer[0] == net.actor_ip and networks.owner(peer[0]) == net
            sock.sendall(b"hello")
            assert conn.recv(5) == b"hello"


def test_without_egress_the_same_connect_is_reset(networks: ActorNetworks,
                                                  egress_port: int) -> None:
    net = networks.create("actor-a", egress=False)
    with listener(socket.socket(), egress_port), socket_in(net.netns_path) as sock:
        attempt = connect(sock, ("192.0.2.1", 443))
    assert attempt.outcome == "refused" and attempt.seconds < AT_ONCE, attempt


def test_a_connection_that_was_not_redirected_gives_its_own_destination() -> None:
    with listener(socket.socket(), host="127.0.0.1") as lsock, socket.socket() as sock:
        sock.connect(lsock.getsockname())
        conn, _ = lsock.accept()
        with conn:
            try:  # conntrack's original tuple when it tracks the flow, else no answer
                assert original_destination(conn) == lsock.getsockname()
            except AteomError as exc:
                assert exc.code is ErrorCode.FAILED_PRECONDITION
    with socket.socket() as unconnected, pytest.raises(AteomError) as info:
        original_destination(unconnected)
    assert info.value.code is ErrorCode.FAILED_PRECONDITION
    assert "unconnected" in info.value.message


def test_remove_leaves_nothing_and_is_idempotent(networks: ActorNetworks) -> None:
    a = networks.create("actor-a", egress=True)
    b = networks.create("actor-b", egress=False)
    networks.remove("actor-a")
    with pytest.MonkeyPatch.context() as mp:
        # Again (a checkpoint's release after its answer), and one never made: nothing
        # to do, so no nft process and no netlink.
        mp.setattr(networks._nft, "apply", lambda *a, **k: pytest.fail("nft ran"))
        mp.setattr("ateom.network.links.delete", lambda *a: pytest.fail("netlink ran"))
        networks.remove("actor-a")
        networks.remove("never-created")
    assert a.host_if not in worker_links() and b.host_if in worker_links()
    assert not os.path.lexists(a.netns_path)
    assert [os.path.basename(p) for p in mounts_under(Path(networks.run_dir) / "netns")] == [
        f"net-{b.index}"]
    assert table_sets() == {"egress_ifaces": set()}
    assert networks.get("actor-a") is None and networks.owner(a.actor_ip) is None
    assert networks.create("actor-c", egress=False).index == a.index  # its /30 is free again


def test_rearm_puts_back_what_runsc_takes(networks: ActorNetworks) -> None:
    net = networks.create("actor-a", egress=False)
    run_in(net.netns_path, "ip", "addr", "flush", "dev", "eth0")  # as runsc does at create
    assert "default" not in run_in(net.netns_path, "ip", "route")
    assert networks.rearm("actor-a") == net
    assert f"inet {net.actor_ip}/30" in run_in(net.netns_path, "ip", "addr", "show", "eth0")
    assert f"default via {net.host_ip} dev eth0" in run_in(net.netns_path, "ip", "route")
    networks.rearm("actor-a")  # nothing missing: no error


def test_refusals_carry_their_codes(networks: ActorNetworks, tmp_path: Path) -> None:
    networks.create("actor-a", egress=False)
    cases = [
        (lambda: networks.create("actor-a", egress=False), ErrorCode.ALREADY_EXISTS),
        (lambda: networks.create("../x", egress=False), ErrorCode.INVALID_ARGUMENT),
        (lambda: networks.rearm("nobody"), ErrorCode.NOT_FOUND),
        (lambda: ActorNetworks(str(tmp_path), egress_port=None, runner=subprocess_runner)
         .create("a", egress=True), ErrorCode.FAILED_PRECONDITION),
        (lambda: ActorNetworks(str(tmp_path), egress_port=None, runner=subprocess_runner)
         .create("a", egress=False), ErrorCode.FAILED_PRECONDITION),  # not started
    ]
    for call, code in cases:
        with pytest.raises(AteomError) as info:
            call()
        assert info.value.code is code, info.value.message
    assert find_nft() == NFT


def test_a_crashed_daemons_networks_are_swept_by_the_next_start(
        tmp_path: Path, egress_port: int) -> None:
    run_dir = str(tmp_path / "run")
    first = ActorNetworks(run_dir, egress_port=egress_port, runner=subprocess_runner)
    first.start()
    nets: list[ActorNet] = [first.create(u, egress=True) for u in ("crash-a", "crash-b")]
    del first  # the daemon dies: nothing removed
    second = ActorNetworks(run_dir, egress_port=egress_port, runner=subprocess_runner)
    try:
        assert {n.host_if for n in nets} <= worker_links()
        second.start()
        assert not {n.host_if for n in nets} & worker_links()
        assert not any(n.startswith("ate") and len(n) == 15 for n in worker_links())
        assert mounts_under(Path(run_dir) / "netns") == []
        assert os.listdir(Path(run_dir) / "netns") == []
        assert table_sets() == {"egress_ifaces": set()}
        again = second.create("crash-a", egress=False)
        assert again.index == nets[0].index
    finally:
        with contextlib.suppress(AteomError):
            second.stop()
    assert table_sets() is None and mounts_under(Path(run_dir) / "netns") == []


def test_a_failed_create_is_undone(networks: ActorNetworks,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real_build = links.build

    def build_then_fail(net: ActorNet, sock: socket.socket, ns_fd: int) -> None:
        real_build(net, sock, ns_fd)  # everything made: elements, namespace, pair
        raise AteomError(f"actor {net.uid!r}: injected failure")

    monkeypatch.setattr(links, "build", build_then_fail)
    with pytest.raises(AteomError, match="injected failure"):
        networks.create("actor-x", egress=True)
    monkeypatch.undo()
    assert host_ifname(1) not in worker_links()
    assert os.listdir(os.path.join(networks.run_dir, "netns")) == []
    assert mounts_under(Path(networks.run_dir) / "netns") == []
    assert table_sets() == {"egress_ifaces": set()}
    assert networks.get("actor-x") is None
    assert networks.create("actor-y", egress=False).index == 1  # the /30 was given back


def test_what_cannot_be_removed_is_named(networks: ActorNetworks) -> None:
    # A directory where the namespace file goes: neither unmounted nor unlinked.
    # (The first network is subnet 1's.)
    os.makedirs(os.path.join(networks.run_dir, "netns", "net-1", "in-the-way"))
    with pytest.raises(AteomError) as info:
        networks.create("actor-x", egress=False)
    assert "actor-x" in info.value.message and "EISDIR" in info.value.message
    with pytest.raises(NetworkCleanupError) as removing:
        networks.remove("actor-x")
    assert "actor-x" in str(removing.value)
    assert [f for f in removing.value.leftovers if "net-1" in f]
    os.rmdir(os.path.join(networks.run_dir, "netns", "net-1", "in-the-way"))
    os.rmdir(os.path.join(networks.run_dir, "netns", "net-1"))
    networks.remove("actor-x")
    assert networks.create("actor-y", egress=False).index == 1  # held until all of it went


def test_start_without_nft_is_a_precondition(tmp_path: Path) -> None:
    nets = ActorNetworks(str(tmp_path), egress_port=None, runner=subprocess_runner,
                         nft="/nonexistent/nft")
    with pytest.raises(AteomError) as info:
        nets.start()
    assert info.value.code is ErrorCode.FAILED_PRECONDITION
    assert "/nonexistent/nft" in info.value.message


def test_actors_are_created_and_removed_in_parallel(networks: ActorNetworks) -> None:
    uids = [f"par-{i}" for i in range(6)]
    with ThreadPoolExecutor(len(uids)) as pool:
        made = list(pool.map(lambda u: networks.create(u, egress=u.endswith(("0", "2"))), uids))
    assert sorted(n.index for n in made) == list(range(1, 7))
    assert len({n.host_if for n in made}) == 6 and set(networks.actors()) == set(made)
    assert table_sets() == {"egress_ifaces": {made[0].host_if, made[2].host_if}}
    with ThreadPoolExecutor(len(uids)) as pool:
        list(pool.map(networks.remove, uids))
    assert not {n.host_if for n in made} & worker_links() and networks.actors() == []
    assert mounts_under(Path(networks.run_dir) / "netns") == []


UNDER_THE_REAPER = """
import sys
from ateom.network import ActorNetworks
from ateom.process.reaper import Reaper
from ateom.process.runner import reaper_runner
reaper = Reaper().start(reap_all=True)  # the daemon's: waitpid(-1) on every child
nets = ActorNetworks(sys.argv[1], egress_port=None, runner=reaper_runner(reaper))
nets.start()
for _ in range(3):
    net = nets.create("reaped", egress=False)
    nets.remove("reaped")
nets.stop()
print("ok", net.actor_ip)
"""


def test_networks_work_under_the_daemons_reaper(tmp_path: Path) -> None:
    # Nothing here forks a child of its own that the reaper could take away.
    done = subprocess.run([sys.executable, "-c", UNDER_THE_REAPER, str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.split() == ["ok", "169.254.0.6"], done.stderr


def test_without_forwarding_an_actors_connects_are_still_reset_at_once(
        tmp_path: Path, egress_port: int) -> None:
    # A Pod with ip_forward=0 routes nothing between its interfaces: a connect to an
    # outside address or another actor would be dropped by routing before any filter
    # (a timeout). Redirected to the worker itself, it is reset at once all the same.
    with pod_namespace(forwarding=False):
        nets = ActorNetworks(str(tmp_path / "run"), egress_port=egress_port,
                             runner=subprocess_runner)
        nets.start()
        try:
            a = nets.create("actor-a", egress=False)
            b = nets.create("actor-b", egress=True)
            with listener(socket_in(b.netns_path)) as in_b, \
                    listener(socket.socket(), egress_port) as relay:
                for target in [(b.actor_ip, in_b.getsockname()[1]), ("192.0.2.1", 443)]:
                    with socket_in(a.netns_path) as sock:
                        attempt = connect(sock, target)
                    assert attempt.outcome == "refused" and attempt.seconds < AT_ONCE, \
                        (target, attempt)
                with socket_in(b.netns_path) as sock:  # egress needs no forwarding
                    assert connect(sock, ("192.0.2.1", 443)).outcome == "connected"
                    relay.accept()[0].close()
        finally:
            nets.stop()


def test_link_local_addresses_the_worker_already_uses_are_never_handed_out(
        tmp_path: Path) -> None:
    subprocess.run(["ip", "addr", "add", "169.254.0.5/32", "dev", "eth0"], check=True)
    subprocess.run(["ip", "route", "add", "169.254.0.8/29", "dev", "eth0"], check=True)
    subprocess.run(["ip", "route", "add", "169.254.0.0/16", "dev", "eth0"], check=True)  # zeroconf
    nets = ActorNetworks(str(tmp_path / "run"), egress_port=None, runner=subprocess_runner)
    nets.start()
    try:
        assert nets.create("actor-a", egress=False).index == 4  # not 1, 2 or 3
    finally:
        nets.stop()


def test_an_actor_without_egress_costs_no_nft_run(networks: ActorNetworks) -> None:
    # Its link is the firewall's by name from the moment it exists: no element to add
    # on the way in, none to delete on the way out.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(networks._nft, "apply", lambda *a, **k: pytest.fail("nft ran"))
        net = networks.create("actor-a", egress=False)
        networks.remove("actor-a")
    assert net.host_if not in worker_links()


def test_warm_networks_are_made_ahead_taken_by_actors_and_made_again(
        tmp_path: Path, egress_port: int) -> None:
    nets = ActorNetworks(str(tmp_path / "run"), egress_port=egress_port,
                         runner=subprocess_runner, warm=2)
    nets.start()
    try:
        assert nets.warm.wait_full(10)
        before = link_indexes()
        waiting = sorted(n for n in before if n.startswith("ate"))
        assert waiting == [host_ifname(1), host_ifname(2)]
        assert len(mounts_under(Path(nets.run_dir) / "netns")) == 2
        a = nets.create("actor-a", egress=True)
        # The oldest ready one, the very link made ahead (same ifindex), now a's, with
        # its egress element; the actor side configured as for a network made on the spot.
        assert (a.uid, a.host_if, a.egress) == ("actor-a", host_ifname(1), True)
        assert link_indexes()[a.host_if] == before[a.host_if]
        assert table_sets() == {"egress_ifaces": {a.host_if}}
        assert f"inet {a.actor_ip}/30" in run_in(a.netns_path, "ip", "addr", "show", "eth0")
        assert f"default via {a.host_ip} dev eth0" in run_in(a.netns_path, "ip", "route")
        with socket_in(a.netns_path) as sock, listener(socket.socket(), egress_port) as relay:
            assert connect(sock, ("192.0.2.1", 443)).outcome == "connected"
            relay.accept()[0].close()
        assert nets.warm.wait_full(10)  # made again, on the next free /30
        assert host_ifname(3) in link_indexes() and nets.warm.made == 3
        nets.remove("actor-a")
        assert a.host_if not in link_indexes() and table_sets() == {"egress_ifaces": set()}
    finally:
        nets.stop()
    assert not [n for n in link_indexes() if n.startswith("ate")]
    assert mounts_under(Path(tmp_path / "run" / "netns")) == [] and table_sets() is None


def test_a_warm_network_that_cannot_be_made_is_retried_and_runs_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = links.build
    iota = iter(range(2))

    def fails_twice(net: ActorNet, sock: socket.socket, ns_fd: int) -> None:
        if next(iota, None) is not None:
            raise OSError(errno.ENOBUFS, "injected")
        real(net, sock, ns_fd)

    monkeypatch.setattr(links, "build", fails_twice)
    nets = ActorNetworks(str(tmp_path / "run"), egress_port=None, runner=subprocess_runner,
                         warm=1)
    nets.start()
    try:
        # Both failures undone (nothing of them left), then made after 0.5 s and 1 s.
        assert nets.warm.wait_full(10) and nets.warm.failed == 2
        assert next(iota, None) is None
        assert [n for n in link_indexes() if n.startswith("ate")] == [host_ifname(1)]
        assert len(mounts_under(Path(nets.run_dir) / "netns")) == 1
        a = nets.create("actor-a", egress=False)
        b = nets.create("actor-b", egress=False)  # the pool empty: made on the spot
        assert {a.index, b.index} == {1, 2} and a.host_if in link_indexes()
    finally:
        nets.stop()
    assert not [n for n in link_indexes() if n.startswith("ate")]
