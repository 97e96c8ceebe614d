"""LinkPool: SONAME links as hard links to pooled symlink inodes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ateom.inject import InjectOptions, LinkPool, inject_devices
from ateom.inject.rootfs import ConfinedRoot
from tests.support import FakeLibrary, build_busybox_bundle

from ._support import tree_snapshot
from .test_injector import LIB_DIR, gpu_resolution

OPTS = InjectOptions(library_dirs=(LIB_DIR,))


def place(rootfs: Path, directory: str, name: str, target: str, pool: LinkPool) -> bool:
    with ConfinedRoot(str(rootfs)) as root:
        fd = root.open_dir(directory, create=True)
        assert fd is not None
        try:
            return root.place_symlink(fd, name, target, pool)
        finally:
            os.close(fd)


def test_pooled_links_share_one_inode_across_bundles(tmp_path: Path) -> None:
    pool = LinkPool(str(tmp_path / "pool"))
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert place(a, "/lib", "libcuda.so.1", "libcuda.so.580", pool)
    assert place(b, "/lib", "libcuda.so.1", "libcuda.so.580", pool)
    la, lb = a / "lib/libcuda.so.1", b / "lib/libcuda.so.1"
    assert os.readlink(la) == os.readlink(lb) == "libcuda.so.580"
    assert os.lstat(la).st_ino == os.lstat(lb).st_ino == os.lstat(
        tmp_path / "pool/libcuda.so.580").st_ino
    assert os.lstat(la).st_nlink == 3
    assert (pool.linked, pool.fallbacks) == (2, 0)
    # Already right: left alone.
    assert not place(a, "/lib", "libcuda.so.1", "libcuda.so.580", pool)


def test_wrong_link_replaced_and_tampered_pool_entry_repaired(tmp_path: Path) -> None:
    pool = LinkPool(str(tmp_path / "pool"))
    (tmp_path / "pool/libx.so.2").symlink_to("/etc/shadow")  # not what its name says
    rootfs = tmp_path / "rootfs"
    (rootfs / "lib").mkdir(parents=True)
    (rootfs / "lib/libx.so.1").symlink_to("elsewhere")
    assert place(rootfs, "/lib", "libx.so.1", "libx.so.2", pool)
    assert os.readlink(rootfs / "lib/libx.so.1") == "libx.so.2"
    assert os.readlink(tmp_path / "pool/libx.so.2") == "libx.so.2"
    assert sorted(os.listdir(rootfs / "lib")) == ["libx.so.1"]


def test_pool_on_another_filesystem_falls_back_to_symlinks(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a filesystem other than the test tmp dir")
    pool_dir = shm / f"ateom-test-pool-{os.getpid()}"
    pool = LinkPool(str(pool_dir))
    try:
        assert place(tmp_path, "/lib", "libcuda.so.1", "libcuda.so.580", pool)
        assert os.readlink(tmp_path / "lib/libcuda.so.1") == "libcuda.so.580"
        assert os.lstat(tmp_path / "lib/libcuda.so.1").st_nlink == 1
        assert pool.fallbacks == 1
    finally:
        pool.close()
        for p in pool_dir.iterdir():
            p.unlink()
        pool_dir.rmdir()


def test_injection_with_pool_matches_injection_without(
        tmp_path: Path, fake_driver: list[FakeLibrary]) -> None:
    plain = build_busybox_bundle(tmp_path / "plain", ["true"])
    pooled = build_busybox_bundle(tmp_path / "pooled", ["true"])
    pool = LinkPool(str(tmp_path / "pool"))
    res = gpu_resolution(fake_driver)
    inject_devices(plain, res, OPTS)
    inject_devices(pooled, res, OPTS, link_pool=pool)
    assert pool.linked == 3

    def view(bundle: Path) -> dict[str, tuple[int, int, str]]:
        return {k: (stat_mode, 0, target)
                for k, (stat_mode, _, target) in tree_snapshot(bundle / "rootfs").items()}

    assert view(plain) == view(pooled)
    assert (plain / "config.json").read_bytes() == (pooled / "config.json").read_bytes()
    assert not inject_devices(pooled, res, OPTS, link_pool=pool).changed
