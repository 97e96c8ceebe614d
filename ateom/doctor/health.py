"""`ateom health`: the gRPC health check a kubelet exec probe runs.

Kubelet's built-in grpc probe dials TCP on the Pod IP; ateom serves on a unix
socket (the lifecycle API must not listen on the Pod network), so the probe
execs this instead. It asks the standard ``grpc.health.v1.Health/Check``, as
grpc_health_probe would, and exits 0 only for SERVING.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


@dataclass(frozen=True, slots=True)
class HealthAnswer:
    serving: bool
    status: str  # SERVING, NOT_SERVING, UNKNOWN, SERVICE_UNKNOWN, or the RPC error code
    detail: str = ""
    answered: bool = True  # False: no answer came (no daemon, refused, deadline)


def target_for(socket_or_address: str) -> str:
    """A gRPC target: a path (or unix:...) dials the unix socket, else HOST:PORT over TCP."""
    if socket_or_address.startswith(("unix:", "/", ".")):
        if socket_or_address.startswith("unix:"):
            return socket_or_address
        return "unix:" + socket_or_address
    return socket_or_address


def check_health(socket_or_address: str, service: str = "", timeout: float = 3.0) -> HealthAnswer:
    """Ask the server's Health service about `service` ("" = the whole server); dials it."""
    with grpc.insecure_channel(target_for(socket_or_address)) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code is grpc.StatusCode.NOT_FOUND:  # the server's answer: no such service
                return HealthAnswer(False, "SERVICE_UNKNOWN", str(details or ""))
            name = code.name if code is not None else "UNKNOWN"
            return HealthAnswer(False, name, str(details or ""), answered=False)
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return HealthAnswer(status == "SERVING", status)
