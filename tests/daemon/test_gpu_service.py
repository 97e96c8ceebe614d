"""GPU actors in the lifecycle: placement per actor, GPU checkpoint refusals and
flags, the compatibility record, restore checked against it (fake runsc argv).

A simulated 4-GPU node (`tests.support.gpu_node`: /proc/driver/nvidia, the
Pod's device nodes, a stand-in nvidia-smi) and a CDI spec for its 4 GPUs;
what real runsc does with the flags is the e2e suites' job.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from ateom.daemon.actors.table import Phase
from ateom.daemon.calls.refusals import REFUSAL_OBSERVERS
from ateom.daemon.calls.requests import (
    ActorDirs,
    ActorRef,
    CheckpointRequest,
    ContainerRequest,
    DeviceChoice,
    DevicePolicy,
    GpuWish,
    RestoreRequest,
    RunRequest,
    TerminateRequest,
)
from ateom.daemon.gpus.checkpoint_policy import TOOL_IN_CONTAINER
from ateom.daemon.lifecycle.service import AteomService
from ateom.daemon.rpc.inspection import Inspector
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.record import RECORD_FILE, parse_record
from ateom.process.reaper import Reaper
from tests.daemon.fake_runsc import FakeRunsc
from tests.support import build_busybox_bundle, build_fake_driver_libs, write_sim_gpu_spec
from tests.support.configs import daemon_config
from tests.support.gpu_node import SimGpu, write_gpu_node, write_sim_fixture

pytestmark = pytest.mark.skipif(not os.path.exists("/bin/busybox"), reason="needs busybox")

GPU_CHECKPOINT = ["cuda-checkpoint-path", "cuda-checkpoint-sequential"]
POD_GPUS = DeviceChoice()  # the container takes its actor's GPUs


def _node(base: Path, driver: str = "580.95.05", gpus: int = 4) -> Path:
    sims = [SimGpu(index=i, minor=i, uuid=f"GPU-0000000{i}-1111-2222-3333-444444444444")
            for i in range(gpus)]
    fixture = write_sim_fixture(base / "fixture", sims, driver_version=driver)
    node = write_gpu_node(base / "node", fixture)
    tool = Path(node.root) / "bin" / "cuda-checkpoint"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    return Path(node.root)


class GpuWorld:
    def __init__(self, tmp: Path, *, placement: str = "exclusive", driver: str = "580.95.05",
                 checkpoint_flags: tuple[str, ...] = tuple(GPU_CHECKPOINT),
                 version: str = "release-20260706.0", tool: bool = True) -> None:
        self.tmp = tmp
        self.node = _node(tmp / "gpu", driver)
        if not tool:
            (self.node / "bin" / "cuda-checkpoint").unlink()
        libs = build_fake_driver_libs(tmp / "lib64")
        write_sim_gpu_spec(tmp / "cdi", libs, gpus=4)
        self.fake = FakeRunsc(tmp / "bin", version=version, global_flags=["nvproxy"],
                              checkpoint_flags=checkpoint_flags,
                              restore_flags=["background", "direct"])
        self.actors_root = tmp / "actors"
        self.config = daemon_config(
            actors_root=str(self.actors_root), runsc=str(self.fake.path),
            run_dir=str(tmp / "run"), spec_dirs=(str(tmp / "cdi"),),
            gpu_glob=str(self.node / "dev" / "nvidia[0-9]*"), driver_root=str(self.node),
            proc_root=str(self.node / "proc"), toolkit_dir=str(tmp / "toolkit"),
            kill_grace=0.1, max_actors=8, gpu_placement=placement,
            env={"PATH": os.defpath})
        self.service = AteomService(self.config, reaper=Reaper())

    def dirs(self, uid: str) -> ActorDirs:
        root = self.actors_root / uid
        return ActorDirs(root_dir=str(root), oci_bundle_dir=str(root / "bundles"),
                         checkpoint_dir=str(root / "ckpt"), restore_dir=str(root / "restore"))

    def run(self, uid: str, gpus: GpuWish | None = None, *,
            devices: DeviceChoice = POD_GPUS) -> RunRequest:
        bundles = self.actors_root / uid / "bundles"
        for name in ("_pause", "app"):
            build_busybox_bundle(bundles / name, ["sleep", "1000"])
        return RunRequest(actor=ActorRef(uid), dirs=self.dirs(uid), gpus=gpus,
                          containers=(ContainerRequest("app", devices=devices),))

    def app_config(self, uid: str) -> dict[str, object]:
        raw = (self.actors_root / uid / "bundles" / "app" / "config.json").read_text()
        return dict(json.loads(raw))

    def holders(self) -> dict[str, tuple[str, ...]]:
        snapshot = self.service.placement_snapshot()
        assert snapshot is not None
        return {h.gpu.name: h.holders for h in snapshot.gpus}


def _gpu_nodes(config: dict[str, object]) -> list[str]:
    """/dev/nvidiaN in a container's config (not nvidiactl, nvidia-uvm)."""
    devices = config["linux"]["devices"]  # type: ignore[index]
    return sorted(str(d["path"]) for d in devices if str(d["path"])[-1].isdigit())


