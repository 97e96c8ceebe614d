"""Pure parts of the daemon: validation, state machine, config, bundle edits, devices, argv."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ateom.cdi.model import ContainerEdits, DeviceNode, EditStep, Resolution
from ateom.daemon import bundles, devices, validation
from ateom.daemon import config as daemon_config
from ateom.daemon import runsc as argv
from ateom.daemon.actors import ActorTable, Op, Phase, next_phase
from ateom.daemon.requests import (
    ActorDirs,
    ActorRef,
    CheckpointRequest,
    ContainerRequest,
    DeviceChoice,
    DevicePolicy,
    RestoreRequest,
    RunRequest,
    SnapshotScope,
    TerminateRequest,
    VolumeMountRequest,
)
from ateom.daemon.runsc_probe import RunscInfo, parse_flags, parse_version, probe_runsc
from ateom.errors import AteomError, ErrorCode

ROOT = "/srv/actors"
DIRS = ActorDirs(root_dir=f"{ROOT}/a", oci_bundle_dir=f"{ROOT}/a/bundles",
                 checkpoint_dir=f"{ROOT}/a/ckpt", restore_dir=f"{ROOT}/a/restore")


def code(fn, *args, **kw) -> ErrorCode:  # type: ignore[no-untyped-def]
    with pytest.raises(AteomError) as err:
        fn(*args, **kw)
    return err.value.code


# -- validation ---------------------------------------------------------------

@pytest.mark.parametrize("uid", ["", "..", "../x", "a/b", "-rf", ".hidden", "a b", "x" * 129,
                                 "a..b", "ü"])
def test_unsafe_actor_uid_is_invalid(uid: str) -> None:
    assert code(validation.check_actor, ActorRef(uid)) is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("uid", ["a", "A1", "0f8c-12_ab.c", "x" * 128])
def test_safe_actor_uid(uid: str) -> None:
    validation.check_actor(ActorRef(uid))


@given(st.text(max_size=40))
@settings(max_examples=200, deadline=None)
def test_accepted_uids_are_single_safe_path_components(uid: str) -> None:
    try:
        validation.check_actor(ActorRef(uid))
    except AteomError:
        return
    assert "/" not in uid and uid not in (".", "..") and not uid.startswith("-")


@pytest.mark.parametrize("name", ["App", "_pause", "a_b", "-a", "a-", "", "a" * 64, "a.b"])
def test_bad_container_names(name: str) -> None:
    c = (ContainerRequest(name),)
    assert code(validation.check_containers, c) is ErrorCode.INVALID_ARGUMENT


def test_an_app_container_may_not_take_the_pause_containers_name() -> None:
    # With --pause-container set to a DNS label, both would share one bundle.
    c = (ContainerRequest("app"), ContainerRequest("pause"))
    with pytest.raises(AteomError, match=r"spec.containers\[1\].name 'pause'") as err:
        validation.check_containers(c, pause="pause")
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    validation.check_containers(c)  # the default "_pause" is no DNS label


def test_duplicate_container_names() -> None:
    c = (ContainerRequest("app"), ContainerRequest("app"))
    with pytest.raises(AteomError, match="duplicate"):
        validation.check_containers(c)


@pytest.mark.parametrize("choice, expected", [
    (DeviceChoice(DevicePolicy.EXPLICIT), ErrorCode.INVALID_ARGUMENT),
    (DeviceChoice(DevicePolicy.EXPLICIT, ("gpu0",)), ErrorCode.INVALID_ARGUMENT),
    (DeviceChoice(DevicePolicy.NONE, ("nvidia.com/gpu=0",)), ErrorCode.INVALID_ARGUMENT),
    (DeviceChoice(DevicePolicy.POD_DEFAULT, ("nvidia.com/gpu=0",)), ErrorCode.INVALID_ARGUMENT),
])
def test_bad_device_choices(choice: DeviceChoice, expected: ErrorCode) -> None:
    c = (ContainerRequest("app", devices=choice),)
    assert code(validation.check_containers, c) is expected


@pytest.mark.parametrize("field", ["durable_dir_volume_mounts", "csi_volume_mounts",
                                   "system_info_volume_mounts", "image_volume_mounts"])
def test_volume_mounts_are_unimplemented_naming_the_field(field: str) -> None:
    c = ContainerRequest("app", **{field: (VolumeMountRequest("v", "/v"),)})
    with pytest.raises(AteomError, match=field) as err:
        validation.check_containers((c,))
    assert err.value.code is ErrorCode.UNIMPLEMENTED


def test_wakeup_probe_is_unimplemented() -> None:
    assert code(validation.check_containers,
                (ContainerRequest("app", wakeup_probe=True),)) is ErrorCode.UNIMPLEMENTED


@pytest.mark.parametrize("field", [f for f, _ in ActorDirs().items()])
@pytest.mark.parametrize("path", ["relative/x", f"{ROOT}/a/../../etc", f"{ROOT}//a", "/etc",
                                  ROOT, f"{ROOT}-other/a", f"{ROOT}/a/.", f"{ROOT}/a/",
                                  f"{ROOT}/", f"{ROOT}/a/..", "//srv/actors/a", " /srv/a"])
def test_every_actor_dir_must_be_absolute_normalized_under_root(field: str, path: str) -> None:
    dirs = ActorDirs(**{field: path})
    with pytest.raises(AteomError, match=f"actor_dirs.{field}") as err:
        validation.check_dirs(dirs, ROOT, ())
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_required_dirs() -> None:
    with pytest.raises(AteomError, match="actor_dirs.oci_bundle_dir: required"):
        validation.check_run(RunRequest(ActorRef("a"), ActorDirs()), ROOT)
    with pytest.raises(AteomError, match="actor_dirs.checkpoint_dir: required"):
        validation.check_checkpoint(CheckpointRequest(ActorRef("a"), ActorDirs()), ROOT)
    with pytest.raises(AteomError, match="actor_dirs.restore_dir: required"):
        validation.check_restore(RestoreRequest(ActorRef("a"), ActorDirs(
            oci_bundle_dir=DIRS.oci_bundle_dir)), ROOT)
    validation.check_terminate(TerminateRequest(ActorRef("a")), ROOT)


def test_symlink_escaping_root_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "actors"
    root.mkdir()
    (root / "a").symlink_to("/etc")
    dirs = ActorDirs(oci_bundle_dir=str(root / "a"))
    validation.check_dirs(dirs, str(root), ())  # the string is fine...
    assert code(validation.check_dirs_on_disk, dirs, str(root)) is ErrorCode.INVALID_ARGUMENT


def test_dir_resolving_to_the_root_itself_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The string check refuses the root itself; a path reaching it through a
    # symlinked parent must be refused too: a restore_dir that is the actors
    # root would be removed whole after a restore.
    root = tmp_path / "actors"
    root.mkdir()
    (root / "a").symlink_to(tmp_path)
    dirs = ActorDirs(restore_dir=str(root / "a" / "actors"))
    validation.check_dirs(dirs, str(root), ())  # the string is fine...
    with pytest.raises(AteomError, match="actor_dirs.restore_dir") as err:
        validation.check_dirs_on_disk(dirs, str(root))
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("requested, allowed", [
    ("", True), ("/usr/bin/runsc", True), ("/opt/runsc/v2/runsc", True),
    ("/bin/sh", False), ("runsc", False), ("/opt/runsc/../../bin/sh", False),
    ("/opt/runsc", False), ("/opt/runsc-evil/runsc", False), ("/usr/bin/../bin/runsc", False),
    ("/opt/runsc/", False), ("/opt/runsc/./runsc", False), ("opt/runsc/runsc", False),
    ("/opt/runsc//runsc", False),
])
def test_runsc_path(requested: str, allowed: bool) -> None:
    if allowed:
        assert validation.check_runsc_path(requested, "/usr/bin/runsc", "/opt/runsc")
    else:
        assert code(validation.check_runsc_path, requested, "/usr/bin/runsc",
                    "/opt/runsc") is ErrorCode.PERMISSION_DENIED


def test_runsc_path_may_name_the_configured_runsc_as_found_on_path() -> None:
    # --runsc runsc (the default) runs /usr/bin/runsc: the node agent naming
    # that binary asks for the one ateom runs anyway.
    assert validation.check_runsc_path("/usr/bin/runsc", "runsc", "",
                                       resolved="/usr/bin/runsc") == "/usr/bin/runsc"
    for other in ("/usr/bin/../bin/runsc", "/usr/local/bin/runsc", "runsc2"):
        assert code(validation.check_runsc_path, other, "runsc", "",
                    resolved="/usr/bin/runsc") is ErrorCode.PERMISSION_DENIED
    assert code(validation.check_runsc_path, "/usr/bin/runsc", "runsc", "",
                resolved="") is ErrorCode.PERMISSION_DENIED  # not found: nothing matches


@pytest.mark.parametrize("request_, field", [
    (RunRequest(ActorRef("a"), DIRS, runtime_asset_paths={"k": "v"}), "runtime_asset_paths"),
    (RunRequest(ActorRef("a"), DIRS, egress_gateway=""), "egress_gateway"),
    (RestoreRequest(ActorRef("a"), DIRS, egress_gateway="gw:1"), "egress_gateway"),
    (RestoreRequest(ActorRef("a"), DIRS, scope=SnapshotScope.DATA), "scope"),
    (CheckpointRequest(ActorRef("a"), DIRS, scope=SnapshotScope.DATA), "scope"),
    (CheckpointRequest(ActorRef("a"), DIRS, snapshot_uri="gs://b/x"), "snapshot_uri"),
])
def test_set_but_unsupported_fields_are_unimplemented(request_: object, field: str) -> None:
    check = {RunRequest: validation.check_run, RestoreRequest: validation.check_restore,
             CheckpointRequest: validation.check_checkpoint}[type(request_)]
    with pytest.raises(AteomError, match=field) as err:
        check(request_, ROOT)  # type: ignore[operator]
    assert err.value.code is ErrorCode.UNIMPLEMENTED


def test_local_snapshot_uri_and_negative_resources() -> None:
    validation.check_checkpoint(CheckpointRequest(
        ActorRef("a"), DIRS, snapshot_uri="file://" + DIRS.checkpoint_dir), ROOT)
    assert code(validation.check_run, RunRequest(ActorRef("a"), DIRS, cpu_milli=-1),
                ROOT) is ErrorCode.INVALID_ARGUMENT
    assert code(validation.check_run, RunRequest(ActorRef("a"), DIRS, memory_bytes=-1),
                ROOT) is ErrorCode.INVALID_ARGUMENT


def test_cpu_milli_whose_quota_overflows_int64_is_invalid() -> None:
    # runsc reads linux.resources.cpu.quota as int64: an overflow there would
    # only surface as runsc's INTERNAL failure after the bundle was written.
    largest = (2**63 - 1) * 1000 // bundles.CPU_PERIOD_USEC
    validation.check_run(RunRequest(ActorRef("a"), DIRS, cpu_milli=largest), ROOT)
    for request_, check in ((RunRequest(ActorRef("a"), DIRS, cpu_milli=largest + 1),
                             validation.check_run),
                            (RestoreRequest(ActorRef("a"), DIRS, cpu_milli=2**63 - 1),
                             validation.check_restore)):
        with pytest.raises(AteomError, match="cpu_milli") as err:
            check(request_, ROOT)  # type: ignore[operator]
        assert err.value.code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("restore_dir", [DIRS.root_dir, DIRS.oci_bundle_dir])
def test_a_consumed_restore_dir_may_not_hold_the_actors_other_dirs(restore_dir: str) -> None:
    # After a restore ateom removes restore_dir (unless preserve_restore_dir):
    # it must not take the bundles of the actor just restored with it.
    dirs = dataclasses.replace(DIRS, restore_dir=restore_dir)
    with pytest.raises(AteomError, match="actor_dirs.restore_dir") as err:
        validation.check_restore(RestoreRequest(ActorRef("a"), dirs), ROOT)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    validation.check_restore(RestoreRequest(ActorRef("a"), dirs, preserve_restore_dir=True),
                             ROOT)  # kept: nothing is removed
    validation.check_restore(RestoreRequest(ActorRef("a"), DIRS), ROOT)


# -- state machine --------------------------------------------------------------

@pytest.mark.parametrize("phase", [None, *Phase])
@pytest.mark.parametrize("op", list(Op))
def test_transitions(phase: Phase | None, op: Op) -> None:
    allowed = {
        (None, Op.RUN): Phase.BOOTING, (None, Op.RESTORE): Phase.RESTORING,
        (Phase.RUNNING, Op.CHECKPOINT): Phase.CHECKPOINTING,
        (Phase.RUNNING, Op.TERMINATE): Phase.TERMINATING,
        (Phase.RUNNING, Op.STATS): Phase.RUNNING,
    }
    if (phase, op) in allowed:
        assert next_phase(phase, op, "a") is allowed[(phase, op)]
    elif phase is None:
        assert code(next_phase, phase, op, "a") is ErrorCode.NOT_FOUND
    else:
        assert code(next_phase, phase, op, "a") is ErrorCode.FAILED_PRECONDITION


def test_table_admission_and_operate() -> None:
    table = ActorTable(max_actors=1)
    a = table.admit(ActorRef("a"), Op.RUN)
    assert code(table.admit, ActorRef("a"), Op.RUN) is ErrorCode.FAILED_PRECONDITION
    assert code(table.admit, ActorRef("b"), Op.RESTORE) is ErrorCode.RESOURCE_EXHAUSTED
    a.phase = Phase.RUNNING
    a.lock.release()
    with pytest.raises(AteomError), table.operate("a", Op.CHECKPOINT) as actor:
        assert actor.phase is Phase.CHECKPOINTING
        raise AteomError("runsc refused", code=ErrorCode.FAILED_PRECONDITION)
    assert a.phase is Phase.RUNNING  # a failed op leaves the actor as it was
    with table.operate("a", Op.TERMINATE) as actor:
        table.remove(actor)
    assert len(table) == 0
    with pytest.raises(AteomError) as err, table.operate("a", Op.CHECKPOINT):
        pass
    assert err.value.code is ErrorCode.NOT_FOUND


# -- config -------------------------------------------------------------------

def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    daemon_config.add_flags(parser)
    return parser.parse_args(argv)


def test_flags_env_twins_and_precedence() -> None:
    env = {"ATEOM_ACTORS_ROOT": "/env/root", "ATEOM_MAX_ACTORS": "3",
           "ATEOM_RUNSC_GLOBAL_FLAGS": "--network=none --ignore-cgroups",
           "ATEOM_CDI_SPEC_DIRS": "/a:/b", "ATEOM_SHUTDOWN_GRACE": "2.5",
           "ATEOM_SOCKET": "/env.sock"}
    cfg = daemon_config.from_args(_parse(["--socket", "/flag.sock"]), env)
    assert cfg.socket == "/flag.sock"  # flag beats env
    assert cfg.actors_root == "/env/root" and cfg.max_actors == 3
    assert cfg.runsc_global_flags == ("--network=none", "--ignore-cgroups")
    assert cfg.spec_dirs == ("/a", "/b") and cfg.shutdown_grace == 2.5
    cfg = daemon_config.from_args(_parse([
        "--actors-root", "/r", "--runsc-global-flag=--network=none",
        "--runsc-global-flag=--ignore-cgroups", "--spec-dir", "/x", "--spec-dir", "/y"]), {})
    assert cfg.runsc_global_flags == ("--network=none", "--ignore-cgroups")
    assert cfg.spec_dirs == ("/x", "/y")
    assert (cfg.socket, cfg.max_actors, cfg.listen) == ("/run/ateom/ateom.sock", 1, "")


def test_every_flag_has_an_env_twin() -> None:
    # Settings other parts of ateom read too keep those parts' names.
    shared = {"--spec-dir": "ATEOM_CDI_SPEC_DIRS", "--driver-root": "ATEOM_NVIDIA_DRIVER_ROOT",
              "--toolkit-dir": "ATEOM_NVIDIA_TOOLKIT_DIR",
              "--runsc-global-flag": "ATEOM_RUNSC_GLOBAL_FLAGS"}
    for flag, env, *_ in daemon_config._FLAGS:
        assert env == shared.get(flag, "ATEOM_" + flag[2:].upper().replace("-", "_"))
    assert set(shared) <= {f for f, *_ in daemon_config._FLAGS}


def test_shared_settings_have_one_name_and_one_default() -> None:
    from ateom.cdi import registry
    from ateom.inject import options

    env = {"ATEOM_ACTORS_ROOT": "/r", "ATEOM_CDI_SPEC_DIRS": "/s1::/s2",
           "ATEOM_NVIDIA_DRIVER_ROOT": "/drv", "ATEOM_NVIDIA_TOOLKIT_DIR": "/tk"}
    cfg = daemon_config.from_args(_parse([]), env)
    assert cfg.spec_dirs == registry.default_spec_dirs(env) == ("/s1", "/s2")
    assert (cfg.driver_root, cfg.toolkit_dir) == ("/drv", "/tk")
    # The daemon's old spellings are gone, not silently read.
    cfg = daemon_config.from_args(_parse([]), {"ATEOM_ACTORS_ROOT": "/r",
                                                "ATEOM_SPEC_DIRS": "/old",
                                                "ATEOM_DRIVER_ROOT": "/old"})
    assert cfg.spec_dirs == registry.DEFAULT_SPEC_DIRS == daemon_config.DEFAULT_SPEC_DIRS
    assert cfg.driver_root == options.DEFAULT_DRIVER_ROOT == daemon_config.DEFAULT_DRIVER_ROOT
    assert cfg.toolkit_dir == options.DEFAULT_TOOLKIT_DIR == daemon_config.DEFAULT_TOOLKIT_DIR
    cfg = daemon_config.from_args(
        _parse(["--driver-root", "/flag-drv", "--toolkit-dir", "/flag-tk"]), env)
    assert (cfg.driver_root, cfg.toolkit_dir) == ("/flag-drv", "/flag-tk")


@pytest.mark.parametrize("argv, env", [
    ([], {}), (["--actors-root", "rel"], {}), (["--actors-root", "/r", "--max-actors", "0"], {}),
    (["--actors-root", "/r"], {"ATEOM_MAX_ACTORS": "many"}),
    (["--actors-root", "/r", "--log-level", "nonsense"], {}),
    (["--actors-root", "/r"], {"ATEOM_LOG_LEVEL": "verbose"}),
    (["--actors-root", "/r", "--runsc-timeout", "0"], {}),
    (["--actors-root", "/r", "--socket", ""], {}),
    (["--actors-root", "/r", "--pause-container", "../x"], {}),
    (["--actors-root", "/r", "--pause-container", ""], {}),
])
def test_bad_config(argv: list[str], env: dict[str, str]) -> None:
    assert code(daemon_config.from_args, _parse(argv), env) is ErrorCode.INVALID_ARGUMENT


# -- bundle edits ---------------------------------------------------------------

def test_prepare_config_sets_cri_annotations_and_strips_gvisor_ones() -> None:
    cfg = {"process": {"args": ["sh"]}, "annotations": {
        "dev.gvisor.internal.nvproxy": "true", "dev.gvisor.flag.debug": "1", "keep": "x",
        bundles.CONTAINER_TYPE: "sandbox"}}
    out = bundles.prepare_config(cfg, "/b/app/config.json", container="app",
                                 sandbox_id="_pause", is_sandbox=False)
    assert out.removed_annotations == ("dev.gvisor.flag.debug", "dev.gvisor.internal.nvproxy")
    assert out.config["annotations"] == {
        "keep": "x", bundles.CONTAINER_TYPE: "container", bundles.SANDBOX_ID: "_pause",
        bundles.CONTAINER_NAME: "app"}
    assert cfg["annotations"]["dev.gvisor.internal.nvproxy"] == "true"  # input untouched


def test_prepare_config_sandbox_resources() -> None:
    out = bundles.prepare_config({"process": {}}, "p", container="_pause", sandbox_id="_pause",
                                 is_sandbox=True, cpu_milli=1500, memory_bytes=1 << 30)
    assert out.config["annotations"][bundles.CONTAINER_TYPE] == "sandbox"
    assert out.config["linux"]["resources"] == {
        "cpu": {"period": 100000, "quota": 150000}, "memory": {"limit": 1 << 30}}


def test_prepare_config_leaves_its_input_as_it_was() -> None:
    import copy

    cfg = {"process": {"args": ["sh"], "env": ["A=1"]}, "mounts": [{"destination": "/x"}],
           "annotations": {"dev.gvisor.x": "1"},
           "linux": {"namespaces": [{"type": "pid"}],
                     "resources": {"cpu": {"shares": 2}, "memory": {"limit": 7}}}}
    before = copy.deepcopy(cfg)
    out = bundles.prepare_config(cfg, "p", container="_pause", sandbox_id="s", is_sandbox=True,
                                 cpu_milli=500, memory_bytes=1 << 20)
    assert cfg == before
    assert out.config["linux"]["resources"] == {
        "cpu": {"shares": 2, "period": 100000, "quota": 50000}, "memory": {"limit": 1 << 20}}
    assert out.config["linux"]["namespaces"] == [{"type": "pid"}]
    assert out.config["mounts"] == cfg["mounts"] and out.config["process"] == cfg["process"]


@pytest.mark.parametrize("cfg", [{"process": {}, "linux": []},
                                 {"process": {}, "linux": {"resources": "x"}}])
def test_prepare_config_refuses_a_linux_section_that_is_not_an_object(
        cfg: dict[str, object]) -> None:
    with pytest.raises(AteomError, match="/b/config.json") as err:
        bundles.prepare_config(cfg, "/b/config.json", container="_pause", sandbox_id="s",
                               is_sandbox=True, cpu_milli=100)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_foreign_hooks_refused() -> None:
    cfg = {"process": {}, "hooks": {"prestart": [{"path": "/bin/evil"}]}}
    with pytest.raises(AteomError, match=r"hooks.prestart\[0\] \(/bin/evil\)") as err:
        bundles.refuse_foreign_hooks(cfg, "p")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    bundles.refuse_foreign_hooks({"process": {}, "hooks": {}}, "p")
    # Hooks the injector added (after the check) are kept for runsc.
    kept = bundles.prepare_config(cfg, "p", container="a", sandbox_id="s", is_sandbox=False)
    assert kept.config["hooks"] == cfg["hooks"]


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b'{"process": 1}', b'{"root": {}}',
                                 b'{"process": {}, "annotations": []}',
                                 b'{"process": {}, "annotations": {"a": 1}}',
                                 b'{"process": {}, "linux": []}', b'{"process": {}, "mounts": {}}'])
def test_corrupt_config(raw: bytes) -> None:
    with pytest.raises(AteomError, match="/b/config.json") as err:
        bundles.parse_config(raw, "/b/config.json")
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


# -- devices --------------------------------------------------------------------

def test_pod_default_devices_are_whole_gpus_in_natural_order() -> None:
    names = ["nvidia.com/gpu=10", "nvidia.com/gpu=2", "nvidia.com/gpu=all",
             "nvidia.com/gpu=0:1", "nvidia.com/gpu=MIG-abc", "vendor.com/x=1"]
    assert devices.pod_default_devices(names) == ("nvidia.com/gpu=2", "nvidia.com/gpu=10")


def test_choose_devices() -> None:
    default = ("nvidia.com/gpu=0",)
    pick = devices.choose_devices
    assert pick(ContainerRequest("a"), gpu_present=True, pod_default=default) == default
    assert pick(ContainerRequest("a"), gpu_present=False, pod_default=default) == ()
    none = ContainerRequest("a", devices=DeviceChoice(DevicePolicy.NONE))
    assert pick(none, gpu_present=True, pod_default=default) == ()
    explicit = ContainerRequest("a", devices=DeviceChoice(
        DevicePolicy.EXPLICIT, ("nvidia.com/gpu=1", "nvidia.com/gpu=1")))
    assert pick(explicit, gpu_present=False, pod_default=default) == ("nvidia.com/gpu=1",)


@pytest.mark.parametrize("name, why", [
    ("amd.com/gpu=0", "vendor"), ("nvidia.com/gpu=0:0", "MIG"), ("nvidia.com/gpu=mig-1", "MIG")])
def test_gvisor_refuses_devices_it_cannot_proxy(name: str, why: str) -> None:
    with pytest.raises(AteomError, match=why) as err:
        devices.check_gvisor_devices("app", [name])
    assert err.value.code is ErrorCode.FAILED_PRECONDITION


def test_mig_reached_through_caps_nodes_is_refused() -> None:
    step = EditStep("nvidia.com/gpu=0", "/etc/cdi/n.json", ContainerEdits(
        device_nodes=(DeviceNode("/dev/nvidia-caps/nvidia-cap21"),)))
    with pytest.raises(AteomError, match="MIG"):
        devices.check_resolution_for_gvisor("app", Resolution(("nvidia.com/gpu=0",), (step,)))


def test_nvproxy_needed() -> None:
    old = RunscInfo("/usr/bin/runsc", "0.0~20221219.0", frozenset({"root"}))
    with pytest.raises(AteomError, match="0.0~20221219.0") as err:
        devices.check_nvproxy(old)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    devices.check_nvproxy(RunscInfo("/x", "new", frozenset({"nvproxy"})))


# -- runsc probe + argv -----------------------------------------------------------

FLAGS_TEXT = """  -alsologtostderr
    \tsend log messages to stderr.
  -nvproxy
    \tEXPERIMENTAL: enable support for Nvidia GPUs.
  -nvproxy-driver-version string
    \tNVIDIA driver ABI version to use.
  -allow-connected-on-save
    \tallow checkpointing with connected sockets.
