"""Wakeup probes: an actor is ready when every container's HTTP GET answers 200.

The node agent's `wakeup_probe` (per container: `http_get.path`, `http_get.port`,
`timeout_seconds`) says when a Run or Restore has really brought the actor back: the
call answers only once each probe has returned 200 at the actor's address, as
Substrate's worker does (it polls often, each attempt bounded, with a default
timeout when the probe gives none: the constants below). Every attempt is
bounded, the whole wait too (and never past the caller's gRPC deadline); a probe
that never passes fails the call naming the container, the URL, the attempts and
the last error.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ateom.errors import AteomError, ErrorCode, quote

DEFAULT_TIMEOUT = 30.0  # seconds, when the probe gives none (timeout_seconds 0)
ATTEMPT_TIMEOUT = 0.25  # one attempt's connect + request + status line
POLL_INTERVAL = 0.002  # between rounds: often, as a fresh app's first 200 is the news


@dataclass(frozen=True, slots=True)
class WakeupProbe:
    """One container's probe: HTTP GET `path` on `port` (1..65535)."""

    container: str
    path: str
    port: int
    timeout: float = DEFAULT_TIMEOUT

    def url(self, ip: str) -> str:
        return f"http://{ip}:{self.port}{self.path}"


def check_probe(field: str, path: str, port: int, timeout_seconds: int) -> None:
    """A probe as the wire gives it (pure): INVALID_ARGUMENT naming `field`."""
    if not 1 <= port <= 65535:
        raise AteomError(f"{field}.http_get.port {port}: must be 1..65535",
                         code=ErrorCode.INVALID_ARGUMENT)
    if not path.startswith("/") or any(c in path for c in " \r\n\0") or len(path) > 2048:
        raise AteomError(f"{field}.http_get.path {quote(path)}: must be an absolute URL path"
                         " (starting with '/', no whitespace, at most 2048 bytes)",
                         code=ErrorCode.INVALID_ARGUMENT)
    if timeout_seconds < 0:
        raise AteomError(f"{field}.timeout_seconds {timeout_seconds}: must be >= 0",
                         code=ErrorCode.INVALID_ARGUMENT)


def attempt(ip: str, probe: WakeupProbe, timeout: float = ATTEMPT_TIMEOUT) -> str:
    """One GET (connects, sends, reads the status line): "" on a 200, else why not."""
    conn = http.client.HTTPConnection(ip, probe.port, timeout=timeout)
    try:
        conn.request("GET", probe.path, headers={"User-Agent": "ateom-wakeup-probe",
                                                 "Connection": "close"})
        status = conn.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    finally:
        conn.close()
    return "" if status == 200 else f"HTTP {status}"


@dataclass
class _Waiting:
    probe: WakeupProbe
    attempts: int = 0
    last_error: str = "not tried"


def wait_ready(ip: str, probes: Sequence[WakeupProbe], *, uid: str,
               limit: Callable[[float], float] = lambda s: s,
               try_once: Callable[[str, WakeupProbe], str] = attempt) -> int:
    """Poll every probe until each has answered 200 (connects to `ip`); the attempts
    made. `limit(s)` bounds a wait of `s` seconds by the caller's own deadline. A probe
    still failing at its timeout raises DEADLINE_EXCEEDED naming the container, the
    URL, the attempts and the last error."""
    start = time.monotonic()
    waiting = [_Waiting(p) for p in probes]
    made = 0
    while waiting:
        for w in list(waiting):
            error = try_once(ip, w.probe)
            w.attempts += 1
            made += 1
            if not error:
                waiting.remove(w)
                continue
            w.last_error = error
            elapsed = time.monotonic() - start
            if elapsed >= limit(w.probe.timeout):
                raise AteomError(
                    f"actor {uid}: container {w.probe.container}'s wakeup probe GET"
                    f" {w.probe.url(ip)} did not answer 200 within {elapsed:.1f} s"
                    f" ({w.attempts} attempts; last: {w.last_error})",
                    code=ErrorCode.DEADLINE_EXCEEDED)
        if waiting:
            time.sleep(POLL_INTERVAL)
    return made
