"""The service's runsc calls, argv and failure paths, against a fake runsc.

The fake only records argv and fails on demand; what real runsc does is the
e2e suite's job.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from ateom.daemon.actors.table import Op, Phase
from ateom.daemon.calls.requests import (
    ActorRef,
    CheckpointRequest,
    ContainerRequest,
    DeviceChoice,
    DevicePolicy,
    RestoreRequest,
    RunRequest,
    TerminateRequest,
)
from ateom.daemon.lifecycle.service import AteomService
from ateom.daemon.rpc.inspection import Inspector
from ateom.errors import AteomError, ErrorCode, InjectionError
from ateom.process.reaper import Reaper
from tests.support.world import NO_DEVICES, needs_busybox

pytestmark = needs_busybox


def test_run_argv_without_gpu(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    req = w.run("a1", "app")
    w.service.run_workload(req)
    assert w.fake.commands() == ["create a1_pause", "start a1_pause", "create app", "start app"]
    root = str(w.state_dir("a1"))
    logs = Path(w.config.log_root) / "a1"
    create = w.fake.calls()[0]
    assert create == [
        "-log-format", "json", "--alsologtostderr", "-root", root,
        "-log", str(logs / "_pause.runsc.log"), "--network=none",
        "create", "-bundle", str(w.own_config_path("a1", "_pause").parent),
        "-pid-file", f"{root}/a1_pause.pid", "a1_pause",
    ]
    assert w.fake.calls()[1][-2:] == ["start", "a1_pause"]
    assert not any(a.startswith("--nvproxy") for argv in w.fake.calls() for a in argv)
    assert w.service.actors.get("a1").phase is Phase.RUNNING  # type: ignore[union-attr]


def test_run_argv_with_gpu(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"global_flags": ["nvproxy", "nvproxy-driver-version"]},
                   nvproxy_driver_version="550.54.15")
    w.service.run_workload(w.run("g1", "app", devices=DeviceChoice()))
    by_command = dict(zip(w.fake.commands(), w.fake.calls(), strict=True))
    pause_create = by_command["create g1_pause"]
    assert "--nvproxy" in pause_create
    assert "--nvproxy-driver-version=550.54.15" in pause_create
    assert not any("capabilities" in a for a in pause_create)  # not set: not passed
    # Every call of a GPU sandbox carries them (global flags: before the subcommand).
    for command, call in by_command.items():
        name = command.split()[0]
        assert "--nvproxy" in call and call.index("--nvproxy") < call.index(name), command
        assert "--nvproxy-driver-version=550.54.15" in call, command
    actor = w.service.actors.get("g1")
    assert actor is not None and actor.devices == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")


def test_injection_uses_the_configured_driver_root_and_toolkit_dir(  # type: ignore[no-untyped-def]
        make_world, tmp_path: Path) -> None:
    toolkit = tmp_path / "configured-toolkit"
    toolkit.mkdir()
    (toolkit / "nvidia-cdi-hook.real").write_text("")
    # The process env names other dirs: the flags (config) must win over it.
    w = make_world(fake_kw={"global_flags": ["nvproxy"]}, driver_root="/drv-flag",
                   toolkit_dir=str(toolkit),
                   env={"PATH": os.defpath, "ATEOM_NVIDIA_DRIVER_ROOT": "/drv-env",
                        "ATEOM_NVIDIA_TOOLKIT_DIR": "/tk-env"})
    req = w.run("g3", "app", devices=DeviceChoice())
    w.service.run_workload(req)
    config = w.app_config("g3")
    env = dict(e.split("=", 1) for e in config["process"]["env"])
    assert env["LD_LIBRARY_PATH"].split(":")[0] == "/drv-flag/lib64"
    hooks = config["hooks"]["createContainer"]
    assert hooks and {h["path"] for h in hooks} == {str(toolkit / "nvidia-cdi-hook.real")}


def test_gpu_actor_refused_without_nvproxy_before_anything(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"version": "0.0~old"})
    req = w.run("g2", "app", devices=DeviceChoice())
    before = (Path(req.dirs.oci_bundle_dir) / "app" / "config.json").read_bytes()
    with pytest.raises(AteomError) as err:
        w.service.run_workload(req)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "0.0~old" in str(err.value) and "nvproxy" in str(err.value)
    assert w.fake.commands() == []
    assert (Path(req.dirs.oci_bundle_dir) / "app" / "config.json").read_bytes() == before
    assert w.service.actors.get("g2") is None


def test_failure_rolls_back_in_reverse_and_quotes_runsc_log(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.fake.fail("start app")
    req = w.run("f1", "app")
    bundle = Path(req.dirs.oci_bundle_dir)
    originals = {n: (bundle / n / "config.json").read_bytes() for n in ("_pause", "app")}
    with pytest.raises(AteomError) as err:
        w.service.run_workload(req)
    message = str(err.value)
    assert err.value.code is ErrorCode.INTERNAL
    assert "runsc start app failed" in message and "boom marker" in message
    tail = message.split("its log ends:\n", 1)[1]
    assert len(tail.encode()) <= 2048
    assert w.fake.commands() == [
        "create f1_pause", "start f1_pause", "create app", "start app",
        "list", "kill app KILL", "kill f1_pause KILL", "delete f1_pause", "delete app",
    ]
    for name, data in originals.items():
        assert (bundle / name / "config.json").read_bytes() == data
    assert w.service.actors.get("f1") is None
    assert not w.state_dir("f1").exists()


class _GatedInjector:
    """The real injector, whose apply waits for a gate (set by the fake runsc's
    record of the sandbox root's create) and can fail on demand."""

    def __init__(self, real: Any, gate: Callable[[], bool], *, fail: bool = False) -> None:
        self.real, self.gate, self.fail = real, gate, fail
        self.applied_while_root_booted = False

    def plan(self, bundle_dir: str, resolution: Any, config: Any) -> Any:
        return self.real.plan(bundle_dir, resolution, config)

    def stage(self, plan: Any) -> None:
        deadline = time.monotonic() + 30
        while not self.gate() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.applied_while_root_booted = self.gate()
        if self.fail:
            raise InjectionError(f"{plan.bundle_dir}/config.json: disk full (test)")
        self.real.stage(plan)


def _gated(w: Any, uid: str, *, fail: bool = False) -> _GatedInjector:
    injector = _GatedInjector(w.service.injector,
                              lambda: f"create {uid}_pause" in w.fake.commands(), fail=fail)
    w.service = AteomService(w.config, reaper=Reaper(), injector=injector)
    return injector


def test_app_bundles_are_injected_while_the_sandbox_root_boots(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"global_flags": ["nvproxy"]})
    injector = _gated(w, "o1")
    req = w.run("o1", "app", devices=DeviceChoice())
    w.service.run_workload(req)
    # The app's injection could only finish once the root's create had run:
    # they overlapped, and the app was still created after its bundle was written.
    assert injector.applied_while_root_booted
    assert w.fake.commands() == ["create o1_pause", "start o1_pause", "create app", "start app"]
    config = w.app_config("o1")
    assert config["annotations"]["io.kubernetes.cri.sandbox-id"] == "o1_pause"
    assert "LD_LIBRARY_PATH" in " ".join(config["process"]["env"])


