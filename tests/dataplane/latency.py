"""The data plane's added latency, measured once (not a test):
``python -m tests.dataplane.latency [N]``.

A small GET, N times (500) on one keep-alive connection: straight to the back-end
(plain HTTP), then through ``python -m ateom.dataplane`` (HTTPS with a client
certificate, as the router calls it; the same keep-alive upstream behind it).
Prints the median and p99 of each and the difference: what the proxy adds,
TLS on the client leg included.
"""

from __future__ import annotations

import http.client
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.dataplane.support import HOST, Backend, DataPlane, ingress_args, make_certs


def timings(conn: http.client.HTTPConnection, host: str, count: int) -> list[float]:
    def once() -> float:
        start = time.perf_counter()
        conn.request("GET", "/who", headers={"Host": host})
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        return time.perf_counter() - start
    for _ in range(50):  # warm: connections, caches
        once()
    return [once() for _ in range(count)]


def summary(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.99) - 1] * 1e6


def main(count: int = 500) -> None:
    d = Path(tempfile.mkdtemp(prefix="dataplane-latency-"))
    certs = make_certs(d)
    backend = Backend("alpha")
    dp = DataPlane(ingress_args(certs), d / "dataplane.log")
    try:
        dp.route("alpha", backend.port)
        host = HOST.format(name="alpha")
        direct = summary(timings(http.client.HTTPConnection("127.0.0.1", backend.port), host,
                                 count))
        proxied = summary(timings(dp.https(certs), host, count))
    finally:
        dp.stop()
        backend.stop()
    print(f"{count} GETs on one keep-alive connection (microseconds)")
    print(f"direct   median {direct[0]:8.0f}  p99 {direct[1]:8.0f}")
    print(f"proxied  median {proxied[0]:8.0f}  p99 {proxied[1]:8.0f}")
    print(f"added    median {proxied[0] - direct[0]:8.0f}  p99 {proxied[1] - direct[1]:8.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
