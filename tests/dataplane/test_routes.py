"""The pure parts: the route table, Host parsing, control lines, addresses,
identities and the original-destination sockaddr."""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest

from ateom.dataplane.control import Control, LineSplitter
from ateom.dataplane.counters import Counters
from ateom.dataplane.routes import (
    Route,
    RouteError,
    RouteTable,
    parse_address,
    parse_host,
    split_host_port,
)
from ateom.dataplane.tls import identity_problem
from ateom.dataplane.wire import end_to_end
from ateom.errors import AteomError
from ateom.network.redirect import original_destination, parse_sockaddr

ROUTE: dict[str, Any] = {"uid": "u1", "atespace": "gpu-demo", "name": "gpu-1",
                         "ip": "169.254.0.6", "port": 80, "state": "running",
                         "egress_gateway": "gw.example:443"}


@pytest.mark.parametrize(("host", "want"), [
    ("gpu-1.gpu-demo.actors.resources.substrate.ate.dev", ("gpu-1", "gpu-demo")),
    ("GPU-1.Gpu-Demo.actors.example:8443", ("gpu-1", "gpu-demo")),
    ("gpu-1.gpu-demo", ("gpu-1", "gpu-demo")),
    ("gpu-1.gpu-demo.", ("gpu-1", "gpu-demo")),
])
def test_a_host_names_actor_and_atespace(host: str, want: tuple[str, str]) -> None:
    assert parse_host(host) == want


@pytest.mark.parametrize("host", ["gpu-1", "gpu-1:80", "", ".gpu-demo", "gpu-1..x",
                                  "[::1]:443"])
def test_a_host_of_fewer_than_two_labels_is_a_bad_request(host: str) -> None:
    with pytest.raises(RouteError):
        parse_host(host)


def test_routes_are_found_by_host_and_by_ip_and_the_newest_claim_wins() -> None:
    table = RouteTable()
    table.upsert(Route.from_json(ROUTE))
    assert table.by_host("gpu-1.gpu-demo.x").uid == "u1"  # type: ignore[union-attr]
    assert table.by_ip("169.254.0.6").uid == "u1"  # type: ignore[union-attr]
    assert table.by_ip("::ffff:169.254.0.6").uid == "u1"  # type: ignore[union-attr]
    table.upsert(Route.from_json({**ROUTE, "uid": "u2"}))  # re-created, same name and ip
    table.forget("u1")  # forgetting the old one leaves the new one
    assert table.by_host("gpu-1.gpu-demo").uid == "u2"  # type: ignore[union-attr]
    assert table.by_ip("169.254.0.6").uid == "u2"  # type: ignore[union-attr]
    table.upsert(Route.from_json({**ROUTE, "uid": "u2", "ip": "169.254.0.7"}))  # moved
    assert table.by_ip("169.254.0.6") is None and len(table) == 1
    assert table.forget("u2") is not None and table.by_host("gpu-1.gpu-demo") is None
    assert table.by_ip("not an ip") is None


@pytest.mark.parametrize("change", [
    {"uid": ""}, {"name": "Not_A_Label"}, {"atespace": None}, {"ip": "169.254.0.300"},
    {"port": 0}, {"port": "80"}, {"port": True}, {"state": "dancing"},
    {"egress_gateway": "no-port"}, {"egress_gateway": 5}, {"colour": "red"},
])
def test_a_malformed_route_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(RouteError):
        Route.from_json({**ROUTE, **change})


def test_a_route_is_normalised() -> None:
    route = Route.from_json({"uid": "u", "atespace": "A", "name": "B", "ip": "::FFFF:1.2.3.4"})
    assert (route.atespace, route.name, route.port, route.state) == ("a", "b", 80, "running")
    assert route.ip == "1.2.3.4"  # as an IPv4 peer on a dual-stack socket reads
    assert route.egress_gateway is None


def test_control_lines_upsert_forget_and_answer_ping_and_stats() -> None:
    table, counters = RouteTable(), Counters()
    control = Control(table, counters)
    assert control.handle_line(b'{"op":"route","uid":"u1","atespace":"a","name":"n",'
                               b'"ip":"10.0.0.1"}') is None
    assert control.handle_line(b'{"op":"ping","id":7}') == {"op": "pong", "id": 7}
    stats = control.handle_line(b'{"op":"stats"}')
    assert stats is not None and stats["routes"] == 1 and stats["id"] is None
    assert control.handle_line(b'{"op":"forget","uid":"u1"}') is None and len(table) == 0
    for bad in (b"{", b"3", b'{"op":"ping","id":[1]}', b'{"op":"route"}'):
        assert control.handle_line(bad) is None
    assert counters.control_errors == 4
    assert control.handle_line(b"   ") is None and counters.control_errors == 4


