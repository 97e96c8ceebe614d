"""gRPC server: the Ateom servicer (thin translation), health, reflection, draining.

`serve(config)` is `ateom serve`: a unix socket (parent dir 0700, socket
0660, a stale socket replaced, removed on exit; plaintext, the modes are its
access control), TCP only with --listen and then only over TLS with client
certificates (`tcp_credentials`), health SERVING once ready and NOT_SERVING while draining, and on
SIGTERM/SIGINT a drain (see `AteomService.drain`) then exit 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import stat
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from ateom.daemon.calls import validation
from ateom.daemon.lifecycle.config import TLS_FLAGS, DaemonConfig, check_tls_flags
from ateom.daemon.lifecycle.readiness import RECHECK_INTERVAL
from ateom.daemon.lifecycle.service import AteomService
from ateom.daemon.rpc import wire
from ateom.daemon.rpc.handler import add_servicer, rpc
from ateom.daemon.rpc.inspection import InspectServicer
from ateom.daemon.rpc.metrics_endpoint import start_daemon_metrics
from ateom.daemon.rpc.readyz import ReadyzServer, start_readyz_server
from ateom.errors import AteomError, ErrorCode
from ateom.worker import layout as worker_layout

log = structlog.get_logger("ateom.server")

SERVICE_NAMES = (
    pb.DESCRIPTOR.services_by_name["Ateom"].full_name,
    pb.DESCRIPTOR.services_by_name["Inspect"].full_name,
)


class AteomServicer(pb_grpc.AteomServicer):
    """Wire <-> service; nothing else."""

    def __init__(self, service: AteomService) -> None:
        self.service = service

    @rpc("Ateom.RunWorkload")
    def RunWorkload(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.service.run_workload(wire.run_request(request))
        return pb.RunWorkloadResponse()

    @rpc("Ateom.CheckpointWorkload")
    def CheckpointWorkload(self, request: Any, context: grpc.ServicerContext) -> Any:
        return wire.checkpoint_response(
            self.service.checkpoint_workload(wire.checkpoint_request(request)))

    @rpc("Ateom.RestoreWorkload")
    def RestoreWorkload(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.service.restore_workload(wire.restore_request(request))
        return pb.RestoreWorkloadResponse()

    @rpc("Ateom.TerminateWorkload")
    def TerminateWorkload(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.service.terminate_workload(wire.terminate_request(request))
        return pb.TerminateWorkloadResponse()

    @rpc("Ateom.GetWorkloadStats")
    def GetWorkloadStats(self, request: Any, context: grpc.ServicerContext) -> Any:
        validation.check_actor_uid(request.actor_uid)
        return wire.stats_response(self.service.workload_stats(request.actor_uid))

    @rpc("Ateom.GetActiveWorkloadStats")
    def GetActiveWorkloadStats(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.GetActiveWorkloadStatsResponse(
            samples=[wire.stats_sample(s) for s in self.service.active_workload_stats()])


def prepare_socket(path: str) -> None:
    """Parent dir made 0700 when ateom creates it (an existing one is left as it is:
    it may be shared, like /tmp); a stale socket is removed, anything else in
    the way is refused; a place no unix socket can be bound is refused, naming
    why (FAILED_PRECONDITION)."""
    parent = os.path.dirname(path) or "."
    if os.path.lexists(parent) and not os.path.isdir(parent):
        raise AteomError(f"--socket {path}: {parent} is not a directory",
                         code=ErrorCode.FAILED_PRECONDITION)
    try:
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o700, exist_ok=True)
            os.chmod(parent, 0o700)  # makedirs' mode is filtered by the umask
    except OSError as exc:
        raise AteomError(f"--socket {path}: cannot make its directory {parent}:"
                         f" {exc.strerror}", code=ErrorCode.FAILED_PRECONDITION) from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _check_bindable(path)
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise AteomError(f"--socket {path}: exists and is not a socket; refusing to replace it",
                         code=ErrorCode.FAILED_PRECONDITION)
    if _accepts_connections(path):
        # Unlinking it would leave that daemon unreachable for good.
        raise AteomError(f"--socket {path}: another process is serving on it; refusing to"
                         " replace it", code=ErrorCode.FAILED_PRECONDITION)
    os.unlink(path)
    log.info("stale_socket_removed", path=path)
    _check_bindable(path)


def _check_bindable(path: str) -> None:
    """Bind (then remove) a socket at `path`: grpc's own failure says only "Failed
    to bind", with the reason in its C log."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.bind(path)
    except OSError as exc:
        raise AteomError(f"--socket {path}: cannot bind a unix socket there: {exc.strerror}",
                         code=ErrorCode.FAILED_PRECONDITION) from None
    finally:
        probe.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _accepts_connections(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):  # nobody listens: stale
        return False
    except OSError:  # e.g. a busy listener timing out: someone is there
        return True
    finally:
        probe.close()
    return True