@pytest.fixture
def refusals() -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []

    def observe(kind: str, reason: str) -> None:
        seen.append((kind, reason))

    REFUSAL_OBSERVERS.append(observe)
    yield seen
    REFUSAL_OBSERVERS.remove(observe)


def test_exclusive_actors_get_distinct_gpus_and_a_full_pod_names_holders(
        tmp_path: Path, refusals: list[tuple[str, str]]) -> None:
    w = GpuWorld(tmp_path)
    for uid in ("a", "b"):
        w.service.run_workload(w.run(uid, GpuWish(count=2)))
    assert w.holders() == {"nvidia.com/gpu=0": ("a",), "nvidia.com/gpu=1": ("a",),
                           "nvidia.com/gpu=2": ("b",), "nvidia.com/gpu=3": ("b",)}
    # Each container sees exactly its actor's GPUs.
    def nodes(uid: str) -> list[str]:
        return _gpu_nodes(w.app_config(uid))

    assert nodes("a") == ["/dev/nvidia0", "/dev/nvidia1"]
    assert nodes("b") == ["/dev/nvidia2", "/dev/nvidia3"]
    with pytest.raises(AteomError) as err:
        w.service.run_workload(w.run("c", GpuWish(count=1)))
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert "held by a" in str(err.value) and "held by b" in str(err.value)
    assert refusals == [("placement", "too_few_free")]
    assert w.service.actors.get("c") is None and not (tmp_path / "run" / "bundles" / "c").exists()
    # Terminate frees at once; the refused actor now fits.
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("a")))
    w.service.run_workload(w.run("c", GpuWish(count=1)))
    assert w.holders()["nvidia.com/gpu=0"] == ("c",)
    status = Inspector.for_service(w.service).status()
    assert status.gpu_placement == "exclusive"
    assert {a.ref.actor_uid: a.gpus for a in status.actors} == {
        "b": ("nvidia.com/gpu=2", "nvidia.com/gpu=3"), "c": ("nvidia.com/gpu=0",)}


def test_concurrent_runs_never_share_a_gpu_in_exclusive_mode(tmp_path: Path) -> None:
    w = GpuWorld(tmp_path)
    requests = [w.run(f"r{i}", GpuWish(count=1)) for i in range(6)]
    outcomes: dict[str, str] = {}

    def run(req: RunRequest) -> None:
        try:
            w.service.run_workload(req)
            outcomes[req.actor.actor_uid] = "ok"
        except AteomError as exc:
            outcomes[req.actor.actor_uid] = exc.code.name

    threads = [threading.Thread(target=run, args=(r,)) for r in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes.values()) == ["OK"] * 0 + ["RESOURCE_EXHAUSTED"] * 2 + ["ok"] * 4
    held = [h for hs in w.holders().values() for h in hs]
    assert sorted(held) == sorted(u for u, o in outcomes.items() if o == "ok")
    assert len(set(held)) == len(held) == 4


