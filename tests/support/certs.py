"""Certificates as Substrate's worker Pod gets them, made by the openssl CLI: a root and
an intermediate CA; the worker's credential bundle (its P-256 key, its certificate and the
intermediate in one PEM, as the projected Pod certificate is) and a rotated one; the
router's client certificate (its SPIFFE id as a URI SAN), an intruder's (trusted CA,
another id), an untrusted one (the router's id from a CA nobody trusts); the egress
gateway's server certificate."""

from __future__ import annotations

import os
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROUTER_ID = "spiffe://cluster.local/ns/ate-system/sa/atenet-router"
INTRUDER_ID = "spiffe://cluster.local/ns/other/sa/intruder"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str, parent: str | None = None) -> None:
    """A CA named `name` (name.key, name.pem), self-signed or signed by `parent`."""
    ext = d / f"{name}.ext"
    ext.write_text("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    sign = (["-CA", f"{parent}.pem", "-CAkey", f"{parent}.key"] if parent
            else ["-signkey", f"{name}.key"])
    _openssl("x509", "-req", "-in", f"{name}.csr", *sign, "-set_serial",
             str(int.from_bytes(os.urandom(8), "big")), "-days", "2", "-extfile", str(ext),
             "-out", f"{name}.pem", cwd=d)


def _leaf(d: Path, name: str, ca: str, san: str, usage: str) -> tuple[Path, Path]:
    """A P-256 leaf (name.pem, name.key) signed by `ca`."""
    ext = d / f"{name}.ext"
    ext.write_text(f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                   f"extendedKeyUsage={usage}\nsubjectAltName={san}\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", "2",
             "-extfile", str(ext), "-out", f"{name}.pem", cwd=d)
    return d / f"{name}.pem", d / f"{name}.key"


@dataclass(frozen=True)
class Certs:
    dir: Path
    trust: Path          # the root CA: the trust bundle (ingress and egress)
    credential: Path     # worker key + leaf + intermediate, one PEM
    credential2: Path    # the same, rotated: a new key and certificate
    router: tuple[Path, Path]
    intruder: tuple[Path, Path]     # trusted CA, another SPIFFE id
    untrusted: tuple[Path, Path]    # the router's id, from a CA nobody trusts
    gateway: tuple[Path, Path]      # the egress gateway (squid): localhost

    def der(self, bundle: Path) -> bytes:
        """The DER of the first certificate in a PEM bundle."""
        text = bundle.read_text()
        start = text.index("-----BEGIN CERTIFICATE-----")
        end = text.index("-----END CERTIFICATE-----", start) + len("-----END CERTIFICATE-----")
        return ssl.PEM_cert_to_DER_cert(text[start:end])


def make_certs(d: Path) -> Certs:
    _ca(d, "root")
    _ca(d, "intermediate", "root")
    _ca(d, "rogue")
    server = "serverAuth,clientAuth"
    bundles = []
    for name in ("worker", "worker2"):
        cert, key = _leaf(d, name, "intermediate", "DNS:localhost,IP:127.0.0.1,"
                          "URI:spiffe://cluster.local/ns/ate-system/sa/ateom", server)
        bundle = d / f"{name}-credential-bundle.pem"
        bundle.write_text(key.read_text() + cert.read_text() + (d / "intermediate.pem").read_text())
        bundles.append(bundle)
    return Certs(
        dir=d, trust=d / "root.pem", credential=bundles[0], credential2=bundles[1],
        router=_leaf(d, "router", "root", f"URI:{ROUTER_ID}", "clientAuth"),
        intruder=_leaf(d, "intruder", "root", f"URI:{INTRUDER_ID}", "clientAuth"),
        untrusted=_leaf(d, "untrusted", "rogue", f"URI:{ROUTER_ID}", "clientAuth"),
        gateway=_leaf(d, "gateway", "root", "DNS:localhost,IP:127.0.0.1", "serverAuth"))


def client_context(certs: Certs, who: tuple[Path, Path] | None) -> ssl.SSLContext:
    """A router-like client: trusts the root, presents `who` (cert, key) if given."""
    ctx = ssl.create_default_context(cafile=str(certs.trust))
    if who is not None:
        ctx.load_cert_chain(str(who[0]), str(who[1]))
    return ctx


