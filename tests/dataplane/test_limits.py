"""Bounds and rotation, each on a data plane of its own: the cap on client
connections, and credential bundles replaced under a running data plane."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from tests.dataplane.support import (
    Backend,
    Certs,
    DataPlane,
    client_context,
    ingress_args,
    read_head,
)


def handshake(dp: DataPlane, certs: Certs) -> ssl.SSLSocket:
    ctx = client_context(certs, certs.router)
    sock = ctx.wrap_socket(socket.create_connection(dp.address("ingress"), timeout=10),
                           server_hostname="127.0.0.1")
    return sock


def eventually(check: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_connections_beyond_the_cap_are_closed_at_once_and_counted(
        certs: Certs, tmp_path: Path) -> None:
    dp = DataPlane(ingress_args(certs, "--max-connections", "2"), tmp_path / "dp.log")
    try:
        held = [handshake(dp, certs) for _ in range(2)]
        eventually(lambda: dp.stats()["connections_open"] == 2)
        start = time.monotonic()
        try:
            extra = handshake(dp, certs)
        except (ssl.SSLError, ConnectionError):
            pass  # closed before the handshake could finish
        else:
            extra.settimeout(5)
            assert extra.recv(10) == b"", "a third connection was served"
        assert time.monotonic() - start < 3
        stats = dp.stats()
        assert stats["connections_refused"] == 1 and stats["connections_open"] == 2
        held.pop().close()  # room again: served
        eventually(lambda: dp.stats()["connections_open"] == 1)
        handshake(dp, certs).close()
        for sock in held:
            sock.close()
    finally:
        assert dp.stop() == 0


def replace(path: Path, text: str) -> None:
    """As the kubelet updates a projected volume: a new file renamed over the old."""
    new = path.with_suffix(".new")
    new.write_text(text)
    os.replace(new, path)


def test_a_rotated_credential_bundle_serves_new_connections_and_a_bad_one_is_ignored(
        certs: Certs, tmp_path: Path) -> None:
    bundle = tmp_path / "credential-bundle.pem"
    shutil.copy(certs.credential, bundle)
    backend = Backend("alpha")
    dp = DataPlane(ingress_args(certs, "--tls-reload-interval", "0.2", credential=bundle),
                   tmp_path / "dp.log")
    try:
        dp.route("alpha", backend.port)
        old = handshake(dp, certs)
        assert old.getpeercert(binary_form=True) == certs.der(certs.credential)

        replace(bundle, certs.credential2.read_text())
        time.sleep(0.5)
        with handshake(dp, certs) as new:
            assert new.getpeercert(binary_form=True) == certs.der(certs.credential2)
        assert dp.stats()["tls_reloads"] == 1

        replace(bundle, "-----BEGIN CERTIFICATE-----\nnot one\n")  # half written, say
        time.sleep(0.5)
        with handshake(dp, certs) as still:
            assert still.getpeercert(binary_form=True) == certs.der(certs.credential2)
        assert dp.stats()["tls_reload_failures"] == 1
        assert any(line.get("event", "").startswith("tls bundle reload failed")
                   for line in dp.lines())
        # The connection opened before the rotation goes on with its own certificate.
        old.sendall(b"GET /who HTTP/1.1\r\nHost: alpha.space.x\r\n\r\n")
        assert old.recv(12) == b"HTTP/1.1 200"
        old.close()
    finally:
        assert dp.stop() == 0
        backend.stop()


def test_an_idle_keep_alive_connection_is_closed_quietly(certs: Certs, tmp_path: Path) -> None:
    backend = Backend("alpha")
    dp = DataPlane(ingress_args(certs, "--idle-timeout", "1"), tmp_path / "dp.log")
    try:
        dp.route("alpha", backend.port)
        with handshake(dp, certs) as sock:
            sock.settimeout(10)
            sock.sendall(b"GET /who HTTP/1.1\r\nHost: alpha.space.x\r\n\r\n")
            head, rest = read_head(sock)
            assert head.startswith(b"HTTP/1.1 200")
            start = time.monotonic()
            tail = rest
            while block := sock.recv(65536):  # the rest of the body, then the close
                tail += block
            assert 0.8 < time.monotonic() - start < 5
            assert b"HTTP/1.1" not in tail  # closed without an answer of its own (no 408)
        eventually(lambda: dp.stats()["connections_open"] == 0)
    finally:
        assert dp.stop() == 0
        backend.stop()
