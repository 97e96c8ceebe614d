"""`ateom.Inspect/Doctor`: the doctor inside the daemon, over gRPC, on a simulated GPU worker.

An in-process server with the daemon's reaper running its commands; the
answer must be the report `ateom doctor --json` prints with the same settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from ateom.daemon.lifecycle.config import DaemonConfig
from ateom.daemon.lifecycle.service import AteomService
from ateom.daemon.rpc import inspection as inspect_module
from ateom.daemon.rpc.inspection import Inspector
from ateom.daemon.rpc.server import RunningServer, start_server
from ateom.doctor import CHECK_NAMES
from ateom.process.reaper import Reaper
from tests.support import configs
from tests.support.doctor_worker import POD_RUNSC_FLAGS, GpuWorker

REPO = Path(__file__).resolve().parents[2]
def daemon_config(worker: GpuWorker, base: Path) -> DaemonConfig:
    """`ateom serve` pointed at the simulated worker, as its env twins would."""
    (base / "actors").mkdir(parents=True, exist_ok=True)  # the node agent's volume
    return configs.daemon_config(
        actors_root=str(base / "actors"), run_dir=str(base / "run"),
        socket=str(base / "run" / "ateom.sock"), runsc=str(worker.runsc),
        gpu_glob=str(worker.dev / "nvidia[0-9]*"), spec_dirs=(str(worker.root / "cdi"),),
        driver_root=str(worker.root / "driver"), toolkit_dir=str(worker.toolkit),
        runsc_global_flags=tuple(POD_RUNSC_FLAGS.split()), env=worker.env(),
    )


@pytest.fixture
def server(gpu_worker: GpuWorker, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningServer]:
    # The daemon reads the host's /proc; here, the simulated worker's NVIDIA module.
    real = inspect_module.doctor_config
    monkeypatch.setattr(inspect_module, "doctor_config", lambda config, dirs: configs.doctor_config(
        real(config, dirs), proc_root=str(gpu_worker.proc_root)))
    config = daemon_config(gpu_worker, gpu_worker.root / "daemon")
    running = start_server(config, AteomService(config, reaper=Reaper()))
    try:
        yield running
    finally:
        running.stop(grace=0)


@pytest.fixture
def inspect(server: RunningServer) -> Iterator[pb_grpc.InspectStub]:
    with grpc.insecure_channel(f"unix:{server.socket}") as channel:
        yield pb_grpc.InspectStub(channel)


def as_dicts(resp: pb.DoctorResponse) -> list[dict[str, object]]:
    return [{"name": c.name, "status": pb.DoctorStatus.Name(c.status), "summary": c.summary,
             "fix": c.fix, "details": list(c.details)} for c in resp.checks]


def cli_report(worker: GpuWorker, *args: str) -> dict[str, object]:
    """`ateom doctor --json` on the worker, told the daemon's dirs as its flags would."""
    daemon = worker.root / "daemon"
    dirs = ("--actors-root", str(daemon / "actors"), "--run-dir", str(daemon / "run"))
    done = subprocess.run(
        [sys.executable, "-m", "ateom", "doctor", "--json", *worker.cli_args(), *dirs, *args],
        env={**os.environ, **worker.env()}, cwd=REPO, capture_output=True, text=True,
        timeout=120, check=False,
    )
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_healthy_worker_answers_ok_and_the_clis_checks(
        gpu_worker: GpuWorker, inspect: pb_grpc.InspectStub) -> None:
    resp = inspect.Doctor(pb.DoctorRequest(), timeout=120)
    assert resp.ok, as_dicts(resp)
    assert [c.name for c in resp.checks] == list(CHECK_NAMES)
    assert {c.status for c in resp.checks} == {pb.DOCTOR_STATUS_PASS}
    cli = cli_report(gpu_worker)
    assert cli["ok"] is True
    assert as_dicts(resp) == cli["checks"]


def test_broken_worker_answers_not_ok_with_the_failing_check(
        gpu_worker: GpuWorker, inspect: pb_grpc.InspectStub) -> None:
    gpu_worker.remove_control_node("nvidia-uvm")
    resp = inspect.Doctor(pb.DoctorRequest(), timeout=120)
    assert not resp.ok
    failed = {c.name: c for c in resp.checks if c.status == pb.DOCTOR_STATUS_FAIL}
    assert list(failed) == ["control-nodes"]
    assert "nvidia-uvm" in failed["control-nodes"].summary and failed["control-nodes"].fix
    assert as_dicts(resp) == cli_report(gpu_worker)["checks"]


def test_requested_devices_replace_the_default(
        gpu_worker: GpuWorker, inspect: pb_grpc.InspectStub) -> None:
    resp = inspect.Doctor(pb.DoctorRequest(devices=["nvidia.com/gpu=1"]), timeout=120)
    assert resp.ok
    assert as_dicts(resp) == cli_report(gpu_worker, "--device", "nvidia.com/gpu=1")["checks"]
    assert as_dicts(resp) != cli_report(gpu_worker)["checks"]
    unknown = inspect.Doctor(pb.DoctorRequest(devices=["nvidia.com/gpu=9"]), timeout=120)
    assert not unknown.ok
    [resolve] = [c for c in unknown.checks if c.name == "cdi-resolve"]
    assert resolve.status == pb.DOCTOR_STATUS_FAIL
    assert "nvidia.com/gpu=9" in resolve.summary + " ".join(resolve.details)


def test_a_second_report_meanwhile_is_refused_not_queued(
        server: RunningServer, inspect: pb_grpc.InspectStub) -> None:
    lock = Inspector.doctor_lock
    assert lock.acquire(blocking=False)  # a report in progress
    try:
        with pytest.raises(grpc.RpcError) as err:
            inspect.Doctor(pb.DoctorRequest(), timeout=30)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "doctor report" in (err.value.details() or "")
    finally:
        lock.release()
    assert inspect.Doctor(pb.DoctorRequest(), timeout=120).ok
