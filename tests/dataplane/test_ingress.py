"""The ingress, as Substrate's router sees it: HTTPS with a client certificate,
routed by Host to actors' apps, and the data plane's own answers when it cannot."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from tests.dataplane.support import (
    HOST,
    INTRUDER_ID,
    Backend,
    Certs,
    DataPlane,
    client_context,
    free_port,
    read_head,
)


def get(conn: http.client.HTTPSConnection, name: str, path: str = "/who",
        headers: dict[str, str] | None = None) -> tuple[http.client.HTTPResponse, bytes]:
    conn.request("GET", path, headers={"Host": HOST.format(name=name), **(headers or {})})
    response = conn.getresponse()
    return response, response.read()


def seen(body: bytes) -> dict[str, Any]:
    """What the back-end says it was sent, headers lowercased."""
    got = json.loads(body)
    got["headers"] = {k.lower(): v for k, v in got["headers"]}
    return dict(got)


def test_requests_reach_the_actor_their_host_names(dataplane: DataPlane, certs: Certs) -> None:
    conn = dataplane.https(certs)
    for name in ("alpha", "beta", "alpha"):
        response, body = get(conn, name)
        assert response.status == 200 and seen(body)["backend"] == name
    # Case and a :port suffix do not matter; two labels are enough.
    response, body = get(conn, "x", headers={"Host": "BETA.Space.actors.example:443"})
    assert seen(body)["backend"] == "beta"
    response, body = get(conn, "x", headers={"Host": "alpha.space"})
    assert seen(body)["backend"] == "alpha"


def test_the_actor_sees_forwarded_headers_and_no_hop_by_hop_ones(
        dataplane: DataPlane, certs: Certs) -> None:
    conn = dataplane.https(certs)
    _, body = get(conn, "alpha", headers={
        "Connection": "keep-alive, X-Hop", "X-Hop": "1", "Keep-Alive": "timeout=5",
        "Proxy-Authorization": "Basic c2VjcmV0", "TE": "trailers", "X-Forwarded-For": "10.9.9.9",
        "X-Forwarded-Proto": "http", "X-End-To-End": "kept"})
    headers = seen(body)["headers"]
    assert headers["x-forwarded-for"] == "10.9.9.9, 127.0.0.1"
    assert headers["x-forwarded-proto"] == "https"
    assert headers["x-end-to-end"] == "kept"
    for hop in ("x-hop", "keep-alive", "proxy-authorization", "te", "connection"):
        assert hop not in headers, (hop, headers)


def test_an_unknown_actor_is_404_naming_it(dataplane: DataPlane, certs: Certs) -> None:
    conn = dataplane.https(certs)
    response, body = get(conn, "nobody")
    assert response.status == 404 and b"'nobody'" in body and body.endswith(b"\n")
    response, body = get(conn, "alpha")  # the connection goes on
    assert response.status == 200


def test_a_host_of_one_label_is_a_bad_request(dataplane: DataPlane, certs: Certs) -> None:
    conn = dataplane.https(certs)
    response, body = get(conn, "x", headers={"Host": "alpha"})
    assert response.status == 400 and b"alpha" in body


@pytest.mark.parametrize("state", ["booting", "checkpointing", "restoring"])
def test_an_actor_that_is_not_running_is_503_with_retry_after(
        dataplane: DataPlane, certs: Certs, backends: tuple[Backend, Backend],
        state: str) -> None:
    dataplane.route("sleepy", backends[0].port, state=state)
    response, body = get(dataplane.https(certs), "sleepy")
    assert response.status == 503
    assert response.getheader("Retry-After") == "1"
    assert state.encode() in body and b"space/sleepy" in body
    dataplane.route("sleepy", backends[0].port)  # running again: served
    assert get(dataplane.https(certs), "sleepy")[0].status == 200


def test_a_running_actor_without_a_network_is_502_saying_so_not_404(
        dataplane: DataPlane, certs: Certs) -> None:
    dataplane.route("offline", 80, ip=None)
    response, body = get(dataplane.https(certs), "offline")
    assert response.status == 502 and response.getheader("Retry-After") is None
    assert body == (b"actor space/offline has no network on this worker (its runsc runs it"
                    b" with --network=none)\n"), body


def test_a_client_with_another_spiffe_id_is_403_naming_what_it_presented(
        dataplane: DataPlane, certs: Certs) -> None:
    before = dataplane.stats()["identity_rejected"]
    response, body = get(dataplane.https(certs, certs.intruder), "alpha")
    assert response.status == 403
    assert INTRUDER_ID.encode() in body and body.count(b"\n") == 1
    assert response.getheader("Connection") == "close"
    assert dataplane.stats()["identity_rejected"] == before + 1


@pytest.mark.parametrize("who", ["untrusted", "none"])
def test_the_handshake_is_refused_for_an_untrusted_ca_or_no_client_certificate(
        dataplane: DataPlane, certs: Certs, who: str) -> None:
    before = dataplane.stats()["tls_failed"]
    ctx = client_context(certs, certs.untrusted if who == "untrusted" else None)
    host, port = dataplane.address("ingress")
    conn = http.client.HTTPSConnection(host, port, timeout=10, context=ctx)
    # TLS 1.3: the server's refusal may reach the client at its first read.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        get(conn, "alpha")
    deadline = time.monotonic() + 5
    while dataplane.stats()["tls_failed"] == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dataplane.stats()["tls_failed"] == before + 1


def test_keep_alive_serves_many_requests_on_one_connection_and_one_upstream(
        dataplane: DataPlane, certs: Certs, backends: tuple[Backend, Backend]) -> None:
    fresh = Backend("gamma")
    try:
        dataplane.route("gamma", fresh.port)
        opened = dataplane.stats()["upstream_opened"]
        conn = dataplane.https(certs)
        get(conn, "gamma")
        sock = conn.sock
        for _ in range(9):
            response, body = get(conn, "gamma")
            assert response.status == 200 and seen(body)["backend"] == "gamma"
        assert conn.sock is sock  # the client's TLS connection was kept
        assert fresh.connections == 1  # and so was the data plane's to the actor
        assert dataplane.stats()["upstream_opened"] == opened + 1
        get(conn, "alpha")  # another Host: another upstream
        get(conn, "gamma")
        assert fresh.connections == 2
    finally:
        fresh.stop()


HANGING_APP = r"""
import http.server, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        print("got", flush=True)
        time.sleep(3600)
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def test_a_request_in_flight_when_its_actor_is_checkpointed_is_503_naming_it(
        dataplane: DataPlane, certs: Certs) -> None:
    app = subprocess.Popen([sys.executable, "-c", HANGING_APP], stdout=subprocess.PIPE,
                           text=True)
    try:
        assert app.stdout is not None
        dataplane.route("frozen", int(app.stdout.readline()))
        result: dict[str, Any] = {}

        def call() -> None:
            response, body = get(dataplane.https(certs), "frozen")
            result.update(status=response.status, body=body,
                          retry=response.getheader("Retry-After"))
        caller = threading.Thread(target=call)
        caller.start()
        assert app.stdout.readline().strip() == "got"  # the actor has the request
        app.kill()  # as a checkpoint takes the sandbox away mid-request
        caller.join(20)
        assert result["status"] == 503 and result["retry"] == "1"
        assert b"checkpointed" in result["body"] and b"space/frozen" in result["body"]
    finally:
        app.kill()
        app.wait()