def test_a_container_may_not_name_a_gpu_its_actor_was_not_given(tmp_path: Path) -> None:
    w = GpuWorld(tmp_path)
    w.service.run_workload(w.run("a", GpuWish(count=1)))
    explicit = DeviceChoice(DevicePolicy.EXPLICIT, ("nvidia.com/gpu=0",))
    with pytest.raises(AteomError) as err:
        w.service.run_workload(w.run("b", GpuWish(names=("nvidia.com/gpu=1",)),
                                     devices=explicit))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "nvidia.com/gpu=0" in str(err.value) and "not one of this actor's GPUs" in str(
        err.value)
    assert w.holders()["nvidia.com/gpu=1"] == ()  # released with the failed Run


def test_shared_mode_gives_every_actor_every_gpu(tmp_path: Path) -> None:
    w = GpuWorld(tmp_path, placement="shared:2")
    w.service.run_workload(w.run("a"))
    w.service.run_workload(w.run("b"))
    assert set(w.holders().values()) == {("a", "b")}
    with pytest.raises(AteomError) as err:
        w.service.run_workload(w.run("c"))
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED


def test_gpu_checkpoint_mounts_the_tool_passes_the_flag_and_writes_the_record(
        tmp_path: Path) -> None:
    w = GpuWorld(tmp_path)
    w.service.run_workload(w.run("g", GpuWish(count=2)))
    [mount] = [m for m in w.app_config("g")["mounts"]  # type: ignore[attr-defined]
               if m["destination"] == TOOL_IN_CONTAINER]
    assert mount["source"] == str(w.node / "bin" / "cuda-checkpoint")
    assert "ro" in mount["options"]
    result = w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("g"),
                                                             dirs=w.dirs("g")))
    assert RECORD_FILE in result.snapshot_files
    [argv] = [a for a in w.fake.calls() if "checkpoint" in a]
    assert f"--cuda-checkpoint-path={TOOL_IN_CONTAINER}" in argv
    assert argv.index("checkpoint") < argv.index(f"--cuda-checkpoint-path={TOOL_IN_CONTAINER}")
    record = parse_record((tmp_path / "actors/g/ckpt" / RECORD_FILE).read_bytes()).record
    assert record.driver_version == "580.95.05" and record.runsc.version == "release-20260706.0"
    assert [g.index for g in record.gpus] == [0, 1]
    assert [(c.name, c.cdi_devices) for c in record.containers] == [
        ("app", ("nvidia.com/gpu=0", "nvidia.com/gpu=1"))]
    assert w.holders()["nvidia.com/gpu=0"] == ()  # released with the checkpoint


@pytest.mark.parametrize(("kw", "reason", "says"), [
    ({"checkpoint_flags": ()}, "runsc_cannot_save_gpu", "--cuda-checkpoint-path"),
    ({"tool": False}, "no_cuda_checkpoint", "cuda-checkpoint was not found"),
    ({"driver": "535.104.05"}, "driver_too_old", "R550"),
])
def test_a_gpu_checkpoint_that_cannot_work_is_refused_before_the_sandbox_is_touched(
        tmp_path: Path, refusals: list[tuple[str, str]], kw: dict[str, object], reason: str,
        says: str) -> None:
    w = GpuWorld(tmp_path, **kw)  # type: ignore[arg-type]
    w.service.run_workload(w.run("g", GpuWish(count=1)))
    before = w.fake.commands()
    with pytest.raises(AteomError) as err:
        w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("g"), dirs=w.dirs("g")))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert says in str(err.value) and "keeps running" in str(err.value)
    assert refusals == [("checkpoint", reason)]
    assert w.fake.commands() == before  # no runsc call at all
    actor = w.service.actors.get("g")
    assert actor is not None and actor.phase is Phase.RUNNING
    assert w.holders()["nvidia.com/gpu=0"] == ("g",)  # it keeps its GPU
    status = Inspector.for_service(w.service).status()
    assert says in status.actors[0].checkpoint_blocker