def test_failed_root_boot_waits_for_the_app_writes_then_restores_them(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"global_flags": ["nvproxy"]})
    _gated(w, "o2")
    w.fake.fail("create o2_pause")
    req = w.run("o2", "app", "side", devices=DeviceChoice())
    bundle = Path(req.dirs.oci_bundle_dir)
    originals = {n: (bundle / n / "config.json").read_bytes() for n in ("_pause", "app", "side")}
    with pytest.raises(AteomError, match="runsc create o2_pause failed"):
        w.service.run_workload(req)
    # The app bundles were written after the root failed; the rollback waited
    # for them, so every bundle has the node agent's config again.
    for name, data in originals.items():
        assert (bundle / name / "config.json").read_bytes() == data, name
    assert "create app" not in w.fake.commands()
    assert w.service.actors.get("o2") is None and not w.state_dir("o2").exists()


def test_failed_app_injection_tears_down_the_booted_root(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"global_flags": ["nvproxy"]})
    _gated(w, "o3", fail=True)
    req = w.run("o3", "app", devices=DeviceChoice())
    bundle = Path(req.dirs.oci_bundle_dir)
    originals = {n: (bundle / n / "config.json").read_bytes() for n in ("_pause", "app")}
    with pytest.raises(InjectionError, match="disk full"):
        w.service.run_workload(req)
    commands = w.fake.commands()
    assert commands[:2] == ["create o3_pause", "start o3_pause"]
    assert "create app" not in commands and "delete o3_pause" in commands
    for name, data in originals.items():
        assert (bundle / name / "config.json").read_bytes() == data, name
    assert w.service.actors.get("o3") is None and not w.state_dir("o3").exists()