def test_a_request_in_flight_is_cut_503_the_moment_the_daemon_says_checkpointing(
        dataplane: DataPlane, certs: Certs) -> None:
    """A checkpointed actor's veth is gone: no RST ever comes, so without the cut
    the caller would wait out the response timeout (a 504 after 3 s here)."""
    app = subprocess.Popen([sys.executable, "-c", HANGING_APP], stdout=subprocess.PIPE,
                           text=True)
    try:
        assert app.stdout is not None
        port = int(app.stdout.readline())
        dataplane.route("frozen", port)
        before = dataplane.stats()["answers"]["checkpointed"]
        result: dict[str, Any] = {}

        def call() -> None:
            response, body = get(dataplane.https(certs), "frozen")
            result.update(status=response.status, body=body)
        caller = threading.Thread(target=call)
        caller.start()
        assert app.stdout.readline().strip() == "got"  # the actor has the request
        dataplane.route("frozen", port, state="checkpointing")  # the app stays up, silent
        caller.join(20)
        assert result["status"] == 503, result
        assert b"state checkpointing" in result["body"] and b"space/frozen" in result["body"]
        assert dataplane.stats()["answers"]["checkpointed"] == before + 1
    finally:
        app.kill()
        app.wait()


def test_a_refused_upstream_is_502_and_a_silent_one_504(
        dataplane: DataPlane, certs: Certs, backends: tuple[Backend, Backend]) -> None:
    dataplane.route("closed", free_port())
    response, body = get(dataplane.https(certs), "closed")
    assert response.status == 502 and b"space/closed" in body
    start = time.monotonic()
    response, body = get(dataplane.https(certs), "alpha", "/slow?s=6")
    assert response.status == 504 and b"no response head within 3 s" in body
    assert 2.5 < time.monotonic() - start < 6


