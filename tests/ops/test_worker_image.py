"""The worker image, built and run for real: `podman build -f Dockerfile .` with no
build arguments, then the example Pod's container started with exactly its security
context, capabilities, env, args and volumes (`pod_to_podman`), one busybox actor
through Run -> Checkpoint -> Restore -> Terminate, `ateom doctor`, a clean stop. The
worker runs twice: from the default image (Debian's runsc), then, where the machine has
gVisor's newest release (`tests.support.newest_runsc`), from the same Dockerfile built
with it at deploy/runsc (skipped, saying so, elsewhere).

What it cannot show here: a GPU (no GPU on these machines, and the image's default
runsc, Debian's, has no `checkpoint --cuda-checkpoint-path`; GPU turns on the newest
runsc are `tests/daemon/test_e2e_real_runsc.py`), and the kubelet's cgroup limits,
probes and ports (`Translation.not_applied`, printed). The base image is made locally
(`podman_env`): no registry is reachable. Needs root, podman, mmdebstrap, runc and
network access to Debian's archive and PyPI, as the set-up does; about three minutes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops.pod_to_podman import Translation, translate
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
from tests.support import grpcurl as operator
from tests.support.newest_runsc import newest_runsc

pytestmark = [pytest.mark.root, pytest.mark.runtime]
if os.geteuid() != 0:
    pytest.skip("the worker image test needs root (podman, runsc)", allow_module_level=True)
if missing_tools():
    pytest.skip(f"the worker image test needs {', '.join(missing_tools())} "
                "(scripts/bootstrap.sh installs them)", allow_module_level=True)

NEWEST_TAG = "localhost/ateom-worker:image-test-newest-runsc"
# What the Dockerfile's build context holds (.dockerignore): copied for a build whose
# deploy/runsc is a gVisor release, so the repository's own tree is never written.
CONTEXT = ("pyproject.toml", "README.md", "constraints.txt", "ateom", "deploy/image")
POD = REPO / "deploy" / "gpu-worker-pod.yaml"
COUNTER = "i=0; while true; do i=$((i+1)); echo tick=$i; sleep 0.1; done"
@pytest.fixture(scope="module")
def podman(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Podman:
    """The session's podman storage (`podman_env.shared_podman`), shared with
    test_substrate_deployment.py so the image is built once."""
    return shared_podman(request.config, tmp_path_factory)


@pytest.fixture(scope="module")
def build(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The build log of `podman build -f Dockerfile .`, no build arguments."""
    return shared_build(podman, tmp_path_factory)


