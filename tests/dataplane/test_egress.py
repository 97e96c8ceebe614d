"""The egress relay against a real CONNECT proxy: Debian's squid (squid-openssl) as
the egress gateway, over mutual TLS; and the resets when there is no way out.

The data plane runs as a subprocess whose `original_destination` is replaced by
one reading the test's echo server address from a file (there is no nftables
REDIRECT here); the actor is a socket bound to 127.0.0.5, its route's ip.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dataplane.support import Certs, DataPlane, EchoServer, free_port
from tests.support.squid import running_squid

ACTOR_IP = "127.0.0.5"
DENIED_PORT = 7  # squid refuses CONNECT to it (403)
LAUNCHER = """
import os, sys
from pathlib import Path
from ateom.dataplane.process import main

def destination(sock):
    host, port = Path(os.environ["DATAPLANE_TEST_DESTINATION"]).read_text().split()
    return host, int(port)

# The test's echo server and squid are on loopback, which the relay's own rule refuses
# (DATAPLANE_TEST_KEEP_RULE keeps it, for the test of that rule).
keep = os.environ.get("DATAPLANE_TEST_KEEP_RULE") == "1"
sys.exit(main(destination=destination, forbidden=None if keep else (lambda ip: "")))
"""


@pytest.fixture(scope="module")
def squid(certs: Certs) -> Iterator[tuple[int, Path]]:
    with running_squid(certs, denied_port=DENIED_PORT) as started:
        yield started


@pytest.fixture(scope="module")
def relay(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataPlane]:
    d = tmp_path_factory.mktemp("egress")
    (d / "destination").write_text("127.0.0.1 1")
    dp = DataPlane(["--egress", "127.0.0.1:0", "--credential-bundle", str(certs.credential),
                    "--egress-trust-bundle", str(certs.trust), "--egress-linger", "3"],
                   d / "dataplane.log",
                   script=LAUNCHER, env={"DATAPLANE_TEST_DESTINATION": str(d / "destination")})
    yield dp
    assert dp.stop() == 0
    assert "Traceback" not in dp.log.read_text(), dp.log.read_text()[-5000:]


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.stop()


def aim(relay: DataPlane, host: str, port: int) -> None:
    """Where the relay will believe the actor's next connection was going."""
    (relay.log.parent / "destination").write_text(f"{host} {port}")


def actor_connects(relay: DataPlane, ip: str = ACTOR_IP) -> socket.socket:
    sock = socket.socket()
    sock.bind((ip, 0))
    sock.settimeout(15)
    sock.connect(relay.address("egress"))
    return sock


def assert_reset(relay: DataPlane, ip: str = ACTOR_IP, within: float = 2.0) -> None:
    """The actor's connection is reset (ECONNRESET: at its first read, or already
    at connect when the relay is that quick), and soon."""
    start = time.monotonic()
    with pytest.raises(ConnectionResetError):
        with actor_connects(relay, ip) as sock:
            data = sock.recv(100)
            raise AssertionError(f"no reset: read {data!r}")
    assert time.monotonic() - start < within


def test_egress_goes_through_a_real_connect_proxy_and_back(
        relay: DataPlane, squid: tuple[int, Path], echo: EchoServer) -> None:
    port, squid_dir = squid
    relay.route("egressor", 80, ip=ACTOR_IP, egress_gateway=f"localhost:{port}")
    aim(relay, "127.0.0.1", echo.port)
    with actor_connects(relay) as sock:
        assert sock.recv(6) == b"hello\n"  # the echo server's greeting, through squid
        payload = os.urandom(300_000)
        sock.sendall(payload)
        got = b""
        while len(got) < len(payload):
            got += sock.recv(65536)
        assert got == payload
        # A half-close cannot cross TLS to the gateway; the answer still comes back.
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        got = b""
        while block := sock.recv(65536):
            got += block
        assert got == b"last words"
    assert relay.stats()["egress"]["relayed"] == 1
    deadline = time.monotonic() + 10  # squid logs a tunnel when it ends
    while f"CONNECT 127.0.0.1:{echo.port}" not in _read(squid_dir / "access.log"):
        assert time.monotonic() < deadline, _read(squid_dir / "access.log")
        time.sleep(0.1)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_gateway_refusing_the_destination_resets_the_actor(
        relay: DataPlane, squid: tuple[int, Path]) -> None:
    relay.route("egressor", 80, ip=ACTOR_IP, egress_gateway=f"localhost:{squid[0]}")
    aim(relay, "127.0.0.1", DENIED_PORT)
    assert_reset(relay)
    assert relay.stats()["egress"]["gateway_refused"] == 1
    line = next(x for x in relay.lines() if x.get("outcome") == "gateway_refused")
    assert line["actor"] == "space/egressor" and "403" in line["reason"]
    assert line["destination"] == f"127.0.0.1:{DENIED_PORT}"