def test_a_body_framed_two_ways_reaches_the_actor_framed_one_way(
        dataplane: DataPlane, certs: Certs) -> None:
    ctx = client_context(certs, certs.router)
    with ctx.wrap_socket(socket.create_connection(dataplane.address("ingress")),
                         server_hostname="127.0.0.1") as sock:
        sock.settimeout(15)
        sock.sendall(f"POST /sink HTTP/1.1\r\nHost: {HOST.format(name='alpha')}\r\n"
                     "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "3\r\nabc\r\n0\r\n\r\n".encode())
        head, rest = read_head(sock)
        assert head.startswith(b"HTTP/1.1 200"), head
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(rest) < length:
            rest += sock.recv(65536)
    got = seen(rest)
    assert got["bytes"] == 3 and "content-length" not in got["headers"]
    assert got["headers"]["transfer-encoding"] == "chunked"


@pytest.mark.parametrize("size", [100_000, 600_000])
def test_an_oversized_request_head_is_431(dataplane: DataPlane, certs: Certs,
                                          size: int) -> None:
    # 600 kB: more than is read before the answer; it must not be lost to a reset.
    response, body = get(dataplane.https(certs), "alpha", headers={"X-Big": "a" * size})
    assert response.status == 431 and b"65536" in body


def raw_app(answers: list[bytes]) -> socket.socket:
    """An actor's app that answers each connection's first request with the next
    of `answers`, byte for byte, then closes."""
    server = socket.create_server(("127.0.0.1", 0))

    def app() -> None:
        for answer in answers:
            conn, _ = server.accept()
            with conn:
                while b"\r\n\r\n" not in conn.recv(65536):
                    pass
                conn.sendall(answer)
    threading.Thread(target=app, daemon=True).start()
    return server


def test_close_delimited_and_chunked_responses_are_framed_again_for_the_client(
        dataplane: DataPlane, certs: Certs) -> None:
    with raw_app([b"HTTP/1.0 200 OK\r\nX-App: old\r\n\r\nuntil the end",
                  b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
                  b"\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"]) as server:
        dataplane.route("raw", server.getsockname()[1])
        conn = dataplane.https(certs)
        response, body = get(conn, "raw")
        assert (response.status, body) == (200, b"until the end")
        assert response.getheader("Transfer-Encoding") == "chunked"  # framed again
        response, body = get(conn, "raw")  # the same client connection goes on
        assert (response.status, body) == (200, b"hello world")
        assert response.getheader("Connection") is None


def test_an_actor_dying_after_its_response_head_closes_the_client_connection(
        dataplane: DataPlane, certs: Certs) -> None:
    with raw_app([b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly this"]) as server:
        dataplane.route("cut", server.getsockname()[1])
        conn = dataplane.https(certs)
        conn.request("GET", "/", headers={"Host": HOST.format(name="cut")})
        response = conn.getresponse()
        assert response.status == 200  # the head went out before the actor died
        with pytest.raises(http.client.IncompleteRead) as cut:
            response.read()
        assert cut.value.partial == b"only this"


def test_a_request_head_too_slow_is_408_then_closed(dataplane: DataPlane, certs: Certs) -> None:
    ctx = client_context(certs, certs.router)
    with ctx.wrap_socket(socket.create_connection(dataplane.address("ingress")),
                         server_hostname="127.0.0.1") as sock:
        sock.settimeout(15)
        sock.sendall(f"GET /who HTTP/1.1\r\nHost: {HOST.format(name='alpha')}\r\n".encode())
        start = time.monotonic()
        head, _ = read_head(sock)
        assert head.startswith(b"HTTP/1.1 408"), head
        assert 1.0 < time.monotonic() - start < 10
        assert b"connection: close" in head.lower()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_routes_by_host_and_streams_a_chunked_upload(
        dataplane: DataPlane, certs: Certs) -> None:
    host, port = dataplane.address("ingress")
    payload = b"0123456789" * 100_000
    run = subprocess.run(
        ["curl", "-sS", "--fail-with-body", "--cacert", str(certs.trust),
         "--cert", str(certs.router[0]), "--key", str(certs.router[1]),
         "-H", f"Host: {HOST.format(name='beta')}", "-H", "Transfer-Encoding: chunked",
         "--data-binary", "@-", f"https://{host}:{port}/upload"],
        input=payload, capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert answer["backend"] == "beta" and answer["bytes"] == len(payload)
