"""DT_SONAME reads on real gcc-built ELF files, the cache, and link planning."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ateom.inject.soname import (
    SonameCache,
    SonameRead,
    plan_soname_links,
    read_soname,
    read_soname_elffile,
)
from tests.support import FakeLibrary, compile_shared_library

from ._support import needs_gcc

SRC = "int f(void) { return 1; }\n"


@pytest.fixture(scope="module")
def elf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("elf")
    if os.system("command -v gcc >/dev/null") != 0:
        pytest.skip("gcc not installed")
    compile_shared_library(d / "libgood.so.1.2.3", "libgood.so.1", SRC)
    compile_shared_library(d / "libnoname.so.4.5", None, SRC)
    compile_shared_library(d / "libescape.so.9", "../../../../escaped.so.1", SRC)
    compile_shared_library(d / "libslash.so.9", "sub/dir.so.1", SRC)
    (d / "libtext.so.1.0").write_text("INPUT(-lfoo)\n")  # a linker script, not ELF
    whole = (d / "libgood.so.1.2.3").read_bytes()
    (d / "libtrunc.so.1.0").write_bytes(whole[:200])
    (d / "libempty.so.1.0").write_bytes(b"")
    return d


@needs_gcc
def test_reads_soname_from_real_elf(elf_dir: Path) -> None:
    assert read_soname(str(elf_dir / "libgood.so.1.2.3")) == SonameRead("libgood.so.1")
    assert read_soname(str(elf_dir / "libnoname.so.4.5")) == SonameRead(None)


@needs_gcc
@pytest.mark.parametrize("name", ["libtext.so.1.0", "libtrunc.so.1.0", "libempty.so.1.0",
                                  "missing.so.1"])
def test_bad_files_give_an_error_not_an_exception(elf_dir: Path, name: str) -> None:
    read = read_soname(str(elf_dir / name))
    assert read.soname is None and read.error


@needs_gcc
def test_cache_keys_on_file_identity(elf_dir: Path, tmp_path: Path) -> None:
    cache = SonameCache()
    lib = tmp_path / "libx.so.1.0"
    lib.write_bytes((elf_dir / "libgood.so.1.2.3").read_bytes())
    assert cache.lookup(str(lib)).soname == "libgood.so.1"
    assert cache.lookup(str(lib)).soname == "libgood.so.1"
    assert (cache.hits, cache.misses) == (1, 1)
    # Replaced in place by another library: new inode/size/mtime, new read.
    tmp = tmp_path / "new"
    tmp.write_bytes((elf_dir / "libslash.so.9").read_bytes())
    os.replace(tmp, lib)
    assert cache.lookup(str(lib)).soname == "sub/dir.so.1"
    assert cache.misses == 2
    cache.clear()
    assert len(cache) == 0


@needs_gcc
def test_cache_sees_a_same_size_rewrite_in_place_by_its_mtime(tmp_path: Path) -> None:
    # Same inode, same size, new bytes: only the mtime in the key tells.
    a = compile_shared_library(tmp_path / "a.so.1.0", "libaaaa.so.1", SRC)
    b = compile_shared_library(tmp_path / "b.so.1.0", "libbbbb.so.1", SRC)
    assert a.stat().st_size == b.stat().st_size
    lib = tmp_path / "libx.so.1.0"
    lib.write_bytes(a.read_bytes())
    os.utime(lib, ns=(1_000_000_000, 1_000_000_000))
    cache = SonameCache()
    assert cache.lookup(str(lib)).soname == "libaaaa.so.1"
    inode = lib.stat().st_ino
    with open(lib, "r+b") as f:
        f.write(b.read_bytes())
    os.utime(lib, ns=(2_000_000_000, 2_000_000_000))
    assert lib.stat().st_ino == inode
    assert cache.lookup(str(lib)).soname == "libbbbb.so.1"
    assert (cache.hits, cache.misses) == (0, 2)


def test_cache_is_bounded(tmp_path: Path) -> None:
    cache = SonameCache(max_entries=2)
    for i in range(4):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"nope")
        cache.lookup(str(p))
    assert len(cache) == 2


def test_plan_links_skips_odd_libraries() -> None:
    mounts = (
        ("/usr/lib/libcuda.so.580", "/h/libcuda.so.580", "bind"),
        ("/usr/lib/libsame.so.1", "/h/libsame.so.1", "bind"),
        ("/usr/lib/libnone.so.2", "/h/libnone.so.2", "bind"),
        ("/usr/lib/libesc.so.3", "/h/libesc.so.3", "bind"),
        ("/usr/lib/libslash.so.3", "/h/libslash.so.3", "bind"),
        ("/usr/lib/libbad.so.3", "/h/libbad.so.3", "bind"),
        ("/usr/lib/libcuda.so.570", "/h/libcuda.so.570", "bind"),
        ("/usr/lib/libshadow.so.9", "/h/libshadow.so.9", "bind"),
        ("/usr/lib/libtmp.so.1", "tmpfs", "tmpfs"),
        ("/usr/bin/tool", "/h/tool", "bind"),
    )
    sonames = {
        "/h/libcuda.so.580": SonameRead("libcuda.so.1"),
        "/h/libsame.so.1": SonameRead("libsame.so.1"),
        "/h/libnone.so.2": SonameRead(None),
        "/h/libesc.so.3": SonameRead("../../../../escaped.so.1"),
        "/h/libslash.so.3": SonameRead("a/b.so.1"),
        "/h/libbad.so.3": SonameRead(None, "ELFError: bad magic"),
        "/h/libcuda.so.570": SonameRead("libcuda.so.1"),
        "/h/libshadow.so.9": SonameRead("libsame.so.1"),
    }
    links, skipped = plan_soname_links(mounts, sonames)
    assert [(lk.path, lk.target) for lk in links] == [("/usr/lib/libcuda.so.1", "libcuda.so.580")]
    reasons = {s.library: s.reason for s in skipped}
    assert set(reasons) == {"/h/libesc.so.3", "/h/libslash.so.3", "/h/libbad.so.3",
                            "/h/libcuda.so.570", "/h/libshadow.so.9"}
    assert "not a bare file name" in reasons["/h/libesc.so.3"]
    assert "unreadable ELF" in reasons["/h/libbad.so.3"]
    assert "shadow a mount" in reasons["/h/libshadow.so.9"]


@needs_gcc
def test_fast_reader_agrees_with_pyelftools_elffile(elf_dir: Path,
                                                    fake_driver: list[FakeLibrary]) -> None:
    files = [p for p in sorted(elf_dir.iterdir())] + [lib.path for lib in fake_driver]
    files += [Path(p) for p in ("/bin/busybox", "/lib64/ld-linux-x86-64.so.2") if os.path.exists(p)]
    for path in files:
        fast, reference = read_soname(str(path)), read_soname_elffile(str(path))
        assert fast.soname == reference.soname, path
        assert (fast.error is None) == (reference.error is None), path


@needs_gcc
def test_truncated_anywhere_never_gives_a_wrong_soname(elf_dir: Path, tmp_path: Path) -> None:
    whole = (elf_dir / "libgood.so.1.2.3").read_bytes()
    cut = tmp_path / "libcut.so.1"
    for size in sorted({*range(0, 128, 7), *range(128, len(whole), max(1, len(whole) // 60))}):
        cut.write_bytes(whole[:size])
        read = read_soname(str(cut))
        assert read.soname in (None, "libgood.so.1"), size
        if read.soname is None:
            assert read.error, size


def _within(seconds: float, fn, *args):  # type: ignore[no-untyped-def]
    """fn(*args), failing (not hanging) if it blocks longer than `seconds`."""
    box: list[object] = []
    worker = threading.Thread(target=lambda: box.append(fn(*args)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert box, f"{fn.__name__} blocked for over {seconds} s"
    return box[0]


def test_a_fifo_or_directory_is_refused_without_blocking(tmp_path: Path) -> None:
    # A FIFO named like a library would block a plain open() forever (no
    # writer): the daemon's cold start and `ateom doctor` would hang on it.
    fifo = tmp_path / "libcuda.so.580.65.06"
    os.mkfifo(fifo)
    read = _within(10, read_soname, str(fifo))
    assert read == SonameRead(None, "not a regular file (a FIFO)")
    cached = _within(10, SonameCache().lookup, str(fifo))
    assert cached == SonameRead(None, "not a regular file (a FIFO)")
    assert read_soname(str(tmp_path)) == SonameRead(None, "not a regular file (a directory)")
