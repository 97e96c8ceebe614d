"""The metrics scrape moves when a real GPU actor runs under real runsc.

`ateom serve --metrics-listen` runs a simulated-GPU actor through the daemon suite's
world (busybox bundles, fake ELF driver libraries, a runsc shim reporting nvproxy in front
of Debian's runsc); the scrape is parsed with prometheus_client's parser before, while
hosted, and after Terminate.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runsc") is None or shutil.which("gcc") is None
    or not os.path.exists("/bin/busybox"),
    reason="needs root, runsc, gcc and /bin/busybox (real sandboxes)",
)


def sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MetricsDaemon:
    def __init__(self, base: Path, *, metrics: bool = True) -> None:
        from tests.support.daemon import DaemonWorld

        self.world = DaemonWorld(base)
        self.log = open(base / "daemon.log", "wb")  # noqa: SIM115
        port = free_port()
        argv = self.world.daemon_args(str(self.world.shim))
        if metrics:
            argv += ["--metrics-listen", f"127.0.0.1:{port}"]
        self.proc = subprocess.Popen(
            argv, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "ATEOM_NVIDIA_TOOLKIT_DIR": str(base / "toolkit")},
        )
        self.channel = grpc.insecure_channel(f"unix:{self.world.socket}")
        self._wait_serving()
        self.url = f"http://127.0.0.1:{port}/metrics"

    def _wait_serving(self, timeout: float = 30.0) -> None:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited: {self.logs()}")
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"not SERVING: {self.logs()}")

    def logs(self) -> str:
        return (self.world.base / "daemon.log").read_text(errors="replace")

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as resp:
            return resp.read().decode()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.channel.close()
        self.log.close()
        return code


@pytest.fixture
def metrics_daemon(tmp_path: Path) -> Iterator[MetricsDaemon]:
    from tests.support.daemon import dev_null_ok, runsc_processes

    d = MetricsDaemon(tmp_path)
    try:
        yield d
    finally:
        assert d.stop() == 0, d.logs()[-3000:]
    state_root = d.world.run_dir / "actors"
    for uid_dir in state_root.glob("*") if state_root.exists() else []:
        assert not runsc_processes(str(uid_dir)), "sandbox processes left"
    assert dev_null_ok(), "/dev/null lost root:root 0666"


def test_scrape_moves_when_a_gpu_actor_runs(metrics_daemon: MetricsDaemon) -> None:
    from ateom._proto import ateom_pb2 as pb
    from ateom._proto import ateom_pb2_grpc as pb_grpc
    from tests.support.daemon import run_request

    d = metrics_daemon
    stub = pb_grpc.AteomStub(d.channel)
    run = "RunWorkload"
    before = d.scrape()
    assert sample(before, "ateom_hosted_actors") == 0
    assert sample(before, "ateom_rpc_requests_total", service="Ateom", method=run, code="OK") == 0

    uid = "metrics-actor"
    d.world.bundles(uid, {"app": ["sleep", "1000"]})
    stub.RunWorkload(run_request(d.world, uid, [pb.Container(name="app")]), timeout=120)
    hosted = d.scrape()
    assert sample(hosted, "ateom_hosted_actors") == 1
    assert sample(hosted, "ateom_rpc_requests_total", service="Ateom", method=run, code="OK") == 1
    assert sample(hosted, "ateom_rpc_duration_seconds_count", service="Ateom",
                  method=run, code="OK") == 1
    # pause + app created and started; the app's devices injected.
    for phase in ("runsc.create", "runsc.start"):
        assert sample(hosted, "ateom_phase_duration_seconds_count", phase=phase,
                      outcome="ok") >= 2, phase
    assert sample(hosted, "ateom_phase_duration_seconds_count", phase="inject",
                  outcome="ok") >= 1
    lookups = sum(sample(hosted, "ateom_injection_soname_cache_lookups_total", result=r)
                  for r in ("hit", "miss"))
    assert lookups >= 2  # libcuda and libnvidia-ml at least

    stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid,
                                                       actor_dirs=d.world.actor_dirs(uid)),
                           timeout=120)
    with pytest.raises(grpc.RpcError) as refused:
        stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
            actor_uid=uid, actor_dirs=d.world.actor_dirs(uid)), timeout=30)
    assert refused.value.code() is grpc.StatusCode.NOT_FOUND
    after = d.scrape()
    assert sample(after, "ateom_hosted_actors") == 0
    assert sample(after, "ateom_rpc_requests_total",
                  service="Ateom", method="TerminateWorkload", code="OK") == 1
    assert sample(after, "ateom_rpc_requests_total", service="Ateom", method="CheckpointWorkload",
                  code="NOT_FOUND") == 1


def test_scrape_times_checkpoint_and_restore(metrics_daemon: MetricsDaemon) -> None:
    # The other two runsc phases the issue names, from a real checkpoint and restore
    # (a pause-only actor: Debian's runsc restores one container, not several).
    from ateom._proto import ateom_pb2 as pb
    from ateom._proto import ateom_pb2_grpc as pb_grpc
    from tests.support.daemon import run_request

    d = metrics_daemon
    stub = pb_grpc.AteomStub(d.channel)
    uid = "metrics-snapshot"
    dirs = d.world.actor_dirs(uid)
    d.world.bundles(uid, {})
    before = d.scrape()
    for phase in ("runsc.checkpoint", "runsc.restore"):
        assert sample(before, "ateom_phase_duration_seconds_count", phase=phase,
                      outcome="ok") == 0, phase

    stub.RunWorkload(run_request(d.world, uid, []), timeout=120)
    stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(actor_uid=uid, actor_dirs=dirs),
                            timeout=120)
    shutil.copytree(dirs.checkpoint_dir, dirs.restore_dir)  # the node agent's move
    stub.RestoreWorkload(pb.RestoreWorkloadRequest(
        actor_uid=uid, actor_dirs=dirs, scope=pb.SNAPSHOT_SCOPE_FULL), timeout=120)
    restored = d.scrape()
    for phase in ("runsc.checkpoint", "runsc.restore"):
        assert sample(restored, "ateom_phase_duration_seconds_count", phase=phase,
                      outcome="ok") == 1, phase
        assert sample(restored, "ateom_phase_duration_seconds_sum", phase=phase,
                      outcome="ok") > 0, phase
    for method in ("CheckpointWorkload", "RestoreWorkload"):
        assert sample(restored, "ateom_rpc_requests_total",
                      service="Ateom", method=method, code="OK") == 1
    assert sample(restored, "ateom_hosted_actors") == 1
    stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid, actor_dirs=dirs),
                           timeout=120)
    assert sample(d.scrape(), "ateom_hosted_actors") == 0


def tcp_listeners(pid: int) -> list[str]:
    """The TCP sockets process `pid` listens on, as /proc/net/tcp{,6} rows (reads /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    rows = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    rows.append(f"{table} {cols[1]}")
    return rows


def test_metrics_are_off_unless_asked_for(tmp_path: Path) -> None:
    plain = MetricsDaemon(tmp_path / "plain", metrics=False)
    try:
        assert tcp_listeners(plain.proc.pid) == []
    finally:
        assert plain.stop() == 0, plain.logs()[-3000:]
    asked = MetricsDaemon(tmp_path / "asked")
    try:
        # The same probe sees the endpoint when it is asked for.
        port = int(asked.url.split(":")[2].split("/")[0])
        assert [r for r in tcp_listeners(asked.proc.pid) if r.endswith(f":{port:04X}")]
    finally:
        assert asked.stop() == 0, asked.logs()[-3000:]