def test_a_gateway_that_is_down_resets_the_actor_at_once(
        relay: DataPlane, echo: EchoServer) -> None:
    down = f"127.0.0.1:{free_port()}"
    relay.route("egressor", 80, ip=ACTOR_IP, egress_gateway=down)
    aim(relay, "127.0.0.1", echo.port)
    assert_reset(relay, within=2.0)  # far under the 5 s connect timeout
    line = next(x for x in relay.lines() if x.get("outcome") == "gateway_unreachable")
    assert line["gateway"] == down and line["destination"] == f"127.0.0.1:{echo.port}"
    assert line["actor"] == "space/egressor" and line["reason"]


def test_a_gateway_that_does_not_speak_tls_resets_the_actor(
        relay: DataPlane, echo: EchoServer) -> None:
    relay.route("egressor", 80, ip=ACTOR_IP, egress_gateway=f"127.0.0.1:{echo.port}")
    aim(relay, "127.0.0.1", echo.port)
    assert_reset(relay)
    assert relay.stats()["egress"]["gateway_tls"] == 1


@pytest.mark.parametrize(("ip", "state", "gateway", "outcome"), [
    (ACTOR_IP, "running", None, "no_gateway"),
    (ACTOR_IP, "checkpointing", "localhost:1", "not_running"),
    ("127.0.0.9", "running", "localhost:1", "unknown_peer"),
])
def test_an_actor_with_no_way_out_is_reset(relay: DataPlane, echo: EchoServer, ip: str,
                                           state: str, gateway: str | None,
                                           outcome: str) -> None:
    relay.route("egressor", 80, ip=ACTOR_IP, state=state, egress_gateway=gateway)
    aim(relay, "127.0.0.1", echo.port)
    before = relay.stats()["egress"][outcome]
    assert_reset(relay, ip)
    assert relay.stats()["egress"][outcome] == before + 1


@pytest.fixture(scope="module")
def ruled_relay(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataPlane]:
    """A relay with its own destination rule (the worker's addresses, loopback,
    link-local): what the daemon runs."""
    d = tmp_path_factory.mktemp("egress-ruled")
    dp = DataPlane(["--egress", "127.0.0.1:0", "--credential-bundle", str(certs.credential),
                    "--egress-trust-bundle", str(certs.trust)], d / "dataplane.log",
                   script=LAUNCHER, env={"DATAPLANE_TEST_DESTINATION": str(d / "destination"),
                                         "DATAPLANE_TEST_KEEP_RULE": "1"})
    yield dp
    assert dp.stop() == 0


@pytest.mark.parametrize("destination", ["127.0.0.1", "169.254.169.254", "0.0.0.0",
                                         "WORKER"])
def test_no_actor_reaches_the_worker_or_a_link_local_address_through_the_gateway(
        ruled_relay: DataPlane, destination: str) -> None:
    # The gateway would connect from its own side: to the worker's Pod address (its
    # ports), to the node's metadata service, to the gateway's own loopback. Refused.
    if destination == "WORKER":
        from ateom.dataplane.egress import worker_addresses
        destination = sorted(a for a in worker_addresses() if not a.startswith("127."))[0]
    ruled_relay.route("egressor", 80, ip=ACTOR_IP, state="running",
                      egress_gateway="gateway.invalid:3128")
    aim(ruled_relay, destination, 443)
    before = ruled_relay.stats()["egress"]["forbidden"]
    assert_reset(ruled_relay)
    assert ruled_relay.stats()["egress"]["forbidden"] == before + 1
