"""`ateom health`, the exec probe: a real gRPC server with the standard Health service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ateom.doctor.health import check_health, target_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, health.HealthServicer]]:
    socket = str(tmp_path / "ateom.sock")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port("unix:" + socket)
    server.start()
    try:
        yield socket, servicer
    finally:
        server.stop(grace=None)


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ateom", "health", *args],
        cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=60, check=False,
    )


def test_serving_exits_0(served: tuple[str, health.HealthServicer]) -> None:
    socket, servicer = served
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    answer = check_health(socket)
    assert answer.serving and answer.status == "SERVING"
    done = _probe("--socket", socket)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SERVING"


def test_draining_exits_1(served: tuple[str, health.HealthServicer]) -> None:
    socket, servicer = served
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    done = _probe("--socket", socket)
    assert done.returncode == 1
    assert "NOT_SERVING" in done.stderr


def test_unknown_service_is_not_serving(served: tuple[str, health.HealthServicer]) -> None:
    socket, servicer = served
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    answer = check_health(socket, service="ateom.Nope")
    assert not answer.serving and answer.answered and answer.status == "SERVICE_UNKNOWN"
    done = _probe("--socket", socket, "--service", "ateom.Nope")
    assert done.returncode == 1 and "SERVICE_UNKNOWN" in done.stderr


def test_no_server_is_unreachable_exit_3_not_unhealthy(tmp_path: Path) -> None:
    answer = check_health(str(tmp_path / "absent.sock"), timeout=2)
    assert not answer.serving and not answer.answered and answer.status == "UNAVAILABLE"
    done = _probe("--socket", str(tmp_path / "absent.sock"), "--timeout", "2")
    assert done.returncode == 3 and "UNAVAILABLE" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    as_json = _probe("--socket", str(tmp_path / "absent.sock"), "--timeout", "2", "--json")
    assert as_json.returncode == 3
    said = json.loads(as_json.stdout)
    assert said["exit_code"] == 3 and "UNAVAILABLE" in said["error"]


def test_json_says_the_status(served: tuple[str, health.HealthServicer]) -> None:
    socket, servicer = served
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    done = _probe("--socket", socket, "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout) == {"target": socket, "status": "NOT_SERVING",
                                       "serving": False, "detail": ""}


def test_env_socket_is_the_default(served: tuple[str, health.HealthServicer]) -> None:
    socket, servicer = served
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    done = subprocess.run(
        [sys.executable, "-m", "ateom", "health"], cwd=REPO,
        env={**os.environ, "ATEOM_SOCKET": socket}, capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("given", "target"),
    [("/run/ateom/ateom.sock", "unix:/run/ateom/ateom.sock"),
     ("unix:/x.sock", "unix:/x.sock"), ("127.0.0.1:50051", "127.0.0.1:50051")],
)
def test_target_for(given: str, target: str) -> None:
    assert target_for(given) == target