# A PEM file bigger than this is not a certificate, key or CA bundle.
_PEM_MAX = 1 << 20


def tcp_credentials(config: DaemonConfig) -> grpc.ServerCredentials | None:
    """TLS credentials for --listen, demanding a client certificate the client CA
    signed; None without --listen. (Reads the three files.)

    Plain TCP is refused: the lifecycle API can terminate any actor, and a
    TCP port is open to every local user (and, on the Pod IP, the network).
    """
    check_tls_flags(config)
    if not config.listen:
        return None
    paths = dict(zip(TLS_FLAGS, (config.tls_cert, config.tls_key, config.tls_client_ca),
                     strict=True))
    cert, key, ca = (_read_pem(flag, path) for flag, path in paths.items())
    _check_tls_files(config)
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=True)


def _read_pem(flag: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(_PEM_MAX + 1)
    except OSError as exc:
        raise AteomError(f"{flag} {validation.quote(path)}: cannot read: {exc.strerror}",
                         code=ErrorCode.FAILED_PRECONDITION) from None
    want = b"PRIVATE KEY-----" if flag == "--tls-key" else b"-----BEGIN CERTIFICATE-----"
    if len(data) > _PEM_MAX or want not in data:
        raise validation.invalid(f"{flag} {validation.quote(path)}: not a PEM file with a"
                                 f" {'private key' if flag == '--tls-key' else 'certificate'}")
    return data


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    raise ValueError("the key is encrypted")


def _check_tls_files(config: DaemonConfig) -> None:
    """Parse the certificate, key and CA with OpenSSL (Python's ssl): grpc itself
    only fails the bind, as "Failed to bind", with the reason in its C log."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key, password=_no_password)
    except (ssl.SSLError, ValueError) as exc:
        raise validation.invalid(
            f"--tls-cert {validation.quote(config.tls_cert)} and --tls-key"
            f" {validation.quote(config.tls_key)}: not a certificate and its unencrypted"
            f" private key ({getattr(exc, 'reason', None) or exc})") from None
    try:
        context.load_verify_locations(cafile=config.tls_client_ca)
    except (ssl.SSLError, ValueError) as exc:
        raise validation.invalid(
            f"--tls-client-ca {validation.quote(config.tls_client_ca)}: not a CA certificate"
            f" ({getattr(exc, 'reason', None) or exc})") from None


@dataclass
class RunningServer:
    server: grpc.Server
    health: health.HealthServicer
    service: AteomService
    socket: str
    tcp_port: int | None
    problems: tuple[str, ...] = ()  # why not SERVING, as last judged

    def set_serving(self, serving: bool) -> None:
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", *SERVICE_NAMES):
            self.health.set(name, status)

    def why_not_serving(self) -> tuple[str, ...]:
        """() when Health says SERVING; else why not, one line each (what /readyz says).
        Read from memory: judged every `RECHECK_INTERVAL` s and at every change."""
        state = self.service.state
        if state != "serving":
            return (f"{state}: not taking actors",)
        return self.problems

    def judge_readiness(self, said: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """Health SERVING when serving and nothing stands in the way of a Run
        (`AteomService.not_ready`), NOT_SERVING otherwise; logs each change of
        verdict (`said`: the problems last logged). Returns the problems now."""
        problems = self.service.not_ready()
        self.set_serving(self.service.state == "serving" and not problems)
        if problems != said:
            if problems:
                log.error("not_ready", problems=list(problems))
            elif said is not None:
                log.info("ready_again")
        return problems

    def watch_readiness(self, stop: threading.Event) -> threading.Thread:
        """Look again every `RECHECK_INTERVAL` s until `stop`, so a mended fault
        turns the worker SERVING without a restart."""
        def loop() -> None:
            while not stop.wait(RECHECK_INTERVAL):
                if self.service.state != "serving":
                    return  # draining: NOT_SERVING for good
                self.problems = self.judge_readiness(self.problems)

        thread = threading.Thread(target=loop, name="readiness", daemon=True)
        thread.start()
        return thread

    def stop(self, grace: float | None = 1.0) -> None:
        self.server.stop(grace).wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)


def start_server(config: DaemonConfig, service: AteomService) -> RunningServer:
    """Bind, register services, start; health SERVING. (Reads the TLS files, binds sockets.)"""
    tcp_creds = tcp_credentials(config)  # before anything is bound or created
    prepare_socket(config.socket)
    # More threads than the service has call slots: Health and Inspect keep
    # theirs when every slot waits on runsc (see `ateom.daemon.actors.admission`).
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.rpc_threads, thread_name_prefix="rpc"),
    )
    add_servicer(server, AteomServicer(service), pb.DESCRIPTOR.services_by_name["Ateom"])
    add_servicer(server, InspectServicer(service), pb.DESCRIPTOR.services_by_name["Inspect"])
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME),
        server,
    )
    old_umask = os.umask(0o117)  # socket created 0660
    try:
        server.add_insecure_port(f"unix:{config.socket}")
    except RuntimeError:  # grpc's "Failed to bind": `prepare_socket` bound it just now
        raise AteomError(f"--socket {config.socket}: cannot bind (taken meanwhile?)",
                         code=ErrorCode.FAILED_PRECONDITION) from None
    finally:
        os.umask(old_umask)
    os.chmod(config.socket, 0o660)
    tcp_port = None
    if tcp_creds is not None:
        try:
            tcp_port = server.add_secure_port(config.listen, tcp_creds) or None
        except RuntimeError:  # grpc raises on a failed bind (older versions return 0)
            pass
        if tcp_port is None:
            server.stop(0).wait()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(config.socket)
            raise AteomError(f"--listen {config.listen}: cannot bind (in use, or not a"
                             " HOST:PORT this machine has)", code=ErrorCode.FAILED_PRECONDITION)
    running = RunningServer(server, health_servicer, service, config.socket, tcp_port)
    running.set_serving(False)  # until readiness has been judged
    server.start()
    service.state = "serving"
    log.info("serving", socket=config.socket, listen=config.listen or None,
             max_actors=config.max_actors, runsc=config.runsc, pid=os.getpid())
    running.problems = running.judge_readiness()
    return running


class ShutdownSignals:
    """SIGTERM and SIGINT, noted for the main loop to act on.

    A Python signal handler runs in the main thread between two bytecodes, and
    the main thread spends its time in ``Event.wait``, which holds that event's
    lock at moments: a handler that sets the event (or writes a log line, whose
    stream has a lock) can wait for that lock forever, and the daemon hangs on
    SIGTERM with nothing logged after the signal. So `note` only appends to a
    list; `wait` polls it, and the caller logs and sets events outside the handler.
    """

    def __init__(self) -> None:
        self.received: list[int] = []

    def note(self, signum: int, frame: object) -> None:
        self.received.append(signum)  # no lock taken: see the class's docstring

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.note)
        signal.signal(signal.SIGINT, self.note)

    def wait(self, poll: float = 0.2) -> int:
        """Until a signal was noted; returns the first."""
        while not self.received:
            time.sleep(poll)
        return self.received[0]


def serve(config: DaemonConfig, service: AteomService | None = None) -> int:
    """Run until SIGTERM/SIGINT, then drain and return 0."""
    service = service or AteomService(config)
    service.reaper.start()
    stop = threading.Event()
    signals = ShutdownSignals()
    signals.install()
    started = time.perf_counter()
    metrics_server = None
    if config.metrics_listen:
        metrics_server = start_daemon_metrics(config.metrics_listen, service)
        log.info("metrics", listen=config.metrics_listen, port=metrics_server.port)
    # Until the gRPC server judges it, the worker is starting: /readyz says so.
    verdict: list[Callable[[], tuple[str, ...]]] = [
        lambda: ("starting: clearing what an earlier daemon left, then serving",)]
    readyz = _start_readyz(config, lambda: verdict[0]())
    if config.accepted_not_served:
        log.warning("accepted_not_served", flags=list(config.accepted_not_served))
    if config.layout is not None:
        worker_layout.prepare(config.layout)
    prepare_socket(config.socket)  # a socket it cannot serve on is said before anything
    service.reconcile()  # what a dead predecessor left, before SERVING
    service.reach.start_dataplane()
    service.janitor.start()
    service.sampler.start()
    running = start_server(config, service)
    verdict[0] = running.why_not_serving
    if not running.problems:
        log.info("ready", startup_ms=round((time.perf_counter() - started) * 1000, 3))
    watcher = running.watch_readiness(stop)
    log.info("signal", signal=signal.Signals(signals.wait()).name)
    stop.set()
    watcher.join(timeout=RECHECK_INTERVAL + 1)
    running.set_serving(False)
    service.sampler.stop()
    service.drain(config.shutdown_grace)
    service.reach.stop_dataplane()
    service.reach.stop_networks()
    running.stop(grace=1.0)
    service.janitor.stop()
    for server in (metrics_server, readyz):
        if server is not None:
            server.close()
    log.info("stopped")
    return 0


def _start_readyz(config: DaemonConfig,
                  verdict: Callable[[], tuple[str, ...]]) -> ReadyzServer | None:
    """/readyz on --readiness-listen-address, when set (Substrate's readiness probe)."""
    if not config.readiness_listen_address:
        return None
    return start_readyz_server(config.readiness_listen_address, verdict)
