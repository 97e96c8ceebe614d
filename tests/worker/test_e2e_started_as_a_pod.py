"""`ateom serve` started as Substrate's controller starts a worker, for real.

The worker Pod is stood up with namespaces: a private mount namespace where the
node's base dir (a temp dir here, the hostPath there) is at /var/lib/ateom-gvisor,
the downward-API capacity files at /run/ateom-capacity, and a network namespace
of its own, where the readiness endpoint binds the controller's port 8080. Then
ateom runs with exactly the controller's arguments and POD_UID, and is driven as
the node agent and the kubelet drive it: the socket under the base dir keyed by
the Pod's uid, GET /readyz, the router's HTTPS on :443 with the Pod's podcert
bundles (made here, mounted where the controller mounts them), a busybox actor
laid out under <base>/actors on Debian's runsc, a kill -9 and a restart of the
same Pod.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from tests.daemon.conftest import needs_runsc
from tests.support import build_busybox_bundle
from tests.support.certs import INTRUDER_ID, ROUTER_ID, make_certs
from tests.support.daemon import RUNSC
from tests.support.substrate import (
    BASE_DIR,
    CAPACITY_DIR,
    EGRESS_TRUST_DIR,
    IDENTITY_DIR,
    controller_args,
)

pytestmark = [needs_runsc, pytest.mark.root, pytest.mark.runtime,
              pytest.mark.skipif(shutil.which("ip") is None or shutil.which("nsenter") is None,
                                 reason="needs ip and nsenter (iproute2, util-linux)")]

REPO = Path(__file__).resolve().parents[2]
POD = "5f0e4c1a-7b2d-4c3e-9a8b-0123456789ab"

# Stand the Pod's mounts and network up, then exec the daemon: the base dir and the
# capacity files at the paths the controller mounts them, lo up in a netns of its own.
POD_SHELL = f"""
set -e
mount --make-rprivate /
mount -t tmpfs ateom-var-lib /var/lib
mkdir -p {BASE_DIR}
mount --bind "$POD_BASE" {BASE_DIR}
mount -t tmpfs ateom-run /run
mkdir -p {CAPACITY_DIR} {IDENTITY_DIR} {EGRESS_TRUST_DIR}
mount --bind "$POD_CAPACITY" {CAPACITY_DIR}
cp "$POD_CERTS/worker-credential-bundle.pem" {IDENTITY_DIR}/credential-bundle.pem
cp "$POD_CERTS/root.pem" {IDENTITY_DIR}/trust-bundle.pem
cp "$POD_CERTS/root.pem" {EGRESS_TRUST_DIR}/trust-bundle.pem
ip link set lo up
exec "$@"
"""


class Pod:
    """ateom serve in a stand-in worker Pod (its own mount and network namespaces)."""

    def __init__(self, tmp: Path, *, runsc: str | None = RUNSC,
                 runsc_flags: str = "--network=none --ignore-cgroups",
                 wrap: tuple[str, ...] = ()) -> None:
        self.base = tmp / "base"  # the node's base dir, as the node agent sees it
        self.capacity = tmp / "capacity"
        self.log_path = tmp / f"ateom-{time.monotonic_ns()}.log"
        self.base.mkdir(exist_ok=True)
        self.capacity.mkdir(exist_ok=True)
        (self.capacity / "cpu_milli").write_text("4000")
        (self.capacity / "memory_bytes").write_text(str(8 << 30))
        # The podcert bundles the controller mounts: the Pod's key and chain, the CA
        # the router's certificate chains to.
        (tmp / "certs").mkdir(exist_ok=True)
        self.certs = make_certs(tmp / "certs")
        # What the image sets (Dockerfile ENV), the kubelet sets (POD_UID), and PATH.
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
               "POD_UID": POD, "POD_BASE": str(self.base), "POD_CAPACITY": str(self.capacity),
               "POD_CERTS": str(self.certs.dir),
               "ATEOM_RUNSC": runsc or "runsc",
               "ATEOM_RUNSC_GLOBAL_FLAGS": runsc_flags,
               "LANG": "C.UTF-8"}
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--net", "--", "sh", "-c", POD_SHELL, "pod",
             *wrap, sys.executable, "-m", "ateom", "serve", *controller_args(POD)],
            cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
        # The node agent dials the Pod's socket under the shared base dir.
        self.socket = self.base / "ateoms" / POD / "ateom.sock"
        self.channel = grpc.insecure_channel(f"unix:{self.socket}")
        self.stub = pb_grpc.AteomStub(self.channel)
        self.inspect = pb_grpc.InspectStub(self.channel)

    def wait_health(self, want: str = "SERVING", timeout: float = 30) -> None:
        health = health_pb2_grpc.HealthStub(self.channel)
        status = health_pb2.HealthCheckResponse.ServingStatus.Value(want)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.logs()
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == status:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"not {want} within {timeout} s:\n{self.logs()}")

    def readyz(self, path: str = "/readyz") -> tuple[int, str]:
        """GET on port 8080 from inside the Pod's network namespace, as the kubelet's
        probe reaches the Pod IP."""
        client = ("import sys, urllib.request, urllib.error\n"
                  "try:\n"
                  f"    r = urllib.request.urlopen('http://127.0.0.1:8080{path}', timeout=5)\n"
                  "    code, body = r.status, r.read()\n"
                  "except urllib.error.HTTPError as e:\n"
                  "    code, body = e.code, e.read()\n"
                  "sys.stdout.write(f'{code}\\n' + body.decode())\n")
        done = subprocess.run(["nsenter", f"--net=/proc/{self.proc.pid}/ns/net",
                               sys.executable, "-c", client],
                              capture_output=True, text=True, timeout=30, check=True)
        code, _, body = done.stdout.partition("\n")
        return int(code), body

    def router_get(self, host: str, who: tuple[Path, Path] | None = None) -> tuple[int, str]:
        """GET / on :443 from inside the Pod's network namespace, with mutual TLS as
        Substrate's router (or as `who`)."""
        cert, key = who or self.certs.router
        client = ("import http.client, ssl, sys\n"
                  f"ctx = ssl.create_default_context(cafile={str(self.certs.trust)!r})\n"
                  f"ctx.load_cert_chain({str(cert)!r}, {str(key)!r})\n"
                  "ctx.check_hostname = False\n"
                  "c = http.client.HTTPSConnection('127.0.0.1', 443, context=ctx, timeout=10)\n"
                  f"c.request('GET', '/', headers={{'Host': {host!r}}})\n"
                  "r = c.getresponse()\n"
                  "sys.stdout.write(f'{r.status}\\n' + r.read().decode())\n")
        done = subprocess.run(["nsenter", f"--net=/proc/{self.proc.pid}/ns/net",
                               sys.executable, "-c", client],
                              capture_output=True, text=True, timeout=30, check=True)
        code, _, body = done.stdout.partition("\n")
        return int(code), body

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self) -> list[dict[str, object]]:
        out = []
        for line in self.logs().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.channel.close()
        self._log.close()
        return code


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp dir with a short path: the Pod's socket under it must fit a unix
    socket's 107 bytes, as it does under /var/lib/ateom-gvisor."""
    path = Path(tempfile.mkdtemp(prefix="pod-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def pod(short_tmp: Path) -> Iterator[Pod]:
    started = Pod(short_tmp)
    try:
        started.wait_health()
        yield started
    finally:
        started.stop()


def test_the_controllers_arguments_serve_the_node_agent_the_kubelet_and_the_operator(
        pod: Pod) -> None:
    # The kubelet's readiness probe: 200 once an actor can run.
    assert pod.readyz() == (200, "ok\n")
    assert pod.readyz("/metrics")[0] == 404
    status = pod.inspect.GetStatus(pb.GetStatusRequest(), timeout=30)
    worker = status.worker
    assert (worker.pod_uid, worker.socket, worker.actors_root) == (
        POD, f"{BASE_DIR}/ateoms/{POD}/ateom.sock", f"{BASE_DIR}/actors")
    assert (worker.cpu_milli, worker.memory_bytes, list(worker.capacity_problems)) == (
        4000, 8 << 30, [])
    assert worker.readiness_listen_address == "0.0.0.0:8080"
    # Every --atunnel-* flag is served: nothing is said to be taken and not served.
    assert list(worker.accepted_not_served) == []
    doctor = pod.inspect.Doctor(pb.DoctorRequest(), timeout=120)
    [check] = [c for c in doctor.checks if c.name == "worker"]
    assert check.status == pb.DOCTOR_STATUS_PASS
    assert f"pod {POD}: cpu 4000m, memory {8 << 30} bytes" in check.summary
    # The router reaches the data plane on :443 with the Pod's bundles; a stranger
    # with a certificate from the same CA is told 403.
    host = "one.demo.actors.resources.substrate.ate.dev"
    code, body = pod.router_get(host)
    assert code == 404 and "no actor 'one' in atespace 'demo' here" in body, body
    code, body = pod.router_get(host, pod.certs.intruder)
    assert code == 403 and INTRUDER_ID in body and ROUTER_ID in body, body
    # The node agent lays an actor out under <base>/actors and runs it.
    uid = "pod-actor-1"
    bundles = pod.base / "actors" / uid / "bundles"
    build_busybox_bundle(bundles / "_pause", ["sleep", "1000"])
    build_busybox_bundle(bundles / "app", ["sh", "-c", "echo up; sleep 1000"])
    root = f"{BASE_DIR}/actors/{uid}"
    pod.stub.RunWorkload(pb.RunWorkloadRequest(
        actor_uid=uid, atespace="demo", actor_name="one",
        spec=pb.WorkloadSpec(containers=[pb.Container(name="app")]),
        cpu_milli=3000, memory_bytes=2 << 30,
        actor_dirs=pb.ActorDirs(root_dir=root, oci_bundle_dir=f"{root}/bundles",
                                checkpoint_dir=f"{root}/checkpoint",
                                restore_dir=f"{root}/restore")), timeout=120)
    status = pod.inspect.GetStatus(pb.GetStatusRequest(), timeout=30)
    assert [(a.actor_uid, a.phase) for a in status.actors] == [(uid, "running")]
    # What it asked of the Pod's 4000m and 8 GiB.
    assert (status.worker.cpu_milli_in_use, status.worker.memory_bytes_in_use) == (
        3000, 2 << 30)
    pod.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)


def test_a_restarted_container_of_the_same_pod_replaces_its_dead_socket(short_tmp: Path) -> None:
    first = Pod(short_tmp)
    first.wait_health()
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    assert first.socket.is_socket()  # left behind by the kill
    second = Pod(short_tmp)
    try:
        second.wait_health()
        assert second.readyz() == (200, "ok\n")
        assert any(e.get("event") == "stale_socket_removed" for e in second.events())
    finally:
        assert second.stop() == 0, second.logs()[-2000:]
    assert not second.socket.exists()


def test_readyz_says_503_and_why_when_no_actor_could_run(short_tmp: Path) -> None:
    missing = short_tmp / "no" / "runsc"
    pod = Pod(short_tmp, runsc=str(missing))
    try:
        pod.wait_health("NOT_SERVING")
        code, body = pod.readyz()
        assert code == 503
        assert str(missing) in body and "not found or not executable" in body, body
    finally:
        pod.stop()


def test_readyz_says_503_when_the_worker_cannot_make_actors_networks(short_tmp: Path) -> None:
    # Without CAP_NET_ADMIN no namespace, veth or nftables rule can be made: every Run
    # would fail, so the worker is not ready, and says why.
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to start the daemon without CAP_NET_ADMIN")
    pod = Pod(short_tmp, runsc_flags="--ignore-cgroups",
              wrap=("setpriv", "--bounding-set=-net_admin", "--"))
    try:
        pod.wait_health("NOT_SERVING")
        code, body = pod.readyz()
        assert code == 503 and "actors' networks cannot be made here" in body, body
    finally:
        pod.stop()
