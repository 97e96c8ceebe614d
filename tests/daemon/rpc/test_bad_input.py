"""Bad input gets INVALID_ARGUMENT with a short message naming the field, over real gRPC.

A NUL anywhere, invalid UTF-8, a 1 MiB field: none may come back INTERNAL
("embedded null byte", a failed deserialization) or lose its reason to gRPC's
"metadata size exceeds hard limit". The daemon runs in-process on a unix socket
with a fake runsc; no request here gets as far as running it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from ateom.daemon.calls import validation
from ateom.daemon.lifecycle.service import AteomService
from ateom.daemon.rpc import handler, wire
from ateom.daemon.rpc.server import RunningServer, start_server
from ateom.errors import AteomError, ErrorCode
from ateom.process.reaper import Reaper
from tests.support.configs import daemon_config
from tests.support.fake_runsc import FakeRunsc

MIB = 1 << 20


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[RunningServer, grpc.Channel]]:
    fake = FakeRunsc(tmp_path / "bin")
    (tmp_path / "actors").mkdir()
    config = daemon_config(actors_root=str(tmp_path / "actors"), runsc=str(fake.path),
                          run_dir=str(tmp_path / "run"), socket=str(tmp_path / "s" / "a.sock"),
                          gpu_glob=str(tmp_path / "none*"))
    server = start_server(config, AteomService(config, reaper=Reaper()))
    channel = grpc.insecure_channel(f"unix:{config.socket}")
    try:
        yield server, channel
    finally:
        channel.close()
        server.stop(grace=0)


def refused(call: Callable[..., Any], request: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=30)
    return err.value  # type: ignore[return-value]


def raw_call(channel: grpc.Channel, method: str) -> Callable[..., Any]:
    """A call that sends bytes as they are (what a client with another protobuf could)."""
    return channel.unary_unary(method, request_serializer=None,
                               response_deserializer=None)


def dirs(server: RunningServer, **paths: str) -> pb.ActorDirs:
    root = server.service.config.actors_root
    given = {"oci_bundle_dir": f"{root}/a/bundles", "checkpoint_dir": f"{root}/a/ckpt",
             "restore_dir": f"{root}/a/restore", **paths}
    return pb.ActorDirs(**given)


# -- NUL ------------------------------------------------------------------


def _run(server: RunningServer, **fields: Any) -> pb.RunWorkloadRequest:
    return pb.RunWorkloadRequest(**{"actor_uid": "a", "actor_dirs": dirs(server), **fields})


NUL_CASES: list[tuple[str, Callable[[RunningServer], Any], str, str]] = [
    ("RunWorkload", lambda s: _run(s, actor_dirs=dirs(s, root_dir="/x\0y")),
     "actor_dirs.root_dir", ""),
    ("RunWorkload", lambda s: _run(s, actor_dirs=dirs(
        s, oci_bundle_dir=s.service.config.actors_root + "/a/b\0")),
     "actor_dirs.oci_bundle_dir", ""),
    ("RunWorkload", lambda s: _run(s, runsc_path="/usr/bin/runsc\0"), "runsc_path", ""),
    ("RunWorkload", lambda s: _run(s, atespace="ns\0"), "atespace", ""),
    ("RunWorkload", lambda s: _run(s, actor_template_name="t\0"), "actor_template_name", ""),
    ("RunWorkload", lambda s: _run(s, actor_uid="a\0b"), "actor_uid", ""),
    ("RunWorkload", lambda s: _run(s, spec=pb.WorkloadSpec(containers=[
        pb.Container(name="app"), pb.Container(name="b\0")])), "spec.containers[1].name", ""),
    ("RunWorkload", lambda s: _run(s, spec=pb.WorkloadSpec(containers=[pb.Container(
        name="app", devices=pb.DeviceRequest(policy=pb.DEVICE_POLICY_EXPLICIT,
                                             names=["nvidia.com/gpu=0\0"]))])),
     "spec.containers[0].devices.names[0]", ""),
    ("RunWorkload", lambda s: _run(s, runtime_asset_paths={"k\0": "v"}),
     "runtime_asset_paths key", ""),
    ("RunWorkload", lambda s: _run(s, runtime_asset_paths={"k": "/v\0"}),
     "runtime_asset_paths['k']", ""),
    ("CheckpointWorkload", lambda s: pb.CheckpointWorkloadRequest(
        actor_uid="a", actor_dirs=dirs(s), snapshot_uri="file:///x\0"), "snapshot_uri", ""),
    ("RestoreWorkload", lambda s: pb.RestoreWorkloadRequest(
        actor_uid="a", actor_dirs=dirs(s, restore_dir=s.service.config.actors_root + "/r\0")),
     "actor_dirs.restore_dir", ""),
    ("TerminateWorkload", lambda s: pb.TerminateWorkloadRequest(
        actor_uid="a", actor_dirs=dirs(s, volumes_dir="/v\0")), "actor_dirs.volumes_dir", ""),
    ("GetWorkloadStats", lambda s: pb.GetWorkloadStatsRequest(actor_uid="a\0"), "actor_uid", ""),
    ("PlanInjection", lambda s: pb.PlanInjectionRequest(
        bundle_dir=s.service.config.actors_root + "/a/bundles/app\0"), "bundle_dir", "Inspect"),
    ("PlanInjection", lambda s: pb.PlanInjectionRequest(
        bundle_dir=s.service.config.actors_root + "/a/bundles/app",
        devices=["nvidia.com/gpu=0\0"]), "devices[0]", "Inspect"),
    ("Doctor", lambda s: pb.DoctorRequest(devices=["nvidia.com/gpu=all\0"]), "devices[0]",
     "Inspect"),
]


@pytest.mark.parametrize(("method", "make", "field", "service"), NUL_CASES,
                         ids=[f"{c[0]}:{c[2]}" for c in NUL_CASES])
def test_a_nul_in_any_string_field_is_invalid_argument_naming_it(
        daemon: tuple[RunningServer, grpc.Channel], method: str,
        make: Callable[[RunningServer], Any], field: str, service: str) -> None:
    server, channel = daemon
    stub = pb_grpc.InspectStub(channel) if service else pb_grpc.AteomStub(channel)
    err = refused(getattr(stub, method), make(server))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details().startswith(field + " "), err.details()
    assert "NUL" in err.details() and "embedded null byte" not in err.details()


def test_validation_refuses_nul_in_paths_for_direct_callers(tmp_path: Path) -> None:
    # The service's own checks (tests and benchmarks call it without gRPC).
    for check in (validation.check_path, validation.check_path_on_disk):
        with pytest.raises(AteomError, match=r"^bundle_dir .*NUL") as err:
            check("bundle_dir", f"{tmp_path}/a\0b", str(tmp_path))
        assert err.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(AteomError, match=r"^runsc_path .*NUL") as err:
        validation.check_runsc_path("/usr/bin/runsc\0", "/usr/bin/runsc", "/opt/runsc")
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


# -- invalid UTF-8 ----------------------------------------------------------------


def _bad_utf8(message: Any, marker: str) -> bytes:
    data = message.SerializeToString()
    assert data.count(marker.encode()) == 1
    return data.replace(marker.encode(), b"\xff\xfe")


UTF8_CASES = [
    ("/ateom.Ateom/RunWorkload", pb.RunWorkloadRequest(actor_uid="a", atespace="QQ"),
     "ateom.RunWorkloadRequest"),
    ("/ateom.Ateom/TerminateWorkload", pb.TerminateWorkloadRequest(
        actor_uid="a", actor_dirs=pb.ActorDirs(root_dir="/QQ")), "ateom.TerminateWorkloadRequest"),
    ("/ateom.Ateom/GetWorkloadStats", pb.GetWorkloadStatsRequest(actor_uid="QQ"),
     "ateom.GetWorkloadStatsRequest"),
    ("/ateom.Inspect/PlanInjection", pb.PlanInjectionRequest(bundle_dir="/QQ"),
     "ateom.PlanInjectionRequest"),
]


@pytest.mark.parametrize(("method", "message", "name"), UTF8_CASES,
                         ids=[c[0] for c in UTF8_CASES])
def test_invalid_utf8_is_invalid_argument_naming_the_message(
        daemon: tuple[RunningServer, grpc.Channel], method: str, message: Any,
        name: str) -> None:
    _, channel = daemon
    err = refused(raw_call(channel, method), _bad_utf8(message, "QQ"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details() == f"{name}: cannot parse the request: String field had bad UTF-8"


def test_an_unparsable_request_is_logged_and_counted_like_any_refusal(
        daemon: tuple[RunningServer, grpc.Channel]) -> None:
    _, channel = daemon
    seen: list[tuple[str, str]] = []

    def observe(method: str, code: str, seconds: float) -> None:
        seen.append((method, code))

    handler.RPC_OBSERVERS.append(observe)
    try:
        err = refused(raw_call(channel, "/ateom.Ateom/RunWorkload"), b"\x0a\xff")  # truncated
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.details().startswith("ateom.RunWorkloadRequest: cannot parse the request")
    finally:
        handler.RPC_OBSERVERS.remove(observe)
    assert seen == [("Ateom.RunWorkload", "INVALID_ARGUMENT")]


def test_health_and_reflection_still_answer(daemon: tuple[RunningServer, grpc.Channel]) -> None:
    _, channel = daemon
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                       timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    [answer] = list(stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
    names = {s.name for s in answer.list_services_response.service}
    assert {"ateom.Ateom", "ateom.Inspect", "grpc.health.v1.Health"} <= names
    # The generated stubs still talk to the re-registered handlers.
    status = pb_grpc.InspectStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
    assert status.state == "serving"


# -- long inputs -------------------------------------------------------------


def _short(err: grpc.RpcError) -> str:
    details = err.details()
    assert len(details) < 1000, details[:300]
    return details


def test_a_1mib_actor_uid_gets_its_reason_back_short(
        daemon: tuple[RunningServer, grpc.Channel]) -> None:
    server, channel = daemon
    stub = pb_grpc.AteomStub(channel)
    uid = "u" * MIB
    for call, request in [
        (stub.RunWorkload, _run(server, actor_uid=uid)),
        (stub.TerminateWorkload, pb.TerminateWorkloadRequest(actor_uid=uid)),
        (stub.GetWorkloadStats, pb.GetWorkloadStatsRequest(actor_uid=uid)),
    ]:
        err = refused(call, request)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()[:300]
        details = _short(err)
        assert details.startswith(f"actor_uid '{'u' * 200}…' ({MIB} chars): must be 1-128")


def test_long_paths_container_and_device_names_are_quoted_short(
        daemon: tuple[RunningServer, grpc.Channel]) -> None:
    server, channel = daemon
    stub = pb_grpc.AteomStub(channel)
    root = server.service.config.actors_root
    long_path = f"{root}/" + "p" * MIB
    err = refused(stub.RunWorkload, _run(server, actor_dirs=dirs(server, root_dir=long_path)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "actor_dirs.root_dir" in _short(err) and "PATH_MAX" in err.details()
    err = refused(stub.RunWorkload, _run(server, actor_dirs=dirs(server, root_dir="p" * 300)))
    assert "must be an absolute path" in _short(err)
    err = refused(stub.RunWorkload, _run(server, spec=pb.WorkloadSpec(
        containers=[pb.Container(name="N" * MIB)])))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _short(err).startswith("spec.containers[0].name 'NNN")
    err = refused(stub.RunWorkload, _run(server, spec=pb.WorkloadSpec(containers=[pb.Container(
        name="app", devices=pb.DeviceRequest(policy=pb.DEVICE_POLICY_EXPLICIT,
                                             names=["nvidia.com/gpu=" + "9" * MIB + "!"]))])))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _short(err).startswith("spec.containers[0].devices.names[0] 'nvidia.com/gpu=999")
    assert f"({MIB + 16} chars): not a qualified CDI device name" in err.details()
    err = refused(stub.RunWorkload, _run(server, runsc_path="/r" * MIB))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "runsc_path" in _short(err)
    inspect = pb_grpc.InspectStub(channel)
    err = refused(inspect.PlanInjection, pb.PlanInjectionRequest(bundle_dir="/b" * MIB))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _short(err).startswith("bundle_dir '/b/b")


def test_quote_bounds_what_it_echoes() -> None:
    assert validation.quote("abc") == "'abc'"
    assert validation.quote("a" * 200) == repr("a" * 200)
    assert validation.quote("abc" + "x" * MIB, limit=3) == f"'abc…' ({MIB + 3} chars)"
    assert validation.quote("a\0b") == "'a\\x00b'"


# -- any message at all: the status detail is capped --------------------------


class _Loud:
    """An Inspect servicer whose every answer is a 1 MiB refusal."""

    @handler.rpc("Inspect.GetStatus")
    def GetStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        raise AteomError("why " * MIB, code=ErrorCode.FAILED_PRECONDITION)

    @handler.rpc("Inspect.ListDevices")
    def ListDevices(self, request: Any, context: grpc.ServicerContext) -> Any:
        raise ValueError("x" * MIB)

    PlanInjection = GetStatus
    ListActors = GetStatus
    Doctor = GetStatus


def test_a_huge_status_message_is_cut_not_lost(tmp_path: Path) -> None:
    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler.add_servicer(server, _Loud(), pb.DESCRIPTOR.services_by_name["Inspect"])
    server.add_insecure_port(f"unix:{tmp_path}/s")
    server.start()
    try:
        with grpc.insecure_channel(f"unix:{tmp_path}/s") as channel:
            stub = pb_grpc.InspectStub(channel)
            err = refused(stub.GetStatus, pb.GetStatusRequest())
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert err.details().startswith("why why") and len(err.details()) < 5000
            assert err.details().endswith(f"… ({4 * MIB} bytes)")
            err = refused(stub.ListDevices, pb.ListDevicesRequest())
            assert err.code() == grpc.StatusCode.INTERNAL
            assert err.details().startswith("internal error: xxx") and len(err.details()) < 5000
    finally:
        server.stop(0)


def test_a_handler_not_wrapped_in_rpc_is_refused_at_registration() -> None:
    class Bare(_Loud):
        def Doctor(self, request: Any, context: grpc.ServicerContext) -> Any:
            return pb.DoctorResponse()

    with pytest.raises(TypeError, match="Bare.Doctor"):
        handler.add_servicer(grpc.server(None), Bare(),  # type: ignore[arg-type]
                         pb.DESCRIPTOR.services_by_name["Inspect"])


def test_decode_passes_parsed_messages_through_checked() -> None:
    ok = pb.RunWorkloadRequest(actor_uid="a")
    assert wire.decode(ok) is ok
    assert wire.decode(wire.Undecoded(pb.RunWorkloadRequest, ok.SerializeToString())) == ok
    with pytest.raises(AteomError, match=r"^spec\.containers\[0\]\.name "):
        wire.decode(pb.RunWorkloadRequest(spec=pb.WorkloadSpec(
            containers=[pb.Container(name="\0")])))
