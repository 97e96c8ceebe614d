"""TLS for the data plane: contexts that follow rotating bundles, and the peer's
SPIFFE identity.

The credential bundle (the Pod's key and certificate chain in one PEM file) and
the trust bundles are projected volumes that Kubernetes rewrites as certificates
rotate. A `ReloadingContext` re-reads them when a file's identity (inode, size,
mtime) changes, looking at most every `interval` seconds: new connections get
the new context, open ones keep theirs; a changed file that does not load (half
written, wrong key) is logged and the old context kept until the file changes
again. The files are a few KiB on a local volume, so reading them on the event
loop costs microseconds; no thread is involved.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from ateom.dataplane.counters import Counters

log = structlog.get_logger("ateom.dataplane.tls")
# Substrate's router, the one client ingress admits unless told otherwise.
DEFAULT_CLIENT_IDENTITY = "spiffe://cluster.local/ns/ate-system/sa/atenet-router"

Signature = tuple[tuple[int, int, int, int] | None, ...]


def server_context(credential_bundle: str, trust_bundle: str) -> ssl.SSLContext:
    """The listeners' context: our chain from the credential bundle, and a client
    certificate required that chains to the trust bundle."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(credential_bundle, credential_bundle)
    ctx.load_verify_locations(cafile=trust_bundle)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["http/1.1"])  # a client offering h2 too gets what we speak
    return ctx


def client_context(credential_bundle: str, trust_bundle: str) -> ssl.SSLContext:
    """The egress relay's context towards the gateway: our chain as the client
    certificate; the gateway must chain to the trust bundle and match its host."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(credential_bundle, credential_bundle)
    ctx.load_verify_locations(cafile=trust_bundle)
    return ctx


def _signature(paths: Sequence[str]) -> Signature:
    sig: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)  # follows the projected volume's ..data symlink
        except OSError:
            sig.append(None)
        else:
            sig.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sig)


class ReloadingContext:
    """An `ssl.SSLContext` rebuilt by `make` when one of `paths` changes.

    The first build's errors propagate (the process cannot start without it);
    later ones are logged and counted, and the previous context stays.
    """

    def __init__(self, name: str, make: Callable[[], ssl.SSLContext], paths: Sequence[str],
                 counters: Counters, interval: float = 2.0) -> None:
        self.name = name
        self._make = make
        self._paths = tuple(paths)
        self._counters = counters
        self._interval = interval
        self._sig = _signature(self._paths)
        self._ctx = make()
        self._checked = time.monotonic()

    def current(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked >= self._interval:
            self._checked = now
            sig = _signature(self._paths)
            if sig != self._sig:
                self._sig = sig  # a broken file is tried once, not on every connection
                self._reload()
        return self._ctx

    def _reload(self) -> None:
        try:
            self._ctx = self._make()
        except (OSError, ssl.SSLError, ValueError) as err:
            self._counters.tls_reload_failures += 1
            log.error("tls bundle reload failed; keeping the previous one",
                      context=self.name, paths=list(self._paths), reason=str(err))
        else:
            self._counters.tls_reloads += 1
            log.info("tls bundle reloaded", context=self.name, paths=list(self._paths))


def uri_sans(cert: dict[str, Any] | None) -> list[str]:
    """The URI subject alternative names of a `getpeercert()` dict."""
    return [value for kind, value in (cert or {}).get("subjectAltName", ())
            if kind == "URI"]


def identity_problem(cert: dict[str, Any] | None, want: str) -> str | None:
    """None if the peer certificate carries `want` as a URI SAN; else one line
    saying what it presented instead (for the 403 body and the log)."""
    sans = uri_sans(cert)
    if want in sans:
        return None
    subject = ", ".join(f"{k}={v}" for rdn in (cert or {}).get("subject", ()) for k, v in rdn)
    shown = ", ".join(sans) if sans else "no URI SAN"
    return (f"client certificate identity {shown} (subject {subject or 'empty'}) "
            f"is not {want}")
