"""The pure plan: each mount checked and named by its wire field, host directories
by kind, ro/rw, the order of nested mounts, and the merge into config.json."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ateom.errors import AteomError, ErrorCode
from ateom.volumes import (
    MountPlan,
    VolumeKind,
    VolumeRequest,
    VolumeRoots,
    durable_volumes,
    merge_mounts,
    plan_mounts,
)

ROOTS = VolumeRoots(
    durable_dir_volume_mounts_dir="/actors/u/durable",
    system_info_volume_roots_dir="/actors/u/sysinfo",
    volumes_dir="/actors/u/volumes",
    actors_root="/actors",
)
D, C, S, IMG = (VolumeKind.DURABLE_DIR, VolumeKind.CSI, VolumeKind.SYSTEM_INFO,
              VolumeKind.IMAGE)


def _invalid(requests: list[VolumeRequest], roots: VolumeRoots = ROOTS,
             index: int = 0) -> str:
    with pytest.raises(AteomError) as info:
        plan_mounts(index, "app", requests, roots)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    return info.value.message


def test_each_kind_comes_from_its_root_with_its_access() -> None:
    plan = plan_mounts(0, "app", [
        VolumeRequest(D, "data", "/data"),
        VolumeRequest(C, "disk", "/disk"),
        VolumeRequest(S, "info", "/etc/info"),
        VolumeRequest(IMG, "model", "/model"),
    ], ROOTS)
    assert plan.sources == ("/actors/u/durable/data", "/actors/u/volumes/disk",
                            "/actors/u/volumes/model", "/actors/u/sysinfo/info")
    by_dest = {m["destination"]: m for m in plan.oci_mounts()}
    assert by_dest["/data"] == {"destination": "/data", "type": "bind",
                                "source": "/actors/u/durable/data",
                                "options": ["rbind", "rprivate", "rw"]}
    assert by_dest["/disk"]["options"][-1] == "rw"
    assert by_dest["/etc/info"]["options"][-1] == "ro"
    assert by_dest["/model"]["options"][-1] == "ro"
    assert by_dest["/etc/info"]["source"] == "/actors/u/sysinfo/info"
    assert [(v.volume_name, v.host_dir) for v in plan.durable] == [
        ("data", "/actors/u/durable/data")]
    assert plan.durable[0].beneath == "/actors"


def test_oci_mounts_are_fresh_dicts() -> None:
    plan = plan_mounts(0, "app", [VolumeRequest(D, "data", "/data")], ROOTS)
    plan.oci_mounts()[0]["options"].append("suid")
    assert plan.oci_mounts()[0]["options"] == ["rbind", "rprivate", "rw"]


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\0b", "x" * 254, "a b", "é", "../etc"])
def test_a_bad_volume_name_is_refused_naming_its_field(name: str) -> None:
    message = _invalid([VolumeRequest(IMG, "ok", "/ok"), VolumeRequest(D, "fine", "/fine"),
                        VolumeRequest(D, name, "/x")], index=2)
    assert message.startswith("spec.containers[2].durable_dir_volume_mounts[1].volume_name")


def test_the_longest_volume_name_is_allowed() -> None:
    plan_mounts(0, "app", [VolumeRequest(D, "x" * 253, "/x")], ROOTS)


@pytest.mark.parametrize("path,why", [
    ("", "required"),
    ("data", "absolute"),
    ("/a/../b", "normalized"),
    ("/a//b", "normalized"),
    ("/a/", "normalized"),
    ("/a/.", "normalized"),
    ("/", "must not be '/'"),
    ("/a\0b", "NUL"),
    ("/" + "a" * 5000, "PATH_MAX"),
])
def test_a_bad_mount_path_is_refused_naming_its_field(path: str, why: str) -> None:
    message = _invalid([VolumeRequest(C, "disk", path)])
    assert message.startswith("spec.containers[0].csi_volume_mounts[0].mount_path")
    assert why in message
    assert len(message) < 400  # a 5000-byte value is quoted short


def test_the_index_counts_within_each_kind() -> None:
    message = _invalid([VolumeRequest(D, "a", "/a"), VolumeRequest(S, "b", "/b"),
                        VolumeRequest(D, "c", "/c"), VolumeRequest(S, "d", "rel")])
    assert message.startswith("spec.containers[0].system_info_volume_mounts[1].mount_path"
                              " 'rel'")


def test_two_mounts_at_one_path_are_refused_across_kinds() -> None:
    message = _invalid([VolumeRequest(D, "a", "/data"), VolumeRequest(IMG, "b", "/data")])
    assert message.startswith("spec.containers[0].image_volume_mounts[0].mount_path '/data'")
    assert "spec.containers[0].durable_dir_volume_mounts[0]" in message


def test_one_volume_at_two_paths_is_fine_and_snapshotted_once() -> None:
    plan = plan_mounts(0, "app", [VolumeRequest(D, "data", "/a"),
                                  VolumeRequest(D, "data", "/b")], ROOTS)
    other = plan_mounts(1, "side", [VolumeRequest(D, "data", "/c"),
                                    VolumeRequest(D, "logs", "/logs")], ROOTS)
    assert [v.volume_name for v in durable_volumes([plan, other])] == ["data", "logs"]


@pytest.mark.parametrize("kind,field", [
    (D, "durable_dir_volume_mounts_dir"),
    (S, "system_info_volume_roots_dir"),
    (IMG, "volumes_dir"),
    (C, "volumes_dir"),
])
def test_a_volume_without_its_root_names_the_missing_actor_dir(kind: VolumeKind,
                                                               field: str) -> None:
    roots = VolumeRoots(**{**{f: getattr(ROOTS, f) for f in (
        "durable_dir_volume_mounts_dir", "system_info_volume_roots_dir", "volumes_dir")},
        field: ""})
    message = _invalid([VolumeRequest(kind, "v", "/v")], roots=roots)
    assert message.startswith(f"actor_dirs.{field}: required by spec.containers[0]."
                              f"{kind.wire_field}[0]")


def test_a_root_outside_the_actors_root_is_refused() -> None:
    roots = VolumeRoots(durable_dir_volume_mounts_dir="/elsewhere/durable",
                        actors_root="/actors")
    message = _invalid([VolumeRequest(D, "data", "/data")], roots=roots)
    assert message.startswith("actor_dirs.durable_dir_volume_mounts_dir '/elsewhere/durable'")


def test_a_root_that_is_not_normalized_is_refused() -> None:
    roots = VolumeRoots(durable_dir_volume_mounts_dir="/actors/u/../v/durable")
    assert "normalized" in _invalid([VolumeRequest(D, "data", "/data")], roots=roots)


def test_without_an_actors_root_each_root_is_its_own_trusted_start() -> None:
    roots = VolumeRoots(durable_dir_volume_mounts_dir="/actors/u/durable")
    plan = plan_mounts(0, "app", [VolumeRequest(D, "data", "/data")], roots)
    assert plan.volumes[0].beneath == "/actors/u/durable"


def test_a_parent_mount_comes_before_the_mounts_inside_it() -> None:
    plan = plan_mounts(0, "app", [VolumeRequest(S, "cfg", "/data/cfg/x"),
                                  VolumeRequest(IMG, "m", "/data/m"),
                                  VolumeRequest(D, "data", "/data")], ROOTS)
    assert [m["destination"] for m in plan.oci_mounts()] == ["/data", "/data/m",
                                                             "/data/cfg/x"]


def test_a_message_quotes_a_huge_value_short() -> None:
    message = _invalid([VolumeRequest(D, "n" * 1_000_000, "/x")])
    assert len(message) < 600 and "1000000 chars" in message


def test_merge_replaces_a_mount_at_the_same_destination_and_appends_the_rest() -> None:
    config: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/data/", "type": "bind", "source": "/var/lib/image-volume",
         "options": ["rbind", "rw"]},
        {"destination": "/etc/hosts", "type": "bind", "source": "/h", "options": ["ro"]},
    ]
    before = copy.deepcopy(config)
    plan = plan_mounts(0, "app", [VolumeRequest(D, "data", "/data"),
                                  VolumeRequest(IMG, "model", "/model")], ROOTS)
    merged = merge_mounts(config, plan.oci_mounts())
    assert [m["destination"] for m in merged] == ["/proc", "/etc/hosts", "/data", "/model"]
    assert [m["source"] for m in merged if m["destination"] == "/data"] == [
        "/actors/u/durable/data"]
    assert config == before  # the input is not changed


def test_merge_drops_every_config_mount_at_a_planned_destination() -> None:
    config: list[dict[str, Any]] = [{"destination": "/data", "type": "tmpfs"},
                                    {"destination": "/data"}]
    planned = MountPlan("app", plan_mounts(0, "app", [VolumeRequest(D, "d", "/data")],
                                           ROOTS).volumes).oci_mounts()
    assert merge_mounts(config, planned) == planned


def test_merge_keeps_config_mounts_without_a_usable_destination() -> None:
    config: list[dict[str, Any]] = [{"type": "tmpfs"}, {"destination": 7}]
    planned = [{"destination": "/data", "type": "bind"}]
    assert merge_mounts(config, planned) == [*config, *planned]
