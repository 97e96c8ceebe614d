"""Confined rootfs access: no write lands outside, whatever the image's symlinks say.

Every test runs with both resolvers: openat2(RESOLVE_IN_ROOT) and the
O_NOFOLLOW walk used when the kernel (or a seccomp filter) refuses openat2.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ateom.errors import InjectionError
from ateom.inject.rootfs import ConfinedRoot

from ._support import tree_snapshot

RESOLVERS = [pytest.param(None, id="openat2"), pytest.param(False, id="walk")]


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    """A rootfs and an 'outside' directory next to it that must stay untouched."""
    rootfs = tmp_path / "rootfs"
    outside = tmp_path / "outside"
    (rootfs / "usr").mkdir(parents=True)
    (outside / "lib" / "gpu").mkdir(parents=True)
    (outside / "lib" / "gpu" / "victim").write_text("keep")
    return rootfs, outside


def _make_in(root: ConfinedRoot, directory: str, name: str, target: str) -> None:
    fd = root.open_dir(directory, create=True)
    assert fd is not None
    try:
        root.place_symlink(fd, name, target)
    finally:
        os.close(fd)


@pytest.mark.parametrize("use_openat2", RESOLVERS)
@pytest.mark.parametrize("hostile", ["usr/lib -> OUTSIDE/lib", "usr/lib -> /",
                                     "usr/lib/gpu -> OUTSIDE/lib/gpu", "usr -> ../outside",
                                     "usr/lib -> ../../../../../../..",
                                     "usr/lib/gpu -> /../../outside/lib/gpu"])
def test_hostile_symlinks_stay_inside(world: tuple[Path, Path], hostile: str,
                                      use_openat2: bool | None) -> None:
    rootfs, outside = world
    link, target = (s.strip() for s in hostile.split("->"))
    target = target.replace("OUTSIDE", str(outside))
    link_path = rootfs / link
    if link_path.is_dir() and not link_path.is_symlink():
        link_path.rmdir()
    link_path.parent.mkdir(parents=True, exist_ok=True)
    link_path.symlink_to(target)
    before_outside = tree_snapshot(outside)
    before_parent = sorted(os.listdir(rootfs.parent))
    with ConfinedRoot(str(rootfs), use_openat2=use_openat2) as root:
        _make_in(root, "/usr/lib/gpu", "libcuda.so.1", "libcuda.so.580")
        _make_in(root, "/usr/lib/gpu", "victim", "libcuda.so.580")
    assert tree_snapshot(outside) == before_outside
    assert (outside / "lib" / "gpu" / "victim").read_text() == "keep"
    assert sorted(os.listdir(rootfs.parent)) == before_parent
    # The link exists inside the rootfs, wherever the symlinks resolve in it.
    # Found by walking the rootfs without following links, not through the
    # resolver under test: a resolver that escaped to the host's / (the
    # "-> /" cases) would find its own escaped write and prove nothing.
    placed = [Path(d) / "libcuda.so.1" for d, dirs, files in os.walk(rootfs)
              if "libcuda.so.1" in files + dirs]
    assert len(placed) == 1, placed
    assert os.readlink(placed[0]) == "libcuda.so.580"
    for escaped in ("/gpu", "/lib/gpu/libcuda.so.1", "/usr/lib/gpu", "/outside"):
        assert not os.path.lexists(escaped), escaped


@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_symlink_loop_and_file_component_are_errors(tmp_path: Path,
                                                    use_openat2: bool | None) -> None:
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    (rootfs / "a").symlink_to("b")
    (rootfs / "b").symlink_to("a")
    (rootfs / "file").write_text("x")
    with ConfinedRoot(str(rootfs), use_openat2=use_openat2) as root:
        with pytest.raises(InjectionError, match="inside the rootfs"):
            root.open_dir("/a/lib", create=True)
        with pytest.raises(InjectionError, match="inside the rootfs"):
            root.open_dir("/file/lib", create=True)
        assert root.open_dir("/missing/dir") is None
    assert sorted(os.listdir(rootfs)) == ["a", "b", "file"]


@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_place_symlink_leaves_correct_link_replaces_wrong_refuses_dir(
        tmp_path: Path, use_openat2: bool | None) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "lib" / "adir.so.1").mkdir(parents=True)
    (rootfs / "lib" / "right.so.1").symlink_to("right.so.1.0")
    (rootfs / "lib" / "wrong.so.1").symlink_to("/etc/passwd")
    (rootfs / "lib" / "file.so.1").write_text("stub")
    right_ino = os.lstat(rootfs / "lib" / "right.so.1").st_ino
    with ConfinedRoot(str(rootfs), use_openat2=use_openat2) as root:
        fd = root.open_dir("lib")
        assert fd is not None
        try:
            assert root.place_symlink(fd, "right.so.1", "right.so.1.0") is False
            assert root.place_symlink(fd, "wrong.so.1", "wrong.so.1.0") is True
            assert root.place_symlink(fd, "file.so.1", "file.so.1.0") is True
            with pytest.raises(InjectionError, match="a directory is there"):
                root.place_symlink(fd, "adir.so.1", "x")
            with pytest.raises(InjectionError, match="not a bare file name"):
                root.place_symlink(fd, "../escape.so.1", "x")
        finally:
            os.close(fd)
    lib = rootfs / "lib"
    assert os.lstat(lib / "right.so.1").st_ino == right_ino
    assert os.readlink(lib / "wrong.so.1") == "wrong.so.1.0"
    assert os.readlink(lib / "file.so.1") == "file.so.1.0"
    assert sorted(os.listdir(lib)) == ["adir.so.1", "file.so.1", "right.so.1", "wrong.so.1"]


def test_missing_rootfs_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InjectionError, match="cannot open rootfs"):
        ConfinedRoot(str(tmp_path / "nope"))