def test_terminate_term_then_kill_apps_first_the_root_deleted_first(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"term_stops": False})
    w.service.run_workload(w.run("t1", "app", "side"))
    start = len(w.fake.commands())
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("t1")))
    after = [c for c in w.fake.commands()[start:] if not c.startswith("state ")]
    assert after == [
        "list",
        "kill side TERM", "kill app TERM", "kill t1_pause TERM",
        "kill side KILL", "kill app KILL", "kill t1_pause KILL",
        # The root first: its delete destroys the sandbox; a sub-container's delete
        # after it may fail on real runsc (exit 128), which is tolerated.
        "delete t1_pause", "delete app", "delete side",
    ]
    assert w.service.actors.get("t1") is None
    assert not w.state_dir("t1").exists()
    # Idempotent: a gone actor terminates fine, touching nothing.
    n = len(w.fake.commands())
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("t1")))
    assert len(w.fake.commands()) == n


def test_terminate_skips_containers_runsc_no_longer_lists(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("t2", "app"))
    (w.state_dir("t2") / "app.state").unlink()  # gone behind our back
    start = len(w.fake.commands())
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("t2")))
    assert not any(" app" in c for c in w.fake.commands()[start:])
    assert "delete t2_pause" in w.fake.commands()[start:]


def test_checkpoint_answers_relative_files_and_frees_worker(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("c1", "app"))
    result = w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("c1"),
                                                             dirs=w.dirs("c1")))
    assert result.snapshot_files == ("checkpoint.img", "sub/pages.img")
    ckpt = [c for c in w.fake.calls() if "checkpoint" in c][0]
    assert ckpt[-4:] == ["checkpoint", "-image-path", w.dirs("c1").checkpoint_dir, "c1_pause"]
    assert "-allow-connected-on-save" not in ckpt  # Debian's runsc lacks it
    assert w.service.actors.settle(10)  # the worker freed once the sandbox is reaped
    assert w.service.actors.get("c1") is None
    assert "delete c1_pause" in w.fake.commands()


def test_the_room_check_asks_runsc_only_when_the_disk_could_be_too_small(  # type: ignore[no-untyped-def]
        make_world) -> None:
    # A disk with room for the most any sandbox here could hold needs no runsc at the
    # save; one without is checked against the actor's memory, as runsc reports it.
    from ateom.daemon.sandbox import save

    w = make_world(max_actors=2)
    for uid in ("roomy", "tight"):
        w.service.run_workload(w.run(uid, "app"))
    free = save.free_bytes(w.dirs("roomy").checkpoint_dir)[0]
    for uid, bound, asked in (("roomy", 64 << 20, False), ("tight", free * 2, True)):
        w.service.checkpoints.memory_bound = bound
        start = len(w.fake.commands())
        w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef(uid), dirs=w.dirs(uid)))
        stats = [c for c in w.fake.commands()[start:] if c.startswith("events")]
        assert (stats == ["events app"]) is asked, (uid, stats)
    assert w.service.actors.settle(10)


def test_checkpoint_answers_only_the_files_runsc_wrote(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("c0"))
    ckpt = Path(w.dirs("c0").checkpoint_dir)
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "older-snapshot.img").write_text("from an earlier call")
    (ckpt / "checkpoint.img").write_text("stale")  # rewritten by runsc: listed
    result = w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("c0"),
                                                             dirs=w.dirs("c0")))
    assert result.snapshot_files == ("checkpoint.img", "sub/pages.img")


