"""The gRPC layer in-process: socket handling, health, code translation (fake runsc)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from structlog.testing import capture_logs

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from ateom.daemon.lifecycle.service import AteomService
from ateom.daemon.rpc.server import prepare_socket, start_server
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.nvidia_ctk import SpecGenerator
from ateom.process.reaper import Reaper
from ateom.settings import NodeSettings
from tests.daemon.rpc.test_tls import make_pki
from tests.support.configs import daemon_config
from tests.support.fake_runsc import FakeRunsc


@pytest.fixture
def running(tmp_path: Path):  # type: ignore[no-untyped-def]
    fake = FakeRunsc(tmp_path / "bin")
    sock = tmp_path / "run" / "sock" / "ateom.sock"
    sock.parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock))  # a stale socket from a previous daemon
    stale.close()
    (tmp_path / "actors").mkdir()  # the node agent's volume
    config = daemon_config(actors_root=str(tmp_path / "actors"), runsc=str(fake.path),
                          run_dir=str(tmp_path / "run"), socket=str(sock),
                          gpu_glob=str(tmp_path / "none*"))
    service = AteomService(config, reaper=Reaper())
    server = start_server(config, service)
    channel = grpc.insecure_channel(f"unix:{sock}")
    yield server, channel, sock
    channel.close()
    server.stop(grace=0)
    assert not sock.exists()  # removed on exit


def test_socket_health_and_codes(running) -> None:  # type: ignore[no-untyped-def]
    server, channel, sock = running
    assert stat.S_ISSOCK(os.stat(sock).st_mode)
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o660
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", "ateom.Ateom", "ateom.Inspect"):
        resp = health.Check(health_pb2.HealthCheckRequest(service=name))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    stub = pb_grpc.AteomStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
            actor_uid="ghost", actor_dirs=pb.ActorDirs(
                checkpoint_dir=server.service.config.actors_root + "/ghost/c")))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "ghost" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.GetWorkloadStats(pb.GetWorkloadStatsRequest(actor_uid="ghost"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert not stub.GetActiveWorkloadStats(pb.GetActiveWorkloadStatsRequest()).samples
    stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid="ghost"))  # idempotent

    assert server.tcp_port is None  # no --listen: no TCP (test_tls.py serves TCP)

    server.set_serving(False)
    server.service.state = "draining"
    resp = health.Check(health_pb2.HealthCheckRequest(service=""))
    assert resp.status == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.RpcError) as err:
        stub.RunWorkload(pb.RunWorkloadRequest(actor_uid="late"))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "draining" in err.value.details()
    status = pb_grpc.InspectStub(channel).GetStatus(pb.GetStatusRequest())
    assert status.state == "draining" and status.runsc.version == "fake-1"
    assert not status.runsc.supports_nvproxy and not status.gpu_present


def test_existing_socket_dir_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o1777)
    prepare_socket(str(shared / "a.sock"))
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o1777
    prepare_socket(str(tmp_path / "new" / "a.sock"))
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


def test_refuses_to_replace_a_non_socket(tmp_path: Path) -> None:
    victim = tmp_path / "important.txt"
    victim.write_text("keep")
    with pytest.raises(AteomError) as err:
        prepare_socket(str(victim))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert victim.read_text() == "keep"


def test_refuses_a_socket_another_daemon_is_serving(tmp_path: Path) -> None:
    path = tmp_path / "live.sock"
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(path))
    live.listen(1)
    try:
        with pytest.raises(AteomError, match="serving") as err:
            prepare_socket(str(path))
        assert err.value.code is ErrorCode.FAILED_PRECONDITION
        probe = socket.socket(socket.AF_UNIX)
        probe.connect(str(path))  # still the other daemon's
        probe.close()
    finally:
        live.close()


def test_busy_listen_address_is_an_error_naming_the_flag_and_leaves_no_socket(
        tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    sock = tmp_path / "s" / "ateom.sock"
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    config = daemon_config(actors_root=str(tmp_path / "actors"), runsc="/bin/false",
                          run_dir=str(tmp_path / "run"), socket=str(sock),
                          listen=f"127.0.0.1:{busy.getsockname()[1]}",
                          tls_cert=str(pki.server_cert), tls_key=str(pki.server_key),
                          tls_client_ca=str(pki.ca))
    try:
        with pytest.raises(AteomError, match="--listen") as err:
            start_server(config, AteomService(config, reaper=Reaper()))
        assert err.value.code is ErrorCode.FAILED_PRECONDITION
        assert not sock.exists()
    finally:
        busy.close()


def _fake_ctk(driver_root: Path, script: str) -> None:
    (driver_root / "bin").mkdir(parents=True, exist_ok=True)
    tool = driver_root / "bin" / "nvidia-ctk"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)


def test_spec_generation_runs_once_and_failures_are_not_remembered(tmp_path: Path) -> None:
    driver = tmp_path / "driver"
    calls = tmp_path / "calls"
    _fake_ctk(driver, f'echo "$@" >> {calls}; echo driver not loaded >&2; exit 1\n')
    gen = SpecGenerator(Reaper(), NodeSettings(driver_root=str(driver),
                                                toolkit_dir=str(tmp_path / "no-toolkit")),
                        str(tmp_path / "out"), {"PATH": os.defpath}, beneath=str(tmp_path))
    with pytest.raises(AteomError, match="driver not loaded") as err:
        gen.ensure()
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    # The real binary is preferred over the wrapper, and a failure is retried.
    _fake_ctk(driver, "")
    real = driver / "bin" / "nvidia-ctk.real"
    real.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        'for a; do case "$a" in --output=*) echo "{}" > "${a#--output=}";; esac; done\n'
    )
    real.chmod(0o755)
    out = gen.ensure()
    assert out == str(tmp_path / "out" / "nvidia.json") and Path(out).exists()
    assert gen.ensure() == out
    lines = calls.read_text().splitlines()
    assert len(lines) == 2
    # nvidia-ctk writes into a private staging dir; ateom puts the spec in place.
    generate = lines[1].split()
    assert generate[:3] == ["cdi", "generate", "--format=json"]
    assert generate[3] == f"--library-search-path={driver}/lib64"
    staged = Path(generate[4].removeprefix("--output="))
    assert staged.parent.parent == tmp_path / "out" and staged.name == "nvidia.json"
    assert not staged.parent.exists()  # the staging dir is gone
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["nvidia.json"]


def test_nvidia_ctk_is_found_toolkit_dir_first_real_before_wrapper(tmp_path: Path) -> None:
    from ateom.gpuinfo.nvidia_ctk import find_nvidia_ctk

    toolkit, driver, on_path = tmp_path / "tk", tmp_path / "drv", tmp_path / "path"

    def tool(path: Path) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return str(path)

    def found() -> str | None:
        return find_nvidia_ctk(str(toolkit), str(driver), f"/nonexistent:{on_path}")

    assert found() is None
    path_real = tool(on_path / "nvidia-ctk.real")
    assert found() == path_real
    driver_wrapper = tool(driver / "bin" / "nvidia-ctk")
    assert found() == driver_wrapper  # directory order beats .real further down $PATH
    toolkit_wrapper = tool(toolkit / "nvidia-ctk")
    assert found() == toolkit_wrapper
    toolkit_real = tool(toolkit / "nvidia-ctk.real")
    assert found() == toolkit_real  # within a directory, .real before the wrapper
    (toolkit / "nvidia-ctk.real").chmod(0o644)  # not executable: not a candidate
    assert found() == toolkit_wrapper


def test_spec_generator_runs_the_toolkit_dirs_nvidia_ctk(tmp_path: Path) -> None:
    toolkit, driver = tmp_path / "tk", tmp_path / "drv"
    _fake_ctk(driver, "exit 1\n")  # would fail: must not be the one run
    toolkit.mkdir()
    real = toolkit / "nvidia-ctk.real"
    real.write_text(
        '#!/bin/sh\necho "PATH=$PATH" > "$(dirname "$0")/seen"\n'
        'for a; do case "$a" in --output=*) echo "{}" > "${a#--output=}";; esac; done\n'
    )
    real.chmod(0o755)
    gen = SpecGenerator(Reaper(), NodeSettings(driver_root=str(driver), toolkit_dir=str(toolkit)),
                        str(tmp_path / "out"), {"PATH": "/usr/bin:/bin"}, beneath=str(tmp_path))
    assert Path(gen.ensure()).exists()
    # The driver's bin/ still comes first on the child's PATH, as the issue asks.
    assert (toolkit / "seen").read_text().strip() == (
        f"PATH={driver}/bin:{toolkit}:/usr/bin:/bin")


def test_each_rpc_line_says_its_wall_time_and_its_own_threads_cpu(running) -> None:  # type: ignore[no-untyped-def]
    _, channel, _ = running
    with capture_logs() as logs:
        pb_grpc.InspectStub(channel).GetStatus(pb.GetStatusRequest())
    [line] = [e for e in logs if e.get("event") == "rpc"]
    assert line["rpc"] == "Inspect.GetStatus" and line["code"] == "OK"
    assert 0 < line["cpu_ms"] <= line["duration_ms"] + 1  # CPU never outruns the clock
