"""Host directories are reached without a symlink, and are directories."""

from __future__ import annotations

import os

import pytest

from ateom.errors import AteomError, ErrorCode
from ateom.volumes import MountPlan, VolumeKind, VolumeRequest, check_host_dirs, plan_mounts
from tests.volumes.conftest import Layout

D, S, IMG = VolumeKind.DURABLE_DIR, VolumeKind.SYSTEM_INFO, VolumeKind.IMAGE


def _plan(layout: Layout, *requests: VolumeRequest, with_actors_root: bool = True) -> MountPlan:
    return plan_mounts(0, "app", requests, layout.roots(with_actors_root=with_actors_root))


def _refused(plan: MountPlan, code: ErrorCode) -> str:
    with pytest.raises(AteomError) as info:
        check_host_dirs(plan)
    assert info.value.code is code, info.value.message
    return info.value.message


def test_prepared_directories_pass(layout: Layout) -> None:
    (layout.durable / "data").mkdir()
    (layout.sysinfo / "info").mkdir()
    (layout.volumes / "model").mkdir()
    check_host_dirs(_plan(layout, VolumeRequest(D, "data", "/data"),
                          VolumeRequest(S, "info", "/info"),
                          VolumeRequest(IMG, "model", "/model")))


def test_a_missing_directory_names_the_volume_the_field_and_the_path(layout: Layout) -> None:
    message = _refused(_plan(layout, VolumeRequest(D, "data", "/data")),
                       ErrorCode.FAILED_PRECONDITION)
    assert message == (
        f"durable-dir volume 'data' of container 'app': {layout.durable}/data: missing (the"
        " node agent prepares one directory per volume under"
        " actor_dirs.durable_dir_volume_mounts_dir)")


def test_a_symlinked_volume_directory_is_refused(layout: Layout) -> None:
    (layout.durable / "data").symlink_to("/etc")
    message = _refused(_plan(layout, VolumeRequest(D, "data", "/data")),
                       ErrorCode.INVALID_ARGUMENT)
    assert "durable-dir volume 'data'" in message and "a symlink (to '/etc')" in message


def test_a_symlink_to_a_sibling_inside_the_actor_is_refused_too(layout: Layout) -> None:
    (layout.volumes / "real").mkdir()
    (layout.volumes / "model").symlink_to("real")
    message = _refused(_plan(layout, VolumeRequest(IMG, "model", "/model")),
                       ErrorCode.INVALID_ARGUMENT)
    assert "image volume 'model'" in message and "symlink" in message


def test_a_file_is_not_a_volume(layout: Layout) -> None:
    (layout.sysinfo / "info").write_text("x")
    message = _refused(_plan(layout, VolumeRequest(S, "info", "/info")),
                       ErrorCode.INVALID_ARGUMENT)
    assert "system-info volume 'info'" in message and "not a directory" in message


def test_a_symlinked_actor_dir_is_refused_below_the_actors_root(layout: Layout) -> None:
    other = layout.actors / "uid-2" / "durable"
    (other / "data").mkdir(parents=True)
    (layout.durable / "data").mkdir()
    os.rename(layout.durable, layout.actor / "durable.real")
    layout.durable.symlink_to(other)  # another actor's data
    message = _refused(_plan(layout, VolumeRequest(D, "data", "/data")),
                       ErrorCode.INVALID_ARGUMENT)
    assert "actor_dirs.durable_dir_volume_mounts_dir" in message
    assert str(layout.durable) in message


def test_a_symlinked_actor_dir_is_followed_when_it_is_the_trusted_start(
        layout: Layout) -> None:
    # Without --actors-root the root itself is the trusted directory (opened
    # normally, as safefs opens its `beneath`); the daemon's ActorDirs checks
    # keep it under --actors-root.
    real = layout.actor / "durable.real"
    os.rename(layout.durable, real)
    (real / "data").mkdir()
    layout.durable.symlink_to(real)
    check_host_dirs(_plan(layout, VolumeRequest(D, "data", "/data"), with_actors_root=False))


def test_a_missing_actor_dir_is_a_failed_precondition(layout: Layout) -> None:
    layout.sysinfo.rmdir()
    message = _refused(_plan(layout, VolumeRequest(S, "info", "/info")),
                       ErrorCode.FAILED_PRECONDITION)
    assert "actor_dirs.system_info_volume_roots_dir" in message and "missing" in message


def test_the_first_bad_volume_stops_the_check(layout: Layout) -> None:
    (layout.durable / "a").mkdir()
    (layout.durable / "b").symlink_to(layout.outside)
    message = _refused(_plan(layout, VolumeRequest(D, "a", "/a"), VolumeRequest(D, "b", "/b")),
                       ErrorCode.INVALID_ARGUMENT)
    assert "volume 'b'" in message