@pytest.fixture(scope="module")
def newest_image(build: str, podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same Dockerfile, unchanged, with gVisor's newest release at deploy/runsc of
    the build context (how a GPU fleet on a current driver builds it)."""
    newest, why = newest_runsc()
    if newest is None:
        pytest.skip(f"the worker image with the newest runsc: {why}")
    context = tmp_path_factory.mktemp("context")
    for name in CONTEXT:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, context / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, context / name)
    shutil.copy(newest.path, context / "deploy" / "runsc")
    done = podman("build", *podman.limits(), "-f", str(REPO / "Dockerfile"), "-t", NEWEST_TAG,
                  str(context), timeout=1800)
    version = subprocess.run([newest.path, "--version"], capture_output=True, text=True,
                             timeout=60, check=True).stdout.splitlines()[0]
    log = done.stdout + done.stderr
    assert "runsc for the image: source: build-context file deploy/runsc" in log
    assert f"runsc for the image: version: {version}" in log
    return NEWEST_TAG


def in_image(podman: Podman, script: str) -> subprocess.CompletedProcess[str]:
    return podman("run", "--rm", *podman.limits(), "--entrypoint", "/bin/sh", TAG, "-c", script,
                  check=False)


def test_the_default_build_says_which_runsc_it_got(build: str, podman: Podman) -> None:
    printed = [ln.partition("runsc for the image: ")[2] for ln in build.splitlines()
               if "runsc for the image: " in ln]
    recorded = in_image(podman, "cat /usr/local/share/ateom/runsc.source").stdout.splitlines()
    assert printed == recorded and len(recorded) == 4
    expected = ("build-context file deploy/runsc" if (REPO / "deploy" / "runsc").exists()
                else "Debian package runsc ")
    assert recorded[0].startswith("source: " + expected)
    version = in_image(podman, "runsc --version | head -n 1").stdout.strip()
    assert recorded[2] == "version: " + version
    sha = in_image(podman, "sha512sum /usr/local/bin/runsc").stdout.split()[0]
    assert recorded[1] == "sha512: " + sha
    # Debian 13's runsc: nvproxy, for the drivers it lists (the build says which).
    assert re.match(r"nvproxy: drivers \d+\.\d+\.\d+ \.\.\. \d+\.\d+\.\d+ \(\d+ listed\)$",
                    recorded[3]), recorded[3]


def test_the_final_image_has_no_pip_and_no_compilers(build: str, podman: Podman) -> None:
    pip = "\\( -name pip -o -name 'pip[0-9]*' -o -name setuptools -o -name 'setuptools-*' \\)"
    compilers = ("\\( -type f -o -type l \\) -perm /111 \\( -name gcc -o -name 'gcc-[0-9]*' "
                 "-o -name cc -o -name 'c++' -o -name 'x86_64-linux-gnu-gcc*' \\)")
    found = in_image(podman, f"find / -xdev {pip} -print -o {compilers} -print")
    assert found.returncode == 0 and found.stdout == "", found.stdout
    assert in_image(podman, "python3 -m pip --version").returncode != 0
    assert in_image(podman, "ateom --version").returncode == 0


# ---------------------------------------------------------------- the Pod's container

class Worker:
    def __init__(self, podman: Podman, pod: dict[str, Any], plan: Translation) -> None:
        self.podman, self.pod, self.plan = podman, pod, plan
        self.name = pod["metadata"]["name"]
        self.socket = plan.host_path(plan.env["ATEOM_SOCKET"])
        self.actors_in = plan.env["ATEOM_ACTORS_ROOT"]        # the path the worker sees
        self.actors = plan.host_path(self.actors_in)           # the same dir on this host
        self.run_dir = plan.host_path(plan.env.get("ATEOM_RUN_DIR", "/run/ateom"))

    def call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        return operator.call(self.socket, method, body)

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.podman("exec", self.name, *argv, check=False)

    def dirs(self, uid: str) -> dict[str, str]:
        root = f"{self.actors_in}/{uid}"
        return {"root_dir": root, "oci_bundle_dir": f"{root}/bundles",
                "checkpoint_dir": f"{root}/checkpoint", "restore_dir": f"{root}/restore"}

    def ticks(self, uid: str) -> list[int]:
        log = self.run_dir / "logs" / uid / "_pause.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return [int(x) for x in re.findall(r"^tick=(\d+)$", text, re.M)]


@pytest.fixture(scope="module", params=["debian-runsc", "newest-runsc"])
def worker(request: pytest.FixtureRequest, build: str, podman: Podman,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """The manifest's container of the default image, then of the newest-runsc one."""
    image = TAG if request.param == "debian-runsc" else request.getfixturevalue("newest_image")
    pod = yaml.safe_load(POD.read_text())
    plan = translate(pod, "ateom", tmp_path_factory.mktemp("node"))
    print("not applied by a single podman container:", ", ".join(plan.not_applied))
    w = Worker(podman, pod, plan)
    podman("run", "--detach", "--name", w.name, *podman.limits(), *plan.flags, image,
           *plan.args)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "SERVING" in operator.grpcurl(w.socket, "grpc.health.v1.Health/Check", {}).stdout:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the worker never served:\n" + podman("logs", w.name, check=False).stderr)
    yield w
    podman("rm", "--force", "--time", "0", w.name, check=False)
    shutil.rmtree(plan.host_path("/run/ateom"), ignore_errors=True)


def test_ateom_serve_is_pid_1_with_the_manifests_capabilities(worker: Worker) -> None:
    cmdline = worker.exec("cat", "/proc/1/cmdline").stdout.split("\0")
    assert cmdline[1:3] == ["/opt/ateom/bin/ateom", "serve"]
    assert cmdline[3:-1] == worker.plan.args
    status = worker.exec("cat", "/proc/1/status").stdout
    # A capability this machine's own bounding set lacks cannot be given to any container
    # here (SYS_RESOURCE on these VMs): expected is the manifest's, less those.
    bounding = caps_of(Path("/proc/self/status").read_text(), "CapBnd")
    expected = set(worker.plan.caps) & bounding
    print("capabilities the manifest adds that this machine cannot give:",
          sorted(set(worker.plan.caps) - bounding) or "none")
    assert caps_of(status, "CapEff") == expected
    assert worker.exec("cat", "/proc/1/environ").stdout.split("\0").count(
        "ATEOM_SOCKET=" + worker.plan.env["ATEOM_SOCKET"]) == 1


def test_a_busybox_actor_runs_is_checkpointed_restored_and_terminated(worker: Worker) -> None:
    uid = "image-actor"
    build_busybox_bundle(worker.actors / uid / "bundles" / "_pause", ["sh", "-c", COUNTER])
    body = {"actor_uid": uid, "actor_dirs": worker.dirs(uid)}
    worker.call("ateom.Ateom/RunWorkload", body)
    wait_for(lambda: len(worker.ticks(uid)) >= 5, "the actor's ticks")
    saved = worker.call("ateom.Ateom/CheckpointWorkload", body)
    at_checkpoint = max(worker.ticks(uid))
    checkpoint = worker.actors / uid / "checkpoint"
    files = saved.get("snapshot_files")
    assert files and all((checkpoint / f).is_file() for f in files), saved
    wait_for(lambda: not worker.call("ateom.Inspect/ListActors", {}).get("actors"),
             "the checkpointed actor's release")
    shutil.copytree(checkpoint, worker.actors / uid / "restore")
    worker.call("ateom.Ateom/RestoreWorkload", body)
    # The restored process counts on from its memory, not from 1.
    wait_for(lambda: max(worker.ticks(uid)) >= at_checkpoint + 3, "ticks after the restore")
    after = worker.ticks(uid)[worker.ticks(uid).index(at_checkpoint) + 1:]
    assert after[:3] == [at_checkpoint + 1, at_checkpoint + 2, at_checkpoint + 3]
    worker.call("ateom.Ateom/TerminateWorkload", {"actor_uid": uid})
    assert not worker.call("ateom.Inspect/ListActors", {}).get("actors")
    assert not (worker.run_dir / "actors" / uid).exists(), "runsc state left behind"


def test_ateom_doctor_runs_in_the_worker(worker: Worker) -> None:
    done = worker.exec("ateom", "doctor", "--json")
    assert done.returncode in (0, 1), done.stderr  # 1: a check failed; anything else: a crash
    checks = {c["name"]: c["status"] for c in json.loads(done.stdout)["checks"]}
    assert checks["runsc"] == checks["user-namespaces"] == checks["runsc-nvproxy"] == \
        "DOCTOR_STATUS_PASS"
    assert checks["runsc-cgroups"] == checks["runsc-network"] == "DOCTOR_STATUS_PASS"
    # No GPU on this machine: the doctor says so instead of passing.
    assert checks["gpu-nodes"] == "DOCTOR_STATUS_FAIL"
    # The container runtime gave the worker cgroupfs read-only: without the manifest's
    # --ignore-cgroups every Run would fail, and the doctor says so.
    done = worker.podman("exec", "--env", "ATEOM_RUNSC_GLOBAL_FLAGS=--network=none",
                         worker.name, "ateom", "doctor", "--json", check=False)
    [cgroups] = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "runsc-cgroups"]
    assert cgroups["status"] == "DOCTOR_STATUS_FAIL" and "read-only" in cgroups["summary"], cgroups


