"""A bundle may not point runsc (or ateom) outside the actor's own directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ateom.daemon.bundles import confine
from ateom.errors import AteomError, ErrorCode


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    b = tmp_path / "actors" / "a" / "bundles" / "app"
    (b / "rootfs").mkdir(parents=True)
    return b


def refused(fn: Any, *args: Any) -> str:
    with pytest.raises(AteomError) as err:
        fn(*args)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    return str(err.value)


@pytest.mark.parametrize("path", ["/", "/etc", "/usr/local/nvidia/lib64", "../../x", "..",
                                  "rootfs/../..", ".", ""])
def test_root_path_must_name_a_dir_inside_the_bundle(bundle: Path, path: str) -> None:
    message = refused(confine.check_rootfs, str(bundle), {"root": {"path": path}}, "cfg")
    assert "cfg: root.path" in message


def test_rootfs_symlinked_out_of_the_bundle_is_refused(bundle: Path) -> None:
    (bundle / "rootfs").rmdir()
    (bundle / "rootfs").symlink_to("/etc")
    message = refused(confine.check_rootfs, str(bundle), {"root": {"path": "rootfs"}}, "cfg")
    assert "resolves to '/etc'" in message


def test_rootfs_reached_through_a_symlinked_parent_is_refused(bundle: Path,
                                                              tmp_path: Path) -> None:
    (tmp_path / "elsewhere" / "fs").mkdir(parents=True)
    (bundle / "img").symlink_to(tmp_path / "elsewhere")
    refused(confine.check_rootfs, str(bundle), {"root": {"path": "img/fs"}}, "cfg")


def test_a_rootfs_inside_the_bundle_passes_even_through_an_inner_symlink(bundle: Path) -> None:
    (bundle / "layers" / "top").mkdir(parents=True)
    (bundle / "current").symlink_to("layers/top")
    assert confine.check_rootfs(str(bundle), {"root": {"path": "current"}}, "c") == str(
        bundle / "current")
    assert confine.check_rootfs(str(bundle), {}, "c") == str(bundle / "rootfs")


def test_writable_bind_from_outside_the_actor_dirs_is_refused(bundle: Path,
                                                              tmp_path: Path) -> None:
    actor_dirs = [str(tmp_path / "actors" / "a")]
    for mount in ({"type": "bind", "source": "/", "destination": "/host"},
                  {"source": "/etc", "destination": "/e", "options": ["rbind", "rw"]},
                  {"type": "bind", "source": str(tmp_path), "destination": "/t"}):
        message = refused(confine.check_bind_mounts, {"mounts": [mount]}, "cfg", actor_dirs)
        assert "cfg: mounts[0].source" in message


def test_writable_bind_escaping_through_a_symlink_is_refused(tmp_path: Path) -> None:
    actor = tmp_path / "actors" / "a"
    (actor / "vol").mkdir(parents=True)
    (actor / "vol" / "escape").symlink_to("/etc")
    mounts = {"mounts": [{"type": "bind", "source": str(actor / "vol" / "escape"),
                          "destination": "/v"}]}
    assert "resolves to '/etc'" in refused(confine.check_bind_mounts, mounts, "c", [str(actor)])


def test_allowed_mounts_pass(tmp_path: Path) -> None:
    actor = tmp_path / "actors" / "a"
    (actor / "vol").mkdir(parents=True)
    confine.check_bind_mounts({"mounts": [
        {"type": "bind", "source": str(actor / "vol"), "destination": "/v"},  # own dir, rw
        {"type": "bind", "source": "/etc/resolv.conf", "destination": "/etc/resolv.conf",
         "options": ["rbind", "ro"]},  # read-only from the host: the node agent's choice
        {"type": "tmpfs", "source": "tmpfs", "destination": "/tmp"},  # not a bind
        {"type": "proc", "source": "proc", "destination": "/proc"},
    ]}, "c", [str(actor)])


def test_relocate_names_the_node_agents_bundle_as_runsc_would_have_joined_it() -> None:
    config = {"root": {"path": "rootfs"}, "process": {"args": ["sh"]}, "mounts": [
        {"destination": "/etc/hosts", "type": "bind", "source": "hosts", "options": ["ro"]},
        {"destination": "/x", "source": "rel", "options": ["rbind", "rw"]},
        {"destination": "/abs", "type": "bind", "source": "/srv/abs"},
        {"destination": "/proc", "type": "proc", "source": "proc"},
    ]}
    out = confine.relocate(config, "/actors/a/bundles/app")
    assert out["root"]["path"] == "/actors/a/bundles/app/rootfs"
    assert [m["source"] for m in out["mounts"]] == [
        "/actors/a/bundles/app/hosts", "/actors/a/bundles/app/rel", "/srv/abs", "proc"]
    assert config["root"]["path"] == "rootfs"  # the input is not changed
    assert confine.relocate({"process": {}}, "/b")["root"]["path"] == "/b/rootfs"