def test_a_multi_gpu_actor_on_r610_needs_the_sequential_flag(tmp_path: Path) -> None:
    w = GpuWorld(tmp_path, driver="610.10.01", checkpoint_flags=("cuda-checkpoint-path",))
    w.service.run_workload(w.run("g", GpuWish(count=2)))
    process = w.app_config("g")["process"]
    assert process["args"][:2] == [TOOL_IN_CONTAINER, "--launch-job"]  # type: ignore[index]
    with pytest.raises(AteomError, match="cuda-checkpoint-sequential") as err:
        w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("g"), dirs=w.dirs("g")))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION


def test_a_failed_save_that_killed_the_sandbox_terminates_the_actor_with_the_reason(
        tmp_path: Path) -> None:
    w = GpuWorld(tmp_path)
    w.service.run_workload(w.run("g", GpuWish(count=1)))
    w.fake.fail("checkpoint g_pause", "state g_pause")  # failed, and state unknown after
    with pytest.raises(AteomError) as err:
        w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("g"), dirs=w.dirs("g")))
    assert "actor was terminated" in str(err.value) and "boom marker" in str(err.value)
    assert w.service.actors.get("g") is None
    assert w.holders()["nvidia.com/gpu=0"] == ()
    assert not (tmp_path / "actors/g/ckpt" / RECORD_FILE).exists()  # never reported saved


def _checkpointed(w: GpuWorld, uid: str, count: int) -> Path:
    w.service.run_workload(w.run(uid, GpuWish(count=count)))
    w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef(uid), dirs=w.dirs(uid)))
    restore = w.actors_root / uid / "restore"
    os.rename(w.actors_root / uid / "ckpt", restore)
    return restore


def _restore(w: GpuWorld, uid: str) -> None:
    w.service.restore_workload(RestoreRequest(
        actor=ActorRef(uid), dirs=w.dirs(uid), preserve_restore_dir=True,
        containers=(ContainerRequest("app"),)))


def test_restore_lands_on_free_gpus_matching_the_record(tmp_path: Path) -> None:
    w = GpuWorld(tmp_path)  # release-20260706.0: remaps
    _checkpointed(w, "g", 2)  # held gpu=0,1 when saved
    w.service.run_workload(w.run("other", GpuWish(count=1)))  # takes gpu=0 meanwhile
    _restore(w, "g")
    assert w.holders()["nvidia.com/gpu=0"] == ("other",)
    held = sorted(n for n, h in w.holders().items() if h == ("g",))
    assert len(held) == 2 and "nvidia.com/gpu=0" not in held
    assert _gpu_nodes(w.app_config("g")) == sorted(f"/dev/nvidia{n[-1]}" for n in held)


def test_restore_without_remap_needs_the_same_gpus(tmp_path: Path) -> None:
    w = GpuWorld(tmp_path, version="release-20260608.0")
    _checkpointed(w, "g", 1)
    w.service.run_workload(w.run("other", GpuWish(count=1)))  # takes gpu=0, g's
    with pytest.raises(AteomError) as err:
        _restore(w, "g")
    assert err.value.code in (ErrorCode.FAILED_PRECONDITION, ErrorCode.RESOURCE_EXHAUSTED)
    assert w.service.actors.get("g") is None


def test_a_restore_whose_gpus_are_held_waits_its_turn(tmp_path: Path,
                                                     refusals: list[tuple[str, str]]) -> None:
    """The worker fits the checkpoint, but other actors hold the GPUs it needs:
    RESOURCE_EXHAUSTED naming them (waiting helps), not a refusal of the record."""
    w = GpuWorld(tmp_path)
    _checkpointed(w, "g", 2)
    for uid in ("x", "y", "z"):
        w.service.run_workload(w.run(uid, GpuWish(count=1)))
    with pytest.raises(AteomError) as err:
        _restore(w, "g")
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert "held by x" in str(err.value) and "held by z" in str(err.value)
    assert refusals == [("placement", "too_few_free")]
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("y")))
    _restore(w, "g")  # its turn now
    assert len([n for n, h in w.holders().items() if h == ("g",)]) == 2