"""


def test_probe_parsing() -> None:
    assert parse_flags(FLAGS_TEXT) == {"alsologtostderr", "nvproxy", "nvproxy-driver-version",
                                       "allow-connected-on-save"}
    assert parse_version("runsc version release-20240513.0\nspec: 1.1.0") == "release-20240513.0"
    info = RunscInfo("/r", "v", parse_flags(FLAGS_TEXT),
                     (("restore", frozenset({"background", "detach"})),))
    assert info.supports_nvproxy and info.supports("--nvproxy")
    assert info.supports("restore:background") and not info.supports("create:background")
    assert not info.restore_needs_create


def test_probe_judges_the_binary_on_its_version_answer_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A binary that is not runsc (or hangs and times out) costs one probe
    # command, not six: each would wait out its own timeout.
    fake = tmp_path / "not-runsc"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    calls: list[list[str]] = []

    def runner(cmd):  # type: ignore[no-untyped-def]
        calls.append(list(cmd))
        return -9, ""  # what a timed-out child reports

    with pytest.raises(AteomError) as err:
        probe_runsc(str(fake), runner)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "did not answer like runsc (exit -9)" in str(err.value)
    assert calls == [[str(fake), "--version"]]


DEBIAN = RunscInfo("/usr/bin/runsc", "0.0~20221219.0", frozenset({"root", "log"}),
                   (("restore", frozenset({"bundle", "detach", "image-path", "pid-file"})),))
NEWER = RunscInfo("/opt/runsc", "release-2025", frozenset({"nvproxy", "allow-connected-on-save"}),
                  (("restore", frozenset({"background", "direct", "detach"})),))


def _target(info: RunscInfo, **nv: str) -> argv.RunscTarget:
    return argv.RunscTarget(info, "/run/ateom/actors/a", ("--network=none",),
                            argv.NvproxyOptions(**nv))


BASE = ["-log-format", "json", "--alsologtostderr", "-root", "/run/ateom/actors/a"]


@pytest.mark.parametrize("gpu", [False, True])
def test_argv_of_every_runsc_call(gpu: bool) -> None:
    t = _target(NEWER, driver_version="550.1", capabilities="compute,utility")
    nv = (["--nvproxy", "--nvproxy-driver-version=550.1",
           "--nvproxy-allowed-driver-capabilities=compute,utility"] if gpu else [])
    path = ["/opt/runsc"]
    assert argv.create_argv(t, "_pause", "/b/_pause", "/p", gpu=gpu, log_file="/l") == [
        *path, *BASE, "-log", "/l", "--network=none", *nv,
        "create", "-bundle", "/b/_pause", "-pid-file", "/p", "_pause"]
    assert argv.restore_argv(t, "_pause", "/b", "/img", "/p", gpu=gpu, log_file=None) == [
        *path, *BASE, "--network=none", *nv, "restore", "-bundle", "/b", "-image-path", "/img",
        "-pid-file", "/p", "-background", "-detach", "_pause"]
    assert argv.start_argv(t, "app") == [*path, *BASE, "--network=none", "start", "app"]
    assert argv.checkpoint_argv(t, "_pause", "/img") == [
        *path, *BASE, "--network=none", "-allow-connected-on-save",
        "checkpoint", "-image-path", "/img", "_pause"]
    assert argv.kill_argv(t, "app", "TERM") == [*path, *BASE, "--network=none", "kill", "app",
                                                "TERM"]
    assert argv.wait_argv(t, "app")[-2:] == ["wait", "app"]
    assert argv.state_argv(t, "app")[-2:] == ["state", "app"]
    assert argv.delete_argv(t, "app")[-3:] == ["delete", "-force", "app"]
    assert argv.list_argv(t)[-2:] == ["list", "-quiet"]
    assert argv.events_stats_argv(t, "_pause")[-3:] == ["events", "--stats", "_pause"]


def test_debian_runsc_gets_no_optional_flags() -> None:
    t = _target(DEBIAN)
    assert "-background" not in argv.restore_argv(t, "a", "/b", "/i", "/p", gpu=False,
                                                  log_file=None)
    assert "-allow-connected-on-save" not in argv.checkpoint_argv(t, "a", "/i")
    # nvproxy options are passed only when the operator set them.
    assert argv.nvproxy_flags(t) == ["--nvproxy"]


def test_read_tail_is_bounded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "x.log"
    log.write_text("old\n")
    offset = log.stat().st_size
    log.write_text("old\n" + "y" * 5000 + "\nthe reason\n")
    tail = argv.read_tail(str(log), offset)
    assert tail.endswith("the reason\n") and len(tail) == 2048 and "old" not in tail
    assert argv.read_tail(str(log), log.stat().st_size) == ""


def test_failure_reason_is_runsc_message_without_the_stack() -> None:
    log = (
        'I1129 main.go:217] Args: [runsc restore]\n'
        '{"msg":"restoring container \\"_pause\\": no server FD available\\ngoroutine 11 [running]:'
        '\\nmain.x()","level":"warning"}\n'
        "W1129 util.go:64] FATAL ERROR: later text\n"
    )
    assert argv.failure_reason(log) == "later text"
    assert argv.failure_reason(log.rsplit("W1129", 1)[0]) == (
        'restoring container "_pause": no server FD available')
    assert argv.failure_reason("nothing useful") == ""
    err = argv.RunscError("start", "app", 1, "tail", "the reason")
    assert str(err).splitlines()[0] == "runsc start app failed (exit 1): the reason"


def test_sandbox_root_ids_are_per_actor_and_fit_an_abstract_socket_name() -> None:
    assert argv.sandbox_root_id("a1", "_pause") == "a1_pause"
    assert argv.sandbox_root_id("a1", "pause") == "a1_pause"
    long_a, long_b = "x" * 127 + "a", "x" * 127 + "b"
    ida, idb = argv.sandbox_root_id(long_a, "_pause"), argv.sandbox_root_id(long_b, "_pause")
    assert ida != idb and len(ida) <= 64 and ida.endswith("_pause")
    assert len(("runsc-sandbox." + ida).encode()) < 108
