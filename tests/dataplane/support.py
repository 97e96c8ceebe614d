"""What the data plane's tests run against: certificates made by the openssl CLI,
the data plane as a real subprocess fed over a socketpair, real HTTP back-ends.

Nothing of the proxy's own is mocked: the tests talk TLS and HTTP to a real
``python -m ateom.dataplane`` as Substrate's router would.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.certs import INTRUDER_ID, ROUTER_ID, Certs, client_context, make_certs

ROOT = Path(__file__).resolve().parents[2]
HOST = "{name}.space.actors.resources.substrate.ate.dev"
__all__ = ["INTRUDER_ID", "ROUTER_ID", "Certs", "client_context", "make_certs"]


# ------------------------------------------------------------ the data plane

class DataPlane:
    """``python -m ateom.dataplane`` (or `script`) as a subprocess, its control fd one
    end of a socketpair, its stdout in `log`."""

    def __init__(self, args: list[str], log: Path, script: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.control, child = socket.socketpair()
        cmd = ([sys.executable, "-m", "ateom.dataplane"] if script is None
               else [sys.executable, "-c", script])
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*cmd, "--control-fd", str(child.fileno()), *args], pass_fds=[child.fileno()],
                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})})
        child.close()
        self.control.settimeout(20)
        self._buffer = b""
        self._ids = 0
        self.ready = self._wait_ready() if args else {}

    def _wait_ready(self, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines():
                if line.get("event") == "dataplane ready":
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"data plane not ready: {self.log.read_text()[-3000:]}")

    def lines(self) -> list[dict[str, Any]]:
        found = []
        for raw in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                found.append(json.loads(raw))
        return found

    def address(self, listener: str) -> tuple[str, int]:
        host, port = self.ready[listener][0].rsplit(":", 1)
        return host.strip("[]"), int(port)

    def send(self, obj: dict[str, Any] | bytes) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode() + b"\n"
        self.control.sendall(data)

    def answer(self, op: str) -> dict[str, Any]:
        self._ids += 1
        ident = self._ids
        self.send({"op": op, "id": ident})
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("id") == ident:
                    return dict(msg)
            data = self.control.recv(65536)
            if not data:
                raise AssertionError(f"control stream closed: {self.log.read_text()[-2000:]}")
            self._buffer += data

    def route(self, name: str, port: int, *, ip: str | None = "127.0.0.1",
              state: str = "running",
              egress_gateway: str | None = None, uid: str | None = None) -> None:
        self.send({"op": "route", "uid": uid or f"uid-{name}", "atespace": "space",
                   "name": name, "ip": ip, "port": port, "state": state,
                   "egress_gateway": egress_gateway})
        assert self.answer("ping")["op"] == "pong"

    def stats(self) -> dict[str, Any]:
        return self.answer("stats")

    def memory_kib(self, field: str) -> int:
        """VmRSS / VmHWM of the process, in KiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(field)

    def https(self, certs: Certs, who: tuple[Path, Path] | None = None,
              listener: str = "ingress", timeout: float = 20) -> http.client.HTTPSConnection:
        host, port = self.address(listener)
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=client_context(
            certs, certs.router if who is None else who))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        finally:
            self.control.close()


def ingress_args(certs: Certs, *extra: str, credential: Path | None = None) -> list[str]:
    return ["--ingress", "127.0.0.1:0", "--connect", "127.0.0.1:0",
            "--credential-bundle", str(credential or certs.credential),
            "--trust-bundle", str(certs.trust), "--client-identity", ROUTER_ID, *extra]


# ------------------------------------------------------------------ back-ends

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # head and body are two writes: no 40 ms delayed ACK
    server: Backend

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, body: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "keep-alive")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/big":
            size = int(query["n"])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            block = b"x" * (1 << 20)
            while size > 0:
                self.wfile.write(block[:size])
                size -= len(block)
            return
        if url.path == "/slow":
            time.sleep(float(query["s"]))
        self._reply(json.dumps({"backend": self.server.name, "path": self.path,
                                "headers": [[k, v] for k, v in self.headers.items()]}).encode())

    def do_POST(self) -> None:  # noqa: N802
        digest, total = hashlib.sha256(), 0
        for block in self._body():
            digest.update(block)
            total += len(block)
        self._reply(json.dumps({"backend": self.server.name, "bytes": total,
                                "sha256": digest.hexdigest(),
                                "headers": [[k, v] for k, v in self.headers.items()]}).encode())

    def _body(self) -> Iterator[bytes]:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                yield self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return
        left = int(self.headers.get("Content-Length", "0"))
        while left > 0:
            block = self.rfile.read(min(left, 1 << 20))
            if not block:
                return
            left -= len(block)
            yield block


class Backend(ThreadingHTTPServer):
    """An actor's app: HTTP/1.1 keep-alive; /who echoes what it was sent, /big?n=
    streams n bytes, /slow?s= answers late, POST answers the body's size and hash."""

    daemon_threads = True

    def __init__(self, name: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.name = name
        self.connections = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class EchoServer:
    """A TCP server that sends a greeting, then echoes what it reads, until EOF."""

    def __init__(self, host: str = "127.0.0.1", greeting: bytes = b"hello\n") -> None:
        self.sock = socket.create_server((host, 0))
        self.greeting = greeting
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            conn.sendall(self.greeting)
            while data := conn.recv(65536):
                conn.sendall(data)

    def stop(self) -> None:
        self.sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_head(sock: ssl.SSLSocket | socket.socket) -> tuple[bytes, bytes]:
    """Reads an HTTP response head off a raw socket: (head, bytes after it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        block = sock.recv(65536)
        if not block:
            break
        data += block
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest
