"""--listen is served only over TLS with client certificates; the unix socket stays plaintext.

Real certificates, made here with the openssl command line: a CA that signs the
server's and a client's certificate, and a second CA that signs an impostor's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from ateom.daemon.lifecycle import config as daemon_config
from ateom.daemon.lifecycle.config import DaemonConfig
from ateom.daemon.lifecycle.service import AteomService
from ateom.daemon.rpc.server import RunningServer, start_server
from ateom.errors import AteomError, ErrorCode
from ateom.process.reaper import Reaper
from tests.support import configs
from tests.support.fake_runsc import FakeRunsc

OPENSSL = shutil.which("openssl")
pytestmark = pytest.mark.skipif(OPENSSL is None, reason="makes its certificates with openssl")


@dataclass(frozen=True)
class Pki:
    ca: Path  # signed the server's and the client's certificates
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    impostor_cert: Path  # a client certificate the other CA signed
    impostor_key: Path


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run([str(OPENSSL), *map(str, args)], cwd=cwd, check=True,
                   capture_output=True)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    return d / f"{name}.pem", d / f"{name}.key"


def _leaf(d: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    (d / f"{name}.ext").write_text(extensions + "\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", ca[0], "-CAkey", ca[1],
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
             "-extfile", f"{name}.ext", cwd=d)
    return d / f"{name}.pem", d / f"{name}.key"


def make_pki(d: Path) -> Pki:
    """Write a CA, a server and a client certificate it signed, and an impostor (openssl)."""
    ca = _ca(d, "ca")
    server = _leaf(d, "server", ca, "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                   "extendedKeyUsage=serverAuth")
    client = _leaf(d, "client", ca, "extendedKeyUsage=clientAuth")
    other = _ca(d, "other-ca")
    impostor = _leaf(d, "impostor", other, "extendedKeyUsage=clientAuth")
    return Pki(ca[0], *server, *client, other[0], *impostor)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _config(tmp_path: Path, pki: Pki, **overrides: str) -> DaemonConfig:
    fake = FakeRunsc(tmp_path / "bin")
    (tmp_path / "actors").mkdir(exist_ok=True)  # the node agent's volume
    config = configs.daemon_config(actors_root=str(tmp_path / "actors"), runsc=str(fake.path),
                          run_dir=str(tmp_path / "run"), socket=str(tmp_path / "s" / "a.sock"),
                          gpu_glob=str(tmp_path / "none*"), listen="127.0.0.1:0",
                          tls_cert=str(pki.server_cert), tls_key=str(pki.server_key),
                          tls_client_ca=str(pki.ca))
    return replace(config, **overrides)


@pytest.fixture
def served(tmp_path: Path, pki: Pki) -> Iterator[RunningServer]:
    config = _config(tmp_path, pki)
    server = start_server(config, AteomService(config, reaper=Reaper()))
    try:
        yield server
    finally:
        server.stop(grace=0)


def _channel(port: int, pki: Pki, cert: Path | None, key: Path | None) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=key.read_bytes() if key else None,
        certificate_chain=cert.read_bytes() if cert else None)
    return grpc.secure_channel(f"127.0.0.1:{port}", creds)


def _health(channel: grpc.Channel) -> int:
    return int(health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(), timeout=10).status)


def test_a_client_with_a_certificate_the_client_ca_signed_is_served(
        served: RunningServer, pki: Pki) -> None:
    assert served.tcp_port
    with _channel(served.tcp_port, pki, pki.client_cert, pki.client_key) as channel:
        assert _health(channel) == health_pb2.HealthCheckResponse.SERVING
        assert pb_grpc.InspectStub(channel).GetStatus(pb.GetStatusRequest(),
                                                      timeout=10).state == "serving"
        pb_grpc.AteomStub(channel).TerminateWorkload(  # a gone actor: idempotent
            pb.TerminateWorkloadRequest(actor_uid="ghost"), timeout=10)


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate", "plaintext"])
def test_other_clients_are_refused(served: RunningServer, pki: Pki, who: str) -> None:
    assert served.tcp_port
    if who == "plaintext":
        channel = grpc.insecure_channel(f"127.0.0.1:{served.tcp_port}")
    elif who == "no certificate":
        channel = _channel(served.tcp_port, pki, None, None)
    else:
        channel = _channel(served.tcp_port, pki, pki.impostor_cert, pki.impostor_key)
    with channel, pytest.raises(grpc.RpcError) as err:
        pb_grpc.AteomStub(channel).TerminateWorkload(
            pb.TerminateWorkloadRequest(actor_uid="victim"), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]


def test_the_unix_socket_stays_plaintext(served: RunningServer) -> None:
    with grpc.insecure_channel(f"unix:{served.socket}") as channel:
        assert _health(channel) == health_pb2.HealthCheckResponse.SERVING


def _grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    grpcurl = shutil.which("grpcurl", path=os.path.dirname(sys.executable)) or "grpcurl"
    return subprocess.run([grpcurl, "-max-time", "10", *args], capture_output=True,
                          text=True, check=False)


def test_grpcurl_connects_with_its_client_certificate(served: RunningServer, pki: Pki) -> None:
    target = f"127.0.0.1:{served.tcp_port}"
    ok = _grpcurl("-cacert", str(pki.ca), "-cert", str(pki.client_cert),
                  "-key", str(pki.client_key), target, "list")
    assert ok.returncode == 0, ok.stderr
    assert {"ateom.Ateom", "ateom.Inspect"} <= set(ok.stdout.split())
    status = _grpcurl("-cacert", str(pki.ca), "-cert", str(pki.client_cert),
                      "-key", str(pki.client_key), target, "ateom.Inspect/GetStatus")
    assert status.returncode == 0 and '"state": "serving"' in status.stdout, status.stderr
    for refused in (
        ("-cacert", str(pki.ca), target, "list"),  # no certificate
        ("-cacert", str(pki.ca), "-cert", str(pki.impostor_cert),
         "-key", str(pki.impostor_key), target, "list"),
        ("-plaintext", target, "list"),
    ):
        denied = _grpcurl(*refused)
        assert denied.returncode != 0 and "ateom.Ateom" not in denied.stdout, refused


# -- refusing to start ----------------------------------------------------------


def _refused(config: DaemonConfig) -> AteomError:
    with pytest.raises(AteomError) as err:
        start_server(config, AteomService(config, reaper=Reaper()))
    assert not os.path.exists(config.socket), "refused, yet the socket was bound"
    return err.value


@pytest.mark.parametrize(("drop", "named"), [
    (("tls_cert", "tls_key", "tls_client_ca"), "--tls-cert, --tls-key, --tls-client-ca"),
    (("tls_client_ca",), "--tls-client-ca"),
    (("tls_key",), "--tls-key"),
])
def test_listen_without_all_three_tls_flags_refuses_to_start(
        tmp_path: Path, pki: Pki, drop: tuple[str, ...], named: str) -> None:
    err = _refused(_config(tmp_path, pki, **{name: "" for name in drop}))
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert str(err).startswith("--listen '127.0.0.1:0': TCP is served only over TLS")
    assert str(err).endswith(f"missing {named}")


def test_tls_flags_without_listen_refuse_to_start(tmp_path: Path, pki: Pki) -> None:
    err = _refused(_config(tmp_path, pki, listen="", tls_key=""))
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert str(err).startswith("--tls-cert, --tls-client-ca: only used with --listen")


def test_unreadable_or_invalid_tls_files_refuse_to_start(tmp_path: Path, pki: Pki) -> None:
    err = _refused(_config(tmp_path, pki, tls_key=str(tmp_path / "missing.key")))
    assert err.code is ErrorCode.FAILED_PRECONDITION
    assert str(err).startswith("--tls-key ") and "cannot read" in str(err)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    err = _refused(_config(tmp_path, pki, tls_cert=str(garbage)))
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert str(err).startswith("--tls-cert ") and "not a PEM file with a certificate" in str(err)
    # Well-formed PEM, but the key is the client's: grpc would only say "Failed to bind".
    err = _refused(_config(tmp_path, pki, tls_key=str(pki.client_key)))
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert "not a certificate and its unencrypted private key" in str(err)
    broken = tmp_path / "broken-ca.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    err = _refused(_config(tmp_path, pki, tls_client_ca=str(broken)))
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert str(err).startswith("--tls-client-ca ") and "not a CA certificate" in str(err)


def test_ateom_serve_refuses_listen_without_tls(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ateom", "serve", "--actors-root", str(tmp_path / "actors"),
         "--socket", str(tmp_path / "s" / "a.sock"), "--run-dir", str(tmp_path / "run"),
         "--listen", "127.0.0.1:0", "--runsc", "/bin/false"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "ATEOM_TLS_KEY": "/k.pem"})
    # A flag combination: usage (2), said before anything starts, one plain line.
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip() == (
        "ateom serve: --listen '127.0.0.1:0': TCP is served only over TLS with client"
        " certificates; missing --tls-cert, --tls-client-ca"), done.stderr
    assert not (tmp_path / "s" / "a.sock").exists()


def test_tls_flags_have_environment_twins() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    daemon_config.add_flags(parser)
    args = parser.parse_args(["--actors-root", "/a", "--tls-cert", "/flag.pem"])
    config = daemon_config.from_args(args, {"ATEOM_LISTEN": "127.0.0.1:9443",
                                            "ATEOM_TLS_CERT": "/env.pem",
                                            "ATEOM_TLS_KEY": "/k.pem",
                                            "ATEOM_TLS_CLIENT_CA": "/ca.pem"})
    assert (config.tls_cert, config.tls_key, config.tls_client_ca) == (
        "/flag.pem", "/k.pem", "/ca.pem")
    # Without --listen, each stray TLS setting is named as it was given.
    with pytest.raises(AteomError) as err:
        daemon_config.from_args(args, {"ATEOM_TLS_KEY": "/k.pem"})
    assert str(err.value).startswith("--tls-cert, $ATEOM_TLS_KEY: only used with --listen")