@pytest.mark.parametrize(("field", "change"), [
    ("driver_version", lambda r: {**r, "driver_version": "575.1.1"}),
    ("runsc", lambda r: {**r, "runsc": {"version": "release-20260817.0", "commit": ""}}),
    ("gpus", lambda r: {**r, "gpus": [{**g, "pci_device_id": "0x2330"} for g in r["gpus"]]}),
])
def test_restore_refuses_a_record_this_worker_does_not_match_before_any_runsc_call(
        tmp_path: Path, refusals: list[tuple[str, str]], field: str, change: object) -> None:
    w = GpuWorld(tmp_path)
    restore = _checkpointed(w, "g", 1)
    path = restore / RECORD_FILE
    path.write_text(json.dumps(change(json.loads(path.read_text()))))  # type: ignore[operator]
    calls = len(w.fake.calls())
    with pytest.raises(AteomError) as err:
        _restore(w, "g")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION and field in str(err.value)
    assert len(w.fake.calls()) == calls
    assert refusals == [("restore", field)]
    assert w.service.actors.get("g") is None and all(h == () for h in w.holders().values())


@pytest.mark.parametrize("content", [b"", b"{", b'{"format_version": "9.0"}'])
def test_a_corrupt_or_newer_record_is_refused_clearly(tmp_path: Path, content: bytes) -> None:
    w = GpuWorld(tmp_path)
    restore = _checkpointed(w, "g", 1)
    (restore / RECORD_FILE).write_bytes(content)
    with pytest.raises(AteomError) as err:
        _restore(w, "g")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION and RECORD_FILE in str(err.value)
    assert w.service.actors.get("g") is None