def test_lines_are_split_and_overlong_ones_dropped_whole() -> None:
    splitter = LineSplitter(limit=10)
    assert splitter.feed(b"one\ntw") == [b"one"]
    assert splitter.feed(b"o\n") == [b"two"]
    assert splitter.feed(b"x" * 25) == [] and splitter.dropped == 1  # bounded: forgotten
    assert splitter.feed(b"yyy\nthree\n") == [b"three"]  # the overlong line's tail too
    assert splitter.feed(b"x" * 11 + b"\nfour\n") == [b"four"] and splitter.dropped == 2


@pytest.mark.parametrize(("text", "want"), [
    (":443", (None, 443)), ("0.0.0.0:15001", ("0.0.0.0", 15001)), ("[::]:443", (None, 443)),
    ("[::1]:8443", ("::1", 8443)),
])
def test_listen_addresses(text: str, want: tuple[str | None, int]) -> None:
    assert parse_address(text) == want


@pytest.mark.parametrize("text", ["443", "host:", "host:99999", "host:x"])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_address(text)


def test_gateway_addresses() -> None:
    assert split_host_port("gw.example:443") == ("gw.example", 443)
    assert split_host_port("[fd00::1]:8443") == ("fd00::1", 8443)


def test_the_original_destination_is_read_from_a_sockaddr() -> None:
    v4 = struct.pack("=H", socket.AF_INET) + struct.pack("!H", 8080) \
        + socket.inet_aton("93.184.216.34") + bytes(8)
    assert parse_sockaddr(v4) == ("93.184.216.34", 8080)
    v6 = struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", 443, 0) \
        + socket.inet_pton(socket.AF_INET6, "2001:db8::1") + bytes(4)
    assert parse_sockaddr(v6) == ("2001:db8::1", 443)
    with pytest.raises(ValueError):
        parse_sockaddr(bytes(3))


def test_the_identity_is_a_uri_san() -> None:
    want = "spiffe://cluster.local/ns/ate-system/sa/atenet-router"
    good = {"subject": ((("commonName", "router"),),), "subjectAltName": (("URI", want),)}
    assert identity_problem(good, want) is None
    bad = {"subject": ((("commonName", "x"),),),
           "subjectAltName": (("DNS", want), ("URI", "spiffe://other"))}
    problem = identity_problem(bad, want)
    assert problem is not None and "spiffe://other" in problem and "commonName=x" in problem
    assert "no URI SAN" in (identity_problem({}, want) or "")


def test_hop_by_hop_headers_and_those_connection_names_are_dropped() -> None:
    headers = [(b"Connection", b"close, X-A"), (b"X-A", b"1"), (b"Upgrade", b"h2c"),
               (b"Keep-Alive", b"5"), (b"Host", b"h"), (b"Transfer-Encoding", b"chunked")]
    assert end_to_end(headers) == [(b"Host", b"h"), (b"Transfer-Encoding", b"chunked")]


def test_the_default_original_destination_reads_the_kernels_answer() -> None:
    # Not redirected here: with conntrack loaded the kernel answers the address
    # connected to; without it, an OSError (the relay then resets, "no_destination").
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()):
        accepted, _ = server.accept()
        with accepted:
            try:
                got = original_destination(accepted)
            except AteomError:
                return
            assert got == server.getsockname()


class TestHolds:
    """Connections to an actor are cut the moment it stops running."""

    def _table(self) -> tuple[RouteTable, list[str]]:
        table = RouteTable()
        table.upsert(Route(uid="u1", atespace="team", name="app", ip="169.254.0.2"))
        return table, []

    def test_leaving_running_cuts_every_held_connection(self) -> None:
        table, cut = self._table()
        table.hold("u1", lambda: cut.append("a"))
        table.hold("u1", lambda: cut.append("b"))
        table.upsert(Route(uid="u1", atespace="team", name="app", ip="169.254.0.2",
                           state="checkpointing"))
        assert sorted(cut) == ["a", "b"]
        assert table.held("u1") == 0

    def test_staying_running_cuts_nothing(self) -> None:
        table, cut = self._table()
        table.hold("u1", lambda: cut.append("a"))
        table.upsert(Route(uid="u1", atespace="team", name="app", ip="169.254.0.2"))
        assert cut == [] and table.held("u1") == 1

    def test_moving_cuts(self) -> None:
        table, cut = self._table()
        table.hold("u1", lambda: cut.append("a"))
        table.upsert(Route(uid="u1", atespace="team", name="app", ip="169.254.0.6"))
        assert cut == ["a"]

    def test_forget_cuts_and_release_unregisters(self) -> None:
        table, cut = self._table()
        release = table.hold("u1", lambda: cut.append("a"))
        table.hold("u1", lambda: cut.append("b"))
        release()
        table.forget("u1")
        assert cut == ["b"]

    def test_holding_a_stopped_actor_cuts_at_once(self) -> None:
        table, cut = self._table()
        table.upsert(Route(uid="u1", atespace="team", name="app", ip="169.254.0.2",
                           state="exited"))
        table.hold("u1", lambda: cut.append("a"))
        table.hold("gone", lambda: cut.append("b"))
        assert cut == ["a", "b"] and table.held("u1") == 0
