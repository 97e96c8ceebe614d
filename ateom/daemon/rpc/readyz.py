"""The worker's HTTP readiness endpoint: ``GET /readyz`` (``--readiness-listen-address``).

Substrate's controller gives the worker container a readinessProbe of HTTP GET
``/readyz`` on its ``readyz`` port (8080): 200 when this daemon can run an actor now,
else 503 with the reason, one line each. It says exactly what the gRPC health
service says (`RunningServer.verdict`, judged every few seconds and at every
change of state), read from memory: the probe never waits on runsc or on a call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog

from ateom.daemon.rpc.metrics_endpoint import parse_listen_address
from ateom.errors import AteomError, ErrorCode

log = structlog.get_logger("ateom.readyz")

FLAG = "--readiness-listen-address"
# A probe that has not sent its request within this long is dropped: the kubelet's
# own timeout is 1 s by default, and a stuck client must not hold a thread.
_CLIENT_TIMEOUT = 5.0

# () when ready; otherwise why not, one line each ("starting", "draining", a problem).
Verdict = Callable[[], tuple[str, ...]]


def _handler(verdict: Verdict) -> type[BaseHTTPRequestHandler]:
    class Readyz(BaseHTTPRequestHandler):
        timeout = _CLIENT_TIMEOUT
        server_version = "ateom"

        def do_GET(self) -> None:  # noqa: N802 -- http.server's name
            self._answer(body=True)

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer(body=False)

        def _answer(self, *, body: bool) -> None:
            if self.path.split("?", 1)[0] != "/readyz":
                status, text = 404, "not found: this endpoint serves GET /readyz\n"
            else:
                why = verdict()
                status = 503 if why else 200
                text = "".join(f"{line}\n" for line in why) if why else "ok\n"
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if body:
                self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # a probe every few seconds is not news; changes of verdict are logged

    return Readyz


class ReadyzServer:
    """A running /readyz endpoint on a thread of its own."""

    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_readyz_server(host_port: str, verdict: Verdict) -> ReadyzServer:
    """Serve /readyz on ``HOST:PORT`` (opens a listening socket; port 0 picks one).
    INVALID_ARGUMENT for an address that is not HOST:PORT, UNAVAILABLE when it
    cannot be bound, each naming the flag."""
    host, port = parse_listen_address(host_port, FLAG)
    try:
        server = ThreadingHTTPServer((host, port), _handler(verdict))
    except OSError as exc:
        raise AteomError(f"{FLAG} {host_port!r}: cannot listen: {exc.strerror or exc}",
                         code=ErrorCode.UNAVAILABLE) from exc
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="readyz", daemon=True)
    thread.start()
    log.info("readyz", listen=host_port, port=int(server.server_address[1]))
    return ReadyzServer(server, thread)