def test_checkpoint_dir_that_is_a_file_is_a_refusal_and_the_actor_keeps_running(  # type: ignore[no-untyped-def]
        make_world) -> None:
    w = make_world()
    w.service.run_workload(w.run("cf"))
    dirs = dataclasses.replace(w.dirs("cf"), checkpoint_dir=str(w.actors_root / "cf" / "file"))
    Path(dirs.checkpoint_dir).write_text("not a dir")
    with pytest.raises(AteomError, match="actor_dirs.checkpoint_dir") as err:
        w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("cf"), dirs=dirs))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    actor = w.service.actors.get("cf")
    assert actor is not None and actor.phase is Phase.RUNNING
    assert "checkpoint cf_pause" not in w.fake.commands()


def test_checkpoint_passes_allow_connected_on_save_when_supported(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"global_flags": ["allow-connected-on-save"]})
    w.service.run_workload(w.run("c2"))
    w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("c2"), dirs=w.dirs("c2")))
    ckpt = [c for c in w.fake.calls() if "checkpoint" in c][0]
    assert ckpt.index("-allow-connected-on-save") < ckpt.index("checkpoint")


def test_failed_checkpoint_of_running_actor_keeps_it(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("c3", "app"))
    w.fake.fail("checkpoint c3_pause")
    with pytest.raises(AteomError) as err:
        w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("c3"),
                                                        dirs=w.dirs("c3")))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "boom marker" in str(err.value) and "keeps running" in str(err.value)
    actor = w.service.actors.get("c3")
    assert actor is not None and actor.phase is Phase.RUNNING
    assert not any(c.startswith("delete") for c in w.fake.commands())


@pytest.mark.parametrize("newer", [False, True])
def test_restore_argv_follows_the_probed_runsc(make_world, newer: bool) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"restore_flags": ["background"] if newer else []})
    w.bundles("r1")
    dirs = w.dirs("r1")
    os.makedirs(dirs.restore_dir)
    Path(dirs.restore_dir, "checkpoint.img").write_text("img")
    w.service.restore_workload(RestoreRequest(actor=ActorRef("r1"), dirs=dirs,
                                              preserve_restore_dir=True))
    assert w.fake.commands() == ["restore r1_pause"]  # restore creates the container itself
    argv = w.fake.calls()[0]
    sub = argv[argv.index("restore"):]
    expected = ["restore", "-bundle", str(w.own_config_path("r1", "_pause").parent),
                "-image-path", dirs.restore_dir,
                "-pid-file", f"{w.state_dir('r1')}/r1_pause.pid"]
    expected += ["-background"] if newer else []
    assert sub == [*expected, "-detach", "r1_pause"]
    assert Path(dirs.restore_dir).is_dir()
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("r1")))


def test_restore_of_a_gpu_actor_re_injects_and_passes_nvproxy_on_every_call(  # type: ignore[no-untyped-def]
        make_world) -> None:
    w = make_world(fake_kw={"global_flags": ["nvproxy"], "restore_flags": ["direct"]})
    bundles = w.bundles("rg", "app")
    original = (bundles / "app" / "config.json").read_bytes()
    dirs = w.dirs("rg")
    os.makedirs(dirs.restore_dir)
    Path(dirs.restore_dir, "checkpoint.img").write_text("img")
    w.service.restore_workload(RestoreRequest(
        actor=ActorRef("rg"), dirs=dirs, preserve_restore_dir=True,
        containers=(ContainerRequest("app", devices=DeviceChoice()),)))
    by_command = dict(zip(w.fake.commands(), w.fake.calls(), strict=True))
    assert list(by_command) == ["restore rg_pause", "restore app"]
    assert "--nvproxy" in by_command["restore rg_pause"]
    assert "--nvproxy" in by_command["restore app"]
    injected = w.app_config("rg")
    assert "/dev/nvidia0" in {d["path"] for d in injected["linux"]["devices"]}
    assert (bundles / "app" / "config.json").read_bytes() == original  # never written
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("rg")))
    assert (bundles / "app" / "config.json").read_bytes() == original
    assert not w.own_config_path("rg").exists()