def test_the_worker_drains_on_sigterm_terminating_what_it_hosts(worker: Worker) -> None:
    # An actor still hosted at SIGTERM: in-flight calls get --shutdown-grace, then ateom
    # terminates the actor itself, and exits 0 within the Pod's termination grace.
    uid = "hosted-at-stop"
    build_busybox_bundle(worker.actors / uid / "bundles" / "_pause", ["sh", "-c", COUNTER])
    worker.call("ateom.Ateom/RunWorkload", {"actor_uid": uid, "actor_dirs": worker.dirs(uid)})
    wait_for(lambda: len(worker.ticks(uid)) >= 2, "the hosted actor's ticks")
    grace = worker.pod["spec"]["terminationGracePeriodSeconds"]
    started = time.monotonic()
    worker.podman("stop", "--time", str(grace), worker.name, timeout=grace + 30)
    assert time.monotonic() - started < grace
    state = json.loads(worker.podman("inspect", worker.name).stdout)[0]["State"]
    assert state["ExitCode"] == 0 and not state["OOMKilled"]
    logs = worker.podman("logs", worker.name)
    events = [json.loads(ln) for ln in (logs.stdout + logs.stderr).splitlines()
              if ln.startswith("{")]
    names = [e["event"] for e in events]
    assert names[-1] == "stopped" and "drained" in names
    assert [e["hosted"] for e in events if e["event"] == "draining"] == [1]
    # The grace over, ateom terminated the actor itself, before stopping.
    terminated = [i for i, e in enumerate(events)
                  if e["event"] == "actor_terminated" and e.get("actor_uid") == uid]
    assert terminated and names.index("draining") < terminated[0] < len(names) - 1, names
    assert not (worker.run_dir / "actors" / uid).exists(), "runsc state left behind"


def wait_for(ready: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
