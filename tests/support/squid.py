"""A real CONNECT proxy as actors' egress gateway: Debian's squid (squid-openssl, an
optional set-up package) on an https_port with the test CA's gateway certificate,
client certificates from that CA required, CONNECT to any port but `denied_port`.
Where squid is missing or does not start, the test is skipped saying so."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.certs import Certs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _squid_conf(d: Path, port: int, denied_port: int) -> str:
    return f"""
https_port 127.0.0.1:{port} tls-cert={d}/gateway.pem tls-key={d}/gateway.key clientca={d}/ca.pem
acl denied port {denied_port}
http_access deny denied
http_access allow all
cache deny all
cache_mem 8 MB
access_log stdio:{d}/access.log
cache_log {d}/cache.log
pid_filename none
coredump_dir {d}
pinger_enable off
shutdown_lifetime 0 seconds
"""


@contextmanager
def running_squid(certs: Certs, denied_port: int = 7) -> Iterator[tuple[int, Path]]:
    """squid listening on 127.0.0.1:<port>; yields (port, its dir: access.log there)."""
    exe = shutil.which("squid") or next(
        (p for p in ("/usr/sbin/squid",) if os.access(p, os.X_OK)), None)
    if exe is None:
        pytest.skip("squid is not installed (apt-get install --no-install-recommends "
                    "squid-openssl): no real CONNECT proxy to relay egress through")
    d = Path(tempfile.mkdtemp(prefix="ateom-squid-"))
    os.chmod(d, 0o755)  # squid started as root runs as its cache_effective_user
    for src, name in ((certs.gateway[0], "gateway.pem"), (certs.gateway[1], "gateway.key"),
                      (certs.trust, "ca.pem")):
        shutil.copy(src, d / name)
        os.chmod(d / name, 0o644)
    if os.geteuid() == 0:
        shutil.chown(d, "proxy", "proxy")
    port = free_port()
    (d / "squid.conf").write_text(_squid_conf(d, port, denied_port))
    with (d / "stdout.log").open("wb") as out:
        proc = subprocess.Popen([exe, "-N", "-f", str(d / "squid.conf")], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        _wait_listening(proc, port, d)
        yield port, d
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def _wait_listening(proc: subprocess.Popen[bytes], port: int, d: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    logs = " | ".join(p.read_text(errors="replace")[-800:] for p in
                      (d / "stdout.log", d / "cache.log") if p.exists())
    pytest.skip(f"squid did not start listening on 127.0.0.1:{port} "
                f"(exit status {proc.poll()}): {logs}")
