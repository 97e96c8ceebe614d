"""The worker image as Agent Substrate's WorkerPool controller deploys it, for real.

The image (`podman build -f Dockerfile .`, no build arguments; built once per session
with test_worker_image.py, `podman_env.shared_build`) runs with exactly the pod template
of `deploy/substrate-worker-deployment.yaml` (`pod_to_podman`): the controller's args,
POD_UID from metadata.uid (the one thing the kubelet adds: `$(POD_UID)` expanded), its
capabilities (no SYS_RESOURCE, KILL, DAC_READ_SEARCH or FSETID), unconfined seccomp and
AppArmor, no ATEOM_* variable of its own. The hostPath base dir is a temp dir of this
host bind-mounted at /var/lib/ateom-gvisor (HostToContainer), as the node agent shares
it; the downward-API capacity files say 4 cores and 8 GiB; the projected certificates are
self-signed P-256 PEMs. Then, as the kubelet and the node agent would: the readiness probe
(HTTP GET /readyz on the Pod's address, port `readyz`), a busybox actor (`_pause` + `app`)
laid out under <base>/actors and run, checkpointed, restored (its counter goes on from
memory) and terminated over <base>/ateoms/<pod uid>/ateom.sock from the host side,
GetStatus's `worker`, the router's HTTPS on :443 of the Pod's address with a client
certificate the Pod's signer issued (the data plane serving with the projected bundles),
and SIGTERM: exit 0, the socket removed.

Needs root, podman, mmdebstrap, runc and network access to Debian's archive and PyPI
(the build); skips, saying why, where podman cannot run at all.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from tests.ops.pod_to_podman import Translation, pod_of, translate
from tests.ops.podman_env import (
    REPO,
    TAG,
    Podman,
    caps_of,
    missing_tools,
    shared_build,
    shared_podman,
)
from tests.support import build_busybox_bundle
from tests.support.substrate import (
    BASE_DIR,
    CAPABILITIES,
    IDENTITY_DIR,
    ROUTER_IDENTITY,
    controller_args,
)

pytestmark = [pytest.mark.root, pytest.mark.runtime]
if os.geteuid() != 0:
    pytest.skip("the Substrate Deployment test needs root (podman, runsc)",
                allow_module_level=True)
if missing_tools():
    pytest.skip(f"the Substrate Deployment test needs {', '.join(missing_tools())} "
                "(scripts/bootstrap.sh installs them)", allow_module_level=True)

DEPLOYMENT = REPO / "deploy" / "substrate-worker-deployment.yaml"
POD_UID = "7d1c0e9a-3f2b-4a5c-8e6d-5a4b3c2d1e0f"  # the API server's, metadata.uid
LIMITS = {"cpu": "4", "memory": "8Gi"}  # the worker container's limits (downward API)
COUNTER = "i=0; while true; do i=$((i+1)); echo tick=$i; sleep 0.1; done"
ACTOR = "deployment-actor"
# Where the node agent keeps the snapshot (it uploads checkpoint_dir there and downloads it
# into restore_dir; ateom reads and writes only the local dirs).
SNAPSHOT_URI = f"gs://bucket/root/atespaces/demo/actors/{ACTOR}/snapshots/1"


class Worker:
    """The Deployment's container, and the node agent's view of it from the host."""

    def __init__(self, podman: Podman, plan: Translation, name: str, base: Path) -> None:
        self.podman, self.plan, self.name, self.base = podman, plan, name, base
        self.socket = base / "ateoms" / POD_UID / "ateom.sock"  # the host side of the hostPath
        self.channel = grpc.insecure_channel(f"unix:{self.socket}")
        self.stub = pb_grpc.AteomStub(self.channel)
        self.inspect = pb_grpc.InspectStub(self.channel)

    def state(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.podman("inspect", self.name).stdout)[0]
        return found

    def logs(self) -> str:
        done = self.podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(ln) for ln in self.logs().splitlines() if ln.startswith("{")]

    def exec(self, *argv: str) -> str:
        return self.podman("exec", self.name, *argv, check=False).stdout

    def wait_serving(self, timeout: float = 90) -> None:
        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.state()["State"]["Running"], f"the worker exited:\n{self.logs()}"
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=2).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.5)
        pytest.fail(f"the worker never served on {self.socket}:\n{self.logs()}")

    def probe(self, kind: str) -> tuple[int, str]:
        """The kubelet's httpGet probe `kind`, to the Pod's own address."""
        get = self.plan.probes[kind]
        address = self.state()["NetworkSettings"]["IPAddress"]
        assert address, "the container has no address of its own to probe"
        conn = http.client.HTTPConnection(address, get.port, timeout=5)
        try:
            conn.request("GET", get.path)
            answer = conn.getresponse()
            return answer.status, answer.read().decode()
        finally:
            conn.close()

    def actor_dirs(self, uid: str) -> pb.ActorDirs:
        """The actor's dirs as the worker sees them: under the hostPath's mount path."""
        root = f"{BASE_DIR}/actors/{uid}"
        return pb.ActorDirs(root_dir=root, oci_bundle_dir=f"{root}/bundles",
                            checkpoint_dir=f"{root}/checkpoint", restore_dir=f"{root}/restore")

    def ticks(self, uid: str, container: str = "app") -> list[int]:
        """The counter lines of `container`'s log (in the worker's own /run/ateom)."""
        text = self.exec("cat", f"/run/ateom/logs/{uid}/{container}.log")
        return [int(ln[5:]) for ln in text.splitlines() if ln.startswith("tick=")
                and ln[5:].isdigit()]

    def hosted(self) -> list[str]:
        actors = self.inspect.ListActors(pb.ListActorsRequest(), timeout=30).actors
        return [a.actor_uid for a in actors]


@pytest.fixture(scope="module")
def worker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Worker]:
    podman = shared_podman(request.config, tmp_path_factory)
    shared_build(podman, tmp_path_factory)
    # Short: <base>/ateoms/<pod uid>/ateom.sock must fit a unix socket's 107 bytes.
    base = Path(tempfile.mkdtemp(prefix="ateom-base-", dir="/tmp"))
    pod = pod_of(yaml.safe_load(DEPLOYMENT.read_text()), POD_UID)
    plan = translate(pod, "ateom", tmp_path_factory.mktemp("node"),
                     host_paths={BASE_DIR: base}, limits=LIMITS)
    print("not applied by a single podman container:", ", ".join(plan.not_applied))
    w = Worker(podman, plan, pod["metadata"]["name"], base)
    try:
        podman("run", "--detach", "--name", w.name, *podman.limits(), *plan.flags, TAG,
               *plan.args)
        w.wait_serving()
        yield w
    finally:
        w.channel.close()
        podman("rm", "--force", "--time", "0", w.name, check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_the_container_runs_exactly_the_deployments_shape(worker: Worker) -> None:
    # Nothing added but the expanded POD_UID: the args are the controller's, no env but it.
    assert worker.plan.args == controller_args(POD_UID)
    assert [f for f in worker.plan.flags if f.startswith("--env")] == [f"--env=POD_UID={POD_UID}"]
    cmdline = worker.exec("cat", "/proc/1/cmdline").split("\0")
    assert cmdline[1:3] == ["/opt/ateom/bin/ateom", "serve"] and cmdline[3:-1] == worker.plan.args
    # The controller's capabilities, less those this machine cannot give any container.
    bounding = caps_of(Path("/proc/self/status").read_text(), "CapBnd")
    assert caps_of(worker.exec("cat", "/proc/1/status"), "CapEff") == set(CAPABILITIES) & bounding
    # The runsc flags the worker runs with are the image's default, not the test's.
    image_env = worker.podman("image", "inspect", "--format", "{{json .Config.Env}}", TAG).stdout
    environ = worker.exec("cat", "/proc/1/environ").split("\0")
    flags = [e for e in environ if e.startswith("ATEOM_RUNSC_GLOBAL_FLAGS=")]
    assert len(flags) == 1 and flags[0] in json.loads(image_env), (flags, image_env)


def test_the_readiness_probe_answers_200_ok_on_the_pods_address(worker: Worker) -> None:
    wait_for(lambda: worker.probe("readinessProbe")[0] == 200, "readyz 200", timeout=30)
    assert worker.probe("readinessProbe") == (200, "ok\n")


def test_get_status_shows_the_pod_its_capacity_and_every_flag_served(
        worker: Worker) -> None:
    status = worker.inspect.GetStatus(pb.GetStatusRequest(), timeout=30)
    w = status.worker
    assert (w.pod_uid, w.base_dir, w.socket, w.actors_root) == (
        POD_UID, BASE_DIR, f"{BASE_DIR}/ateoms/{POD_UID}/ateom.sock", f"{BASE_DIR}/actors")
    # From the downward-API files: 4 cores in millicores, 8 GiB in bytes.
    assert (w.cpu_milli, w.memory_bytes, list(w.capacity_problems)) == (4000, 8 << 30, [])
    assert len([a for a in worker.plan.args if a.startswith("--atunnel-")]) == 7
    assert list(w.accepted_not_served) == []
    assert list(status.not_ready) == []


def test_the_router_reaches_the_data_plane_on_443_with_the_pods_certificates(
        worker: Worker, tmp_path: Path) -> None:
    """mTLS as Substrate's router makes it: a client certificate with the router's SPIFFE
    id, issued by the signer whose trust bundle the controller projects; the Pod's own
    certificate (the signer's stand-in) verified against that bundle."""
    # The stand-in signer's self-signed certificate is the Pod's own, so the projected
    # credential bundle holds the signer's key and certificate: it issues the router's.
    bundle = worker.plan.host_path(f"{IDENTITY_DIR}/credential-bundle.pem")
    key, cert = tmp_path / "router.key", tmp_path / "router.pem"
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=router",
                    "-keyout", str(key), "-out", str(tmp_path / "router.csr")],
                   check=True, capture_output=True)
    (tmp_path / "ext").write_text(f"subjectAltName=URI:{ROUTER_IDENTITY}\n"
                                  "extendedKeyUsage=clientAuth\n")
    subprocess.run(["openssl", "x509", "-req", "-in", str(tmp_path / "router.csr"),
                    "-CA", str(bundle), "-CAkey", str(bundle),
                    "-CAcreateserial", "-days", "1", "-extfile", str(tmp_path / "ext"),
                    "-out", str(cert)], check=True, capture_output=True)
    ctx = ssl.create_default_context(
        cafile=str(worker.plan.host_path(f"{IDENTITY_DIR}/trust-bundle.pem")))
    ctx.check_hostname = False  # the router checks the worker's SPIFFE id, not a name
    ctx.load_cert_chain(str(cert), str(key))
    address = worker.state()["NetworkSettings"]["IPAddress"]
    conn = http.client.HTTPSConnection(address, 443, context=ctx, timeout=10)
    try:
        conn.request("GET", "/gpu", headers={"Host": "gpu-1.gpu-demo.actors.resources."
                                                     "substrate.ate.dev"})
        answer = conn.getresponse()
        body = answer.read().decode()
    finally:
        conn.close()
    assert answer.status == 404, body
    assert "no actor 'gpu-1' in atespace 'gpu-demo' here" in body