def test_restore_consumes_restore_dir_unless_preserved(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.bundles("r2")
    dirs = w.dirs("r2")
    os.makedirs(dirs.restore_dir)
    Path(dirs.restore_dir, "checkpoint.img").write_text("img")
    w.service.restore_workload(RestoreRequest(actor=ActorRef("r2"), dirs=dirs))
    assert not Path(dirs.restore_dir).exists()  # set aside before the answer
    deadline = time.monotonic() + 10  # and removed after it
    while list(Path(dirs.root_dir).glob(".restore.ateom-discarded-*")):
        assert time.monotonic() < deadline, "the set-aside image was not removed"
        time.sleep(0.02)


def test_a_multi_container_restore_on_a_runsc_that_cannot_is_refused_up_front(  # type: ignore[no-untyped-def]
        make_world) -> None:
    w = make_world()  # no restore -direct: a runsc before multi-container restore
    w.bundles("r4", "app")
    dirs = w.dirs("r4")
    os.makedirs(dirs.restore_dir)
    Path(dirs.restore_dir, "checkpoint.img").write_text("img")
    with pytest.raises(AteomError) as err:
        w.service.restore_workload(RestoreRequest(
            actor=ActorRef("r4"), dirs=dirs,
            containers=(ContainerRequest("app", devices=NO_DEVICES),)))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "multi-container restore" in str(err.value)
    assert w.fake.commands() == []  # not a single runsc call
    assert w.service.actors.get("r4") is None and Path(dirs.restore_dir).is_dir()


def test_failed_subcontainer_restore_is_cleaned_up(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"restore_flags": ["direct"]})
    w.bundles("r3", "app")
    dirs = w.dirs("r3")
    os.makedirs(dirs.restore_dir)
    Path(dirs.restore_dir, "checkpoint.img").write_text("img")
    w.fake.fail("restore app")
    with pytest.raises(AteomError) as err:
        w.service.restore_workload(RestoreRequest(
            actor=ActorRef("r3"), dirs=dirs,
            containers=(ContainerRequest("app", devices=NO_DEVICES),)))
    assert err.value.code is ErrorCode.INTERNAL and "boom marker" in str(err.value)
    assert "delete r3_pause" in w.fake.commands()
    assert w.service.actors.get("r3") is None
    assert Path(dirs.restore_dir).is_dir()


def test_admission_codes(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("m1"))
    with pytest.raises(AteomError) as again:
        w.service.run_workload(w.run("m1"))
    assert again.value.code is ErrorCode.FAILED_PRECONDITION
    with pytest.raises(AteomError) as full:
        w.service.run_workload(w.run("m2"))
    assert full.value.code is ErrorCode.RESOURCE_EXHAUSTED
    w.service.state = "draining"
    with pytest.raises(AteomError) as draining:
        w.service.run_workload(w.run("m3"))
    assert draining.value.code is ErrorCode.UNAVAILABLE
    # While draining the node agent may still save its actors.
    result = w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("m1"),
                                                             dirs=w.dirs("m1")))
    assert result.snapshot_files
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("m1")))
    calls = len(w.fake.commands())
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("m1")))  # idempotent
    assert len(w.fake.commands()) == calls  # nothing left to do, nothing run
    with pytest.raises(AteomError) as gone:
        w.service.checkpoint_workload(CheckpointRequest(actor=ActorRef("m1"), dirs=w.dirs("m1")))
    assert gone.value.code is ErrorCode.NOT_FOUND