def test_an_mps_device_is_refused_for_a_gvisor_actor_naming_it(
        tmp_path: Path, refusals: list[tuple[str, str]]) -> None:
    w = GpuWorld(tmp_path)
    # As NVIDIA's DRA driver writes an MPS-shared GPU: the pipe dir env and mount.
    spec = {"cdiVersion": "0.6.0", "kind": "nvidia.com/mps", "devices": [{
        "name": "shared0", "containerEdits": {
            "env": ["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"],
            "mounts": [{"hostPath": "/run/nvidia/mps/pipe", "containerPath": "/tmp/nvidia-mps",
                        "options": ["rw", "rbind"]}],
            "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}]}}]}
    (tmp_path / "cdi" / "mps.json").write_text(json.dumps(spec))
    req = w.run("m", devices=DeviceChoice(DevicePolicy.EXPLICIT, ("nvidia.com/mps=shared0",)))
    with pytest.raises(AteomError) as err:
        w.service.run_workload(req)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "nvidia.com/mps=shared0" in str(err.value) and "MPS" in str(err.value)
    assert not [c for c in w.fake.commands() if c.startswith("create")]
    assert refusals == [("placement", "mps_device")]


def test_many_concurrent_run_checkpoint_restore_cycles_never_share_a_gpu(tmp_path: Path) -> None:
    """An 8-GPU Pod, exclusive: 12 one-GPU actors cycle Run -> Checkpoint -> Restore
    at once; a watcher checks at every step that no GPU has two holders; at the end
    every GPU is free (release is total)."""
    w = GpuWorld(tmp_path)
    sims = [SimGpu(index=i, minor=i, uuid=f"GPU-{i:08d}-1111-2222-3333-444444444444")
            for i in range(8)]
    fixture = write_sim_fixture(tmp_path / "fx8", sims, driver_version="580.95.05")
    node = write_gpu_node(tmp_path / "node8", fixture)
    libs = build_fake_driver_libs(tmp_path / "lib8")
    write_sim_gpu_spec(tmp_path / "cdi8", libs, gpus=8)
    w.config = daemon_config(
        actors_root=w.config.actors_root, runsc=w.config.runsc, run_dir=w.config.run_dir,
        spec_dirs=(str(tmp_path / "cdi8"),), gpu_glob=node.gpu_glob,
        driver_root=w.config.node.driver_root, proc_root=node.proc_root,
        toolkit_dir=w.config.node.toolkit_dir, kill_grace=0.1, max_actors=12,
        gpu_placement="exclusive", env=dict(w.config.env))
    w.service = AteomService(w.config, reaper=Reaper())
    stop = threading.Event()
    violations: list[str] = []

    def watch() -> None:
        while not stop.is_set():
            snapshot = w.service.placement_snapshot()
            for h in snapshot.gpus if snapshot else ():
                if len(h.holders) > 1:
                    violations.append(f"{h.gpu.name} held by {h.holders}")

    outcomes: dict[str, list[str]] = {}

    def cycle(uid: str) -> None:
        done = outcomes.setdefault(uid, [])
        for _ in range(2):
            try:
                w.service.run_workload(w.run(uid, GpuWish(count=1)))
                w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef(uid),
                                                                dirs=w.dirs(uid)))
                shutil.rmtree(w.actors_root / uid / "restore", ignore_errors=True)
                os.rename(w.actors_root / uid / "ckpt", w.actors_root / uid / "restore")
                _restore(w, uid)
                w.service.terminate_workload(TerminateRequest(actor=ActorRef(uid)))
                done.append("ok")
            except AteomError as exc:
                done.append(exc.code.name)
                w.service.terminate_workload(TerminateRequest(actor=ActorRef(uid)))

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=cycle, args=(f"c{i}",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    stop.set()
    watcher.join(10)
    assert not violations, violations[:5]
    results = [r for rs in outcomes.values() for r in rs]
    assert set(results) <= {"ok", "RESOURCE_EXHAUSTED"} and results.count("ok") >= 8  # waits
    snapshot = w.service.placement_snapshot()
    assert snapshot is not None and all(not h.holders for h in snapshot.gpus)
    assert not w.service.actors.snapshot()


def test_list_devices_shows_what_the_daemon_resolves_a_generated_spec_included(
        tmp_path: Path) -> None:
    """No spec describes the Pod's GPUs: the first GPU Run has nvidia-ctk write one;
    ListDevices, GetStatus and PlanInjection then see exactly that spec's devices."""
    w = GpuWorld(tmp_path)
    prepared = tmp_path / "ctk-spec"
    write_sim_gpu_spec(prepared, build_fake_driver_libs(tmp_path / "ctk-libs"), gpus=4)
    toolkit = tmp_path / "toolkit"
    toolkit.mkdir()
    (toolkit / "nvidia-ctk").write_text(
        "#!/bin/sh\nfor a; do case \"$a\" in --output=*) "
        f"cp {prepared / 'nvidia.json'} \"${{a#--output=}}\";; esac; done\n")
    (toolkit / "nvidia-ctk").chmod(0o755)
    empty = tmp_path / "no-specs"
    empty.mkdir()
    config = replace(w.config, node=replace(w.config.node, spec_dirs=(str(empty),),
                                            toolkit_dir=str(toolkit)),
                     gpu=replace(w.config.gpu, placement="shared"))
    w.service = AteomService(config, reaper=Reaper())
    inspector = Inspector.for_service(w.service)
    assert [d.qualified_name for d in inspector.devices().devices()] == []
    w.service.run_workload(w.run("g", GpuWish(count=1)))
    generated = Path(config.run_dir) / "cdi" / "nvidia.json"
    listed = inspector.devices()
    assert str(generated.parent) in listed.spec_dirs
    assert {d.spec_path for d in listed.devices()} == {str(generated)}
    assert "nvidia.com/gpu=3" in {d.qualified_name for d in listed.devices()}
    assert inspector.status().cdi_spec_source == f"generated:{generated}"
    names, _ = inspector.plan_injection(str(w.actors_root / "g" / "bundles" / "app"),
                                        ["nvidia.com/gpu=2"])
    assert names == ("nvidia.com/gpu=2",)
