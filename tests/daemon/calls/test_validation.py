"""Request validation: each check's code and the field it names."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ateom.daemon.bundles import edits
from ateom.daemon.calls import validation
from ateom.daemon.calls.requests import (
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
    WakeupProbeRequest,
)
from ateom.errors import AteomError, ErrorCode
from tests.support.pure import DIRS, ROOT, code

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


def test_volume_mounts_are_translated_in_wire_order_for_the_planner() -> None:
    # Checked where they are planned (`ateom.volumes.plan_mounts`): the index a refusal
    # names must be the wire's, kind by kind.
    c = ContainerRequest(
        "app", durable_dir_volume_mounts=(VolumeMountRequest("d", "/d"),),
        csi_volume_mounts=(VolumeMountRequest("c", "/c"),),
        system_info_volume_mounts=(VolumeMountRequest("s", "/s"),),
        image_volume_mounts=(VolumeMountRequest("i1", "/i1"), VolumeMountRequest("i2", "/i2")))
    validation.check_containers((c,))
    assert [(v.kind.wire_field, v.volume_name) for v in c.volume_requests()] == [
        ("durable_dir_volume_mounts", "d"), ("csi_volume_mounts", "c"),
        ("system_info_volume_mounts", "s"), ("image_volume_mounts", "i1"),
        ("image_volume_mounts", "i2")]


@pytest.mark.parametrize(("probe", "said"), [
    (WakeupProbeRequest("/ready", 0), "spec.containers[0].wakeup_probe.http_get.port 0"),
    (WakeupProbeRequest("/ready", 65536), "http_get.port 65536"),
    (WakeupProbeRequest("ready", 80), "http_get.path 'ready'"),
    (WakeupProbeRequest("/a b", 80), "http_get.path '/a b'"),
    (WakeupProbeRequest("/ready", 80, -1), "timeout_seconds -1"),
])
def test_a_bad_wakeup_probe_is_refused_naming_the_field(probe: WakeupProbeRequest,
                                                        said: str) -> None:
    with pytest.raises(AteomError, match=re.escape(said)) as err:
        validation.check_containers((ContainerRequest("app", wakeup_probe=probe),))
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    validation.check_containers((ContainerRequest("app", wakeup_probe=WakeupProbeRequest(
        "/healthz?full=1", 8080, 0)),))


@pytest.mark.parametrize("address", ["gw.example:443", "10.0.0.1:8443", "[fd00::1]:443"])
def test_an_egress_gateway_is_host_and_port(address: str) -> None:
    validation.check_run(RunRequest(ActorRef("a"), DIRS, egress_gateway=address), ROOT)


@pytest.mark.parametrize("address", ["", "gw.example", "gw:0", "gw:70000", ":443",
                                     "gw example:443", "-gw:443"])
def test_a_bad_egress_gateway_is_refused_naming_it(address: str) -> None:
    with pytest.raises(AteomError, match="egress_gateway.address") as err:
        validation.check_run(RunRequest(ActorRef("a"), DIRS, egress_gateway=address), ROOT)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


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


@pytest.mark.parametrize("uri", ["gs://bucket/root/atespaces/team-a/actors/u/snapshots/5678",
                                 "s3://b/x", "file:///local/cache/x", ""])
def test_a_snapshot_uri_of_any_scheme_and_either_scope_is_taken(uri: str) -> None:
    # The URI names the snapshot; the node agent moves the files, ateom never fetches it.
    for scope in (SnapshotScope.FULL, SnapshotScope.DATA):
        validation.check_checkpoint(CheckpointRequest(ActorRef("a"), DIRS, snapshot_uri=uri,
                                                      scope=scope), ROOT)
        validation.check_restore(RestoreRequest(ActorRef("a"), DIRS, snapshot_uri=uri,
                                                scope=scope), ROOT)
    with pytest.raises(AteomError, match="snapshot_uri 'gs://") as err:
        validation.check_checkpoint(CheckpointRequest(
            ActorRef("a"), DIRS, snapshot_uri="gs://" + "x" * 5000), ROOT)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_runtime_assets_the_older_node_agent_sends_are_taken_for_the_runsc_that_runs(
        ) -> None:
    validation.check_runtime_assets({"runsc": "/static-files/runsc-abc"}, "/static-files/runsc-abc",
                                    "/static-files/runsc-abc")
    validation.check_runtime_assets({}, "/usr/bin/runsc", "")
    # runsc_path empty: the configured runsc runs, and the asset may name it.
    validation.check_runtime_assets({"runsc": "/usr/bin/runsc"}, "/usr/bin/runsc", "")
    with pytest.raises(AteomError, match=r"runtime_asset_paths\['runsc'\] '/other': differs"
                       ) as err:
        validation.check_runtime_assets({"runsc": "/other"}, "/usr/bin/runsc", "")
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(AteomError, match="cloud-hypervisor.*micro-VM runtime asset") as err:
        validation.check_runtime_assets({"cloud-hypervisor": "/ch"}, "/usr/bin/runsc", "")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert code(validation.check_runtime_assets, {"k": "v"}, "/r", "") \
        is ErrorCode.INVALID_ARGUMENT


def test_negative_resources() -> None:
    assert code(validation.check_run, RunRequest(ActorRef("a"), DIRS, cpu_milli=-1),
                ROOT) is ErrorCode.INVALID_ARGUMENT
    assert code(validation.check_run, RunRequest(ActorRef("a"), DIRS, memory_bytes=-1),
                ROOT) is ErrorCode.INVALID_ARGUMENT


def test_cpu_milli_whose_quota_overflows_int64_is_invalid() -> None:
    # runsc reads linux.resources.cpu.quota as int64: an overflow there would
    # only surface as runsc's INTERNAL failure after the bundle was written.
    largest = (2**63 - 1) * 1000 // edits.CPU_PERIOD_USEC
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