def test_runsc_path_must_be_configured_or_under_runsc_dir(make_world, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    w = make_world(runsc_dir=str(tmp_path / "bin"))
    req = w.run("p1")
    with pytest.raises(AteomError) as err:
        w.service.run_workload(RunRequest(actor=req.actor, dirs=req.dirs, runsc_path="/bin/sh"))
    assert err.value.code is ErrorCode.PERMISSION_DENIED
    # The path is judged as given: a link elsewhere leading into --runsc-dir
    # is still a path outside it. (What the operator put in --runsc-dir,
    # links included, is the operator's choice.)
    (tmp_path / "elsewhere").symlink_to(w.fake.path)
    escaping = str(tmp_path / "elsewhere")
    for call in (
        lambda: w.service.run_workload(RunRequest(actor=req.actor, dirs=req.dirs,
                                                  runsc_path=escaping)),
        lambda: w.service.checkpoint_workload(CheckpointRequest(
            actor=req.actor, dirs=req.dirs, runsc_path=escaping)),
        lambda: w.service.terminate_workload(TerminateRequest(actor=req.actor,
                                                              runsc_path=escaping)),
    ):
        with pytest.raises(AteomError) as err:
            call()
        assert err.value.code is ErrorCode.PERMISSION_DENIED and escaping in str(err.value)
    assert w.fake.commands() == []
    w.service.run_workload(RunRequest(actor=req.actor, dirs=req.dirs,
                                      runsc_path=str(w.fake.path)))


def test_runsc_path_may_name_the_bare_configured_runsc_as_found_on_path(  # type: ignore[no-untyped-def]
        make_world, monkeypatch: pytest.MonkeyPatch) -> None:
    w = make_world(runsc="runsc")
    monkeypatch.setenv("PATH", f"{w.fake.path.parent}:{os.environ['PATH']}")
    w.bundles("bare")
    w.service.run_workload(RunRequest(actor=ActorRef("bare"), dirs=w.dirs("bare"),
                                      runsc_path=str(w.fake.path)))
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("bare"),
                                                  runsc_path=str(w.fake.path)))
    assert w.fake.commands()[-1] == "delete bare_pause"