def test_the_node_agent_runs_checkpoints_restores_and_terminates_an_actor(
        worker: Worker) -> None:
    bundles = worker.base / "actors" / ACTOR / "bundles"
    build_busybox_bundle(bundles / "_pause", ["sleep", "100000"])
    build_busybox_bundle(bundles / "app", ["sh", "-c", COUNTER])
    spec = pb.WorkloadSpec(containers=[pb.Container(name="app")])
    who: dict[str, Any] = {"actor_uid": ACTOR, "atespace": "demo", "actor_name": "one",
                           "spec": spec, "actor_dirs": worker.actor_dirs(ACTOR)}
    worker.stub.RunWorkload(pb.RunWorkloadRequest(**who), timeout=180)
    assert worker.hosted() == [ACTOR]
    wait_for(lambda: len(worker.ticks(ACTOR)) >= 5, "the actor's ticks")
    saved = worker.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
        **who, snapshot_uri=SNAPSHOT_URI), timeout=300)
    at_checkpoint = max(worker.ticks(ACTOR))
    checkpoint = worker.base / "actors" / ACTOR / "checkpoint"
    assert saved.snapshot_files and all((checkpoint / f).is_file() for f in saved.snapshot_files)
    wait_for(lambda: not worker.hosted(), "the checkpointed actor's release")
    # The node agent puts the snapshot (from SNAPSHOT_URI) in restore_dir, then restores.
    shutil.copytree(checkpoint, worker.base / "actors" / ACTOR / "restore")
    worker.stub.RestoreWorkload(pb.RestoreWorkloadRequest(**who, snapshot_uri=SNAPSHOT_URI),
                                timeout=300)
    assert worker.hosted() == [ACTOR]
    # The restored app counts on from its memory, not from 1.
    wait_for(lambda: max(worker.ticks(ACTOR)) >= at_checkpoint + 3, "ticks after the restore")
    ticks = worker.ticks(ACTOR)
    after = ticks[ticks.index(at_checkpoint) + 1:]
    assert after[:3] == [at_checkpoint + 1, at_checkpoint + 2, at_checkpoint + 3], ticks
    worker.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=ACTOR), timeout=120)
    assert worker.hosted() == []
    left = worker.exec("sh", "-c", f"test -e /run/ateom/actors/{ACTOR} && echo left")
    assert left == "", "runsc state left behind"


def test_sigterm_exits_0_and_removes_the_socket(worker: Worker) -> None:
    assert worker.socket.is_socket()
    started = time.monotonic()
    worker.podman("stop", "--time", str(worker.plan.grace), worker.name,
                  timeout=worker.plan.grace + 30)
    assert time.monotonic() - started < worker.plan.grace
    state = worker.state()["State"]
    assert state["ExitCode"] == 0 and not state["OOMKilled"], worker.logs()[-3000:]
    assert [e["event"] for e in worker.events()][-1] == "stopped"
    assert not worker.socket.exists()


def wait_for(ready: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)
