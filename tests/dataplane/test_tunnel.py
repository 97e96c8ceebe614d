"""CONNECT tunnels on the connect listener: a byte splice to any port of an actor,
behind the same mutual TLS and identity rule as the ingress."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dataplane.support import Certs, DataPlane, EchoServer, client_context, read_head

AUTHORITY = "echo.space.actors.resources.substrate.ate.dev"


@pytest.fixture(scope="module")
def echo(dataplane: DataPlane) -> Iterator[EchoServer]:
    server = EchoServer()
    dataplane.route("echo", 80)  # the route's port is the HTTP app's; CONNECT names its own
    yield server
    server.stop()


def tunnel(dataplane: DataPlane, certs: Certs, request: bytes,
           who: tuple[Path, Path] | None = None) -> tuple[ssl.SSLSocket, bytes, bytes]:
    ctx = client_context(certs, who or certs.router)
    sock = ctx.wrap_socket(socket.create_connection(dataplane.address("connect")),
                           server_hostname="127.0.0.1")
    sock.settimeout(15)
    sock.sendall(request)
    head, rest = read_head(sock)
    return sock, head, rest


def recv_exactly(sock: ssl.SSLSocket, size: int, already: bytes = b"") -> bytes:
    data = already
    while len(data) < size:
        block = sock.recv(size - len(data))
        assert block, data
        data += block
    return data


def test_connect_splices_bytes_both_ways_to_the_actors_port(
        dataplane: DataPlane, certs: Certs, echo: EchoServer) -> None:
    target = f"{AUTHORITY}:{echo.port}"
    # The first bytes for the actor ride in the same write as the CONNECT head.
    sock, head, rest = tunnel(dataplane, certs,
                              f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
                              "early ".encode())
    with sock:
        assert head.startswith(b"HTTP/1.1 200"), head
        assert recv_exactly(sock, len(b"hello\nearly "), rest) == b"hello\nearly "
        payload = bytes(range(256)) * 4096
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload
    assert dataplane.stats()["tunnels"]["spliced"] >= 1


@pytest.mark.parametrize(("target", "status"), [
    ("ghost.space.actors.example:80", b"404"),
    ("sleeping.space.actors.example:80", b"503"),
    ("offline.space.actors.example:80", b"502"),
    ("echo:80", b"400"),
])
def test_connect_refuses_what_is_not_there_or_not_running(
        dataplane: DataPlane, certs: Certs, echo: EchoServer, target: str,
        status: bytes) -> None:
    dataplane.route("sleeping", echo.port, state="checkpointing")
    dataplane.route("offline", echo.port, ip=None)
    sock, head, _ = tunnel(dataplane, certs, f"CONNECT {target} HTTP/1.1\r\nHost: {target}"
                           "\r\n\r\n".encode())
    with sock:
        assert head.split(b" ")[1] == status, head
        if status == b"503":
            assert b"retry-after: 1" in head.lower()


def test_connect_needs_the_routers_identity(dataplane: DataPlane, certs: Certs,
                                            echo: EchoServer) -> None:
    target = f"{AUTHORITY}:{echo.port}"
    sock, head, rest = tunnel(dataplane, certs, f"CONNECT {target} HTTP/1.1\r\nHost: "
                              f"{target}\r\n\r\n".encode(), who=certs.intruder)
    with sock:
        assert head.startswith(b"HTTP/1.1 403") and b"intruder" in rest


def test_the_connect_listener_takes_only_connect(dataplane: DataPlane, certs: Certs,
                                                 echo: EchoServer) -> None:
    sock, head, _ = tunnel(dataplane, certs, f"GET / HTTP/1.1\r\nHost: {AUTHORITY}\r\n\r\n"
                           .encode())
    with sock:
        assert head.startswith(b"HTTP/1.1 400"), head