def test_stats_codes_and_mapping(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(max_actors=2)
    assert w.service.active_workload_stats() == []  # idle never errors
    with pytest.raises(AteomError) as missing:
        w.service.workload_stats("nobody")
    assert missing.value.code is ErrorCode.NOT_FOUND
    booting = w.service.actors.admit(ActorRef("boot"), Op.RUN)
    with pytest.raises(AteomError) as early:
        w.service.workload_stats("boot")
    assert early.value.code is ErrorCode.FAILED_PRECONDITION
    w.service.actors.remove(booting)
    booting.lock.release()
    w.service.run_workload(w.run("s1"))
    sample = w.service.workload_stats("s1")
    assert sample.cpu_usage_usec == 5000
    assert sample.memory_current_bytes == 1048576
    assert sample.memory_peak_bytes == 2097152
    assert sample.memory_working_set_bytes == 1048576 - 4096
    # The discovery read answers the sampler's latest (here the verified read's), never
    # asking runsc itself; an actor booting is listed, not measured.
    [active] = w.service.active_workload_stats()
    assert (active.actor.actor_uid, active.measured, active.cpu_usage_usec) == ("s1", True, 5000)
    booting = w.service.actors.admit(ActorRef("boot"), Op.RUN)
    got = {s.actor.actor_uid: s.measured for s in w.service.active_workload_stats()}
    assert got == {"s1": True, "boot": False}
    w.service.actors.remove(booting)
    booting.lock.release()


def test_foreign_hooks_refused_before_side_effects(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    req = w.run("h1", "app")
    cfg_path = Path(req.dirs.oci_bundle_dir) / "app" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["hooks"] = {"createRuntime": [{"path": "/bin/true"}]}
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(AteomError) as err:
        w.service.run_workload(req)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "hooks.createRuntime[0] (/bin/true)" in str(err.value)
    assert w.fake.commands() == []


def test_drain_terminates_hosted_actors(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    w.service.run_workload(w.run("d1", "app"))
    w.service.drain(0.1)
    assert w.service.state == "draining"
    assert w.service.actors.get("d1") is None
    assert "delete d1_pause" in w.fake.commands()


def test_a_run_that_would_overfill_the_workers_capacity_is_refused_before_anything(  # type: ignore[no-untyped-def]
        make_world, tmp_path: Path) -> None:
    capacity = tmp_path / "capacity"
    capacity.mkdir()
    (capacity / "cpu_milli").write_text("1000")
    (capacity / "memory_bytes").write_text(str(1 << 30))
    w = make_world(max_actors=3, capacity_dir=str(capacity))
    w.service.run_workload(dataclasses.replace(w.run("k1", "app"), cpu_milli=600))
    start = len(w.fake.commands())
    with pytest.raises(AteomError) as err:
        w.service.run_workload(dataclasses.replace(w.run("k2", "app"), cpu_milli=600))
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert "asks 600m of CPU, and this worker has 400m of its 1000m left" in err.value.message
    assert w.fake.commands()[start:] == [] and w.service.actors.get("k2") is None
    worker = Inspector.for_service(w.service).status().worker
    assert worker is not None and (worker.in_use.cpu_milli, worker.in_use.memory_bytes) == (
        600, 0)
    w.service.run_workload(dataclasses.replace(w.run("k3", "app"), cpu_milli=400,
                                               memory_bytes=1 << 30))  # all that is left


def test_the_drain_terminates_its_actors_at_once_not_one_after_another(  # type: ignore[no-untyped-def]
        make_world) -> None:
    uids = ("m1", "m2", "m3")
    w = make_world(max_actors=3)
    for uid in uids:
        w.service.run_workload(w.run(uid, "app"))
    # Each sandbox's delete goes on only once all three have begun: one actor after
    # another, the first would wait in vain past runsc's 3 s control timeout.
    w.fake.meet(*(f"delete {u}_pause" for u in uids), within=5)
    with capture_logs() as logs:
        w.service.drain(0.1)
    # (One after another: the first delete times out, `runsc_timed_out` and others.)
    assert not [e for e in logs if e.get("log_level") in ("warning", "error")], logs
    assert all(w.service.actors.get(u) is None for u in uids)
    assert sorted(c for c in w.fake.commands() if c.endswith("_pause") and
                  c.startswith("delete")) == [f"delete {u}_pause" for u in uids]


def test_a_container_bundle_linked_outside_the_root_is_refused(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world()
    req = w.run("ln", "app")
    outside = w.tmp / "outside-app"
    (w.actors_root / "ln" / "bundles" / "app").rename(outside)
    (w.actors_root / "ln" / "bundles" / "app").symlink_to(outside)
    before = (outside / "config.json").read_bytes()
    with pytest.raises(AteomError, match="app") as err:
        w.service.run_workload(req)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT and str(outside) in str(err.value)
    assert (outside / "config.json").read_bytes() == before
    assert w.fake.commands() == [] and w.service.actors.get("ln") is None


def test_an_app_named_like_a_configured_pause_container_is_refused(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(pause_container="pause")
    w.bundles("pn")
    req = RunRequest(actor=ActorRef("pn"), dirs=w.dirs("pn"),
                     containers=(ContainerRequest("pause", devices=NO_DEVICES),))
    with pytest.raises(AteomError, match="pause-container") as err:
        w.service.run_workload(req)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT and w.fake.commands() == []


def test_terminate_after_a_daemon_crash_clears_its_own_bundle_dirs(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"global_flags": ["nvproxy"]})
    bundles = w.bundles("cr", "app")
    originals = {n: (bundles / n / "config.json").read_bytes() for n in ("_pause", "app")}
    w.service.run_workload(RunRequest(actor=ActorRef("cr"), dirs=w.dirs("cr"), containers=(
        ContainerRequest("app", devices=DeviceChoice(DevicePolicy.EXPLICIT,
                                                     ("nvidia.com/gpu=0",))),)))
    assert (bundles / "app" / "config.json").read_bytes() == originals["app"]  # never written
    assert w.own_config_path("cr").read_bytes() != originals["app"]  # ateom's copy
    # The daemon dies (its memory with it); a new one is asked to terminate.
    after_crash = AteomService(w.config, reaper=Reaper())
    after_crash.terminate_workload(TerminateRequest(actor=ActorRef("cr")))
    for name, original in originals.items():
        assert (bundles / name / "config.json").read_bytes() == original, name
    assert not w.state_dir("cr").exists()
    # ...so the node agent can run the actor again from the same bundles.
    after_crash.run_workload(RunRequest(actor=ActorRef("cr"), dirs=w.dirs("cr"), containers=(
        ContainerRequest("app", devices=DeviceChoice()),)))
    after_crash.terminate_workload(TerminateRequest(actor=ActorRef("cr")))
    for name, original in originals.items():
        assert (bundles / name / "config.json").read_bytes() == original, name
    assert not (Path(w.config.run_dir) / "bundles" / "cr").exists()  # nothing kept any more


def test_a_run_not_yet_admitted_when_the_drain_ends_hosts_nothing(make_world) -> None:  # type: ignore[no-untyped-def]
    """A Run still validating when the drain's grace is over must not host an actor
    the drain no longer sees: the daemon would exit and leave its sandbox running."""
    import threading

    w = make_world()
    in_validation, go_on = threading.Event(), threading.Event()
    probe = w.service.probe

    def gated_probe(path: str):  # type: ignore[no-untyped-def]
        in_validation.set()
        assert go_on.wait(10)
        return probe(path)

    w.service.probe = gated_probe  # type: ignore[method-assign]
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            w.service.run_workload(w.run("late", "app"))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    assert in_validation.wait(10)
    w.service.drain(0)  # grace over while the Run is still validating
    go_on.set()
    runner.join(10)
    assert isinstance(outcome[0], AteomError) and outcome[0].code is ErrorCode.UNAVAILABLE
    assert w.service.actors.get("late") is None
    assert not [c for c in w.fake.commands() if c.startswith("create")]


def test_calls_for_one_actor_are_serialized(make_world) -> None:  # type: ignore[no-untyped-def]
    import threading
    import time

    w = make_world()
    w.fake.slow("start app")
    req = w.run("s2", "app")
    runner = threading.Thread(target=w.service.run_workload, args=(req,))
    runner.start()
    deadline = time.monotonic() + 10
    while "create app" not in w.fake.commands() and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(AteomError) as booting:
        w.service.workload_stats("s2")
    assert booting.value.code is ErrorCode.FAILED_PRECONDITION
    w.service.terminate_workload(TerminateRequest(actor=ActorRef("s2")))  # waits for the Run
    runner.join(10)
    commands = w.fake.commands()
    assert commands.index("start app") < commands.index("list")
    assert commands[-2:] == ["delete s2_pause", "delete app"]
    assert w.service.actors.get("s2") is None


def test_plan_injection_reads_only_and_names_its_fields(make_world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(fake_kw={"global_flags": ["nvproxy"]})  # GPU devices: a runsc with nvproxy
    bundle = w.bundles("pl", "app") / "app"
    before = (bundle / "config.json").read_bytes()
    inspector = Inspector.for_service(w.service)
    names, diff = inspector.plan_injection(str(bundle), ["nvidia.com/gpu=1"])
    assert names == ("nvidia.com/gpu=1",) and "/dev/nvidia1" in diff
    default, _ = inspector.plan_injection(str(bundle), [])
    assert default == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")
    assert (bundle / "config.json").read_bytes() == before
    assert not list(bundle.rglob("*.ateom-tmp")) and not (bundle / "rootfs/usr/local").exists()
    (w.actors_root / "up").symlink_to(w.tmp)
    for path, names_, expected, field in [
        ("/etc", [], ErrorCode.INVALID_ARGUMENT, "bundle_dir"),
        ("", [], ErrorCode.INVALID_ARGUMENT, "bundle_dir"),
        (str(w.actors_root), [], ErrorCode.INVALID_ARGUMENT, "bundle_dir"),
        (str(w.actors_root / "up" / "actors"), [], ErrorCode.INVALID_ARGUMENT, "bundle_dir"),
        (str(bundle), ["gpu0"], ErrorCode.INVALID_ARGUMENT, r"devices\[0\]"),
        (str(bundle), ["nvidia.com/gpu=0:1"], ErrorCode.FAILED_PRECONDITION, "MIG"),
        (str(bundle), ["amd.com/gpu=0"], ErrorCode.FAILED_PRECONDITION, "amd.com"),
    ]:
        with pytest.raises(AteomError, match=field) as err:
            inspector.plan_injection(path, names_)
        assert err.value.code is expected, (path, names_)
