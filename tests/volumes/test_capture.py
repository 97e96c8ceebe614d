"""Capture: a volume into ``durable-<name>.tar``, no symlink ever followed."""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest

from ateom.errors import AteomError, ErrorCode
from ateom.volumes import capture, walk
from tests.volumes.conftest import Layout, is_root

MARKER = b"TOP-SECRET-MARKER-7f3a"


def _members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {m.name: m for m in tar.getmembers()}


def _content(path: Path, name: str) -> bytes:
    with tarfile.open(path) as tar:
        f = tar.extractfile(name)
        assert f is not None
        return f.read()


def _secret(layout: Layout) -> Path:
    secret = layout.outside / "secret"
    secret.write_bytes(MARKER)
    return secret


def test_files_directories_modes_and_times_are_captured(layout: Layout) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    (data / "a.txt").write_bytes(b"hello")
    (data / "a.txt").chmod(0o640)
    (data / "dir" / "nested").mkdir(parents=True)
    (data / "dir").chmod(0o750)
    (data / "dir" / "nested" / "big.bin").write_bytes(os.urandom(300_000))
    (data / "empty").touch()
    os.utime(data / "a.txt", ns=(1, 1_600_000_000_123_456_789))
    result = capture([volume], str(layout.checkpoint))
    assert result.files == ("durable-data.tar",) and result.skipped == ()
    tar_path = layout.checkpoint / "durable-data.tar"
    members = _members(tar_path)
    assert list(members) == ["a.txt", "dir", "dir/nested", "dir/nested/big.bin", "empty"]
    assert members["a.txt"].isreg() and members["a.txt"].mode == 0o640
    assert members["dir"].isdir() and members["dir"].mode == 0o750
    assert members["a.txt"].pax_headers["mtime"] == "1600000000.123456789"
    assert _content(tar_path, "dir/nested/big.bin") == (
        data / "dir" / "nested" / "big.bin").read_bytes()
    assert _content(tar_path, "empty") == b""
    with tarfile.open(tar_path) as tar:
        assert tar.format == tarfile.PAX_FORMAT


@pytest.mark.skipif(not is_root(), reason="chown needs root")
def test_ownership_is_captured(layout: Layout) -> None:
    volume = layout.durable_volume()
    f = layout.durable / "data" / "owned"
    f.write_text("x")
    os.chown(f, 1234, 5678)
    capture([volume], str(layout.checkpoint))
    m = _members(layout.checkpoint / "durable-data.tar")["owned"]
    assert (m.uid, m.gid) == (1234, 5678)


def test_symlinks_are_stored_as_links_never_read_through(layout: Layout) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    (data / "shadow").symlink_to("/etc/shadow")
    (data / "secret").symlink_to(_secret(layout))
    (data / "etc").symlink_to("/etc")
    (data / "dangling").symlink_to("no/such/thing")
    capture([volume], str(layout.checkpoint))
    tar_path = layout.checkpoint / "durable-data.tar"
    members = _members(tar_path)
    assert set(members) == {"shadow", "secret", "etc", "dangling"}  # /etc not walked
    for name, target in (("shadow", "/etc/shadow"), ("secret", str(layout.outside / "secret")),
                         ("etc", "/etc"), ("dangling", "no/such/thing")):
        assert members[name].type == tarfile.SYMTYPE and members[name].linkname == target
        assert members[name].size == 0
    raw = tar_path.read_bytes()
    assert MARKER not in raw
    if os.access("/etc/shadow", os.R_OK) and (shadow := Path("/etc/shadow").read_bytes()):
        assert shadow not in raw


def test_fifos_sockets_and_devices_are_skipped_and_reported(layout: Layout) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    os.mkfifo(data / "pipe")
    os.mknod(data / "sock", 0o600 | stat.S_IFSOCK)
    if is_root():
        os.mknod(data / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    (data / "kept").write_text("x")
    result = capture([volume], str(layout.checkpoint))  # a FIFO must not block it
    assert set(_members(layout.checkpoint / "durable-data.tar")) == {"kept"}
    reasons = {s.path: s.reason for s in result.skipped}
    assert reasons["pipe"].startswith("a FIFO") and reasons["sock"].startswith("a socket")
    if is_root():
        assert reasons["null"].startswith("a character device")
    assert {s.volume_name for s in result.skipped} == {"data"}


def test_hard_links_are_stored_as_separate_files(layout: Layout) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    (data / "one").write_bytes(b"shared")
    os.link(data / "one", data / "two")
    capture([volume], str(layout.checkpoint))
    tar_path = layout.checkpoint / "durable-data.tar"
    members = _members(tar_path)
    assert members["one"].isreg() and members["two"].isreg()
    assert _content(tar_path, "two") == b"shared"


def test_a_file_swapped_for_a_symlink_before_it_is_opened_is_not_followed(
        layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    (data / "note").write_bytes(b"plain")
    secret = _secret(layout)
    real_open = walk.open_entry
    opened: list[str] = []

    def swap_then_open(name: str, dir_fd: int, *, directory: bool) -> int:
        # The race: listed and lstat'ed as a file, a symlink by the time it is opened.
        if name == "note" and not opened:
            os.unlink(name, dir_fd=dir_fd)
            os.symlink(str(secret), name, dir_fd=dir_fd)
        opened.append(name)
        return real_open(name, dir_fd, directory=directory)

    monkeypatch.setattr(walk, "open_entry", swap_then_open)
    result = capture([volume], str(layout.checkpoint))
    tar_path = layout.checkpoint / "durable-data.tar"
    note = _members(tar_path)["note"]
    assert opened == ["note"]  # the real open ran (and refused the link)
    assert note.type == tarfile.SYMTYPE and note.linkname == str(secret)
    assert MARKER not in tar_path.read_bytes()
    assert result.skipped == ()


def test_a_directory_swapped_for_a_symlink_is_not_walked(
        layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    (data / "sub").mkdir()
    _secret(layout)
    real_open = walk.open_entry

    def swap_then_open(name: str, dir_fd: int, *, directory: bool) -> int:
        if name == "sub":
            os.rmdir(name, dir_fd=dir_fd)
            os.symlink(str(layout.outside), name, dir_fd=dir_fd)
        return real_open(name, dir_fd, directory=directory)

    monkeypatch.setattr(walk, "open_entry", swap_then_open)
    capture([volume], str(layout.checkpoint))
    tar_path = layout.checkpoint / "durable-data.tar"
    assert {n: m.type for n, m in _members(tar_path).items()} == {"sub": tarfile.SYMTYPE}
    assert MARKER not in tar_path.read_bytes()


def test_a_file_that_shrinks_while_read_is_padded_and_reported(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"0123456789")
    fd = os.open(f, os.O_RDONLY)
    try:
        reader = walk._SizedReader(fd, 20)
        assert reader.read(16) == b"0123456789" + b"\0" * 6
        assert reader.read(16) == b"\0" * 4 and reader.read(16) == b""
        assert reader.short
    finally:
        os.close(fd)


def test_a_symlink_planted_at_the_snapshot_name_is_replaced_not_followed(
        layout: Layout) -> None:
    volume = layout.durable_volume()
    (layout.durable / "data" / "f").write_text("x")
    victim = layout.outside / "sentinel"
    (layout.checkpoint / "durable-data.tar").symlink_to(victim)
    capture([volume], str(layout.checkpoint))
    assert victim.read_bytes() == b"untouched"
    assert not (layout.checkpoint / "durable-data.tar").is_symlink()
    assert sorted(os.listdir(layout.checkpoint)) == ["durable-data.tar"]  # no temp left
    assert stat.S_IMODE((layout.checkpoint / "durable-data.tar").stat().st_mode) == 0o644


def test_each_volume_once_and_the_names_sorted(layout: Layout) -> None:
    b, a = layout.durable_volume("b"), layout.durable_volume("a")
    result = capture([b, a, b], str(layout.checkpoint), durable=True)
    assert result.files == ("durable-a.tar", "durable-b.tar")
    assert _members(layout.checkpoint / "durable-a.tar") == {}


def test_a_missing_volume_fails_and_leaves_no_snapshot_file(layout: Layout) -> None:
    good = layout.durable_volume("a")
    (layout.durable / "a" / "f").write_text("x")
    missing = layout.durable_volume("b", make=False)
    with pytest.raises(AteomError) as info:
        capture([good, missing], str(layout.checkpoint))
    assert info.value.code is ErrorCode.FAILED_PRECONDITION
    assert "durable-dir volume 'b'" in info.value.message and "missing" in info.value.message
    assert os.listdir(layout.checkpoint) == []


def test_a_symlinked_volume_directory_is_not_captured(layout: Layout) -> None:
    _secret(layout)
    (layout.durable / "data").symlink_to(layout.outside)
    volume = layout.durable_volume(make=False)
    with pytest.raises(AteomError) as info:
        capture([volume], str(layout.checkpoint))
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert os.listdir(layout.checkpoint) == []


def test_a_tree_deeper_than_the_limit_is_refused(layout: Layout,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walk, "MAX_DEPTH", 2)
    volume = layout.durable_volume()
    (layout.durable / "data" / "a" / "b" / "c").mkdir(parents=True)
    with pytest.raises(AteomError) as info:
        capture([volume], str(layout.checkpoint))
    assert info.value.code is ErrorCode.FAILED_PRECONDITION and "deeper than 2" in str(info.value)
    assert os.listdir(layout.checkpoint) == []


def test_a_missing_checkpoint_dir_is_a_failed_precondition(layout: Layout) -> None:
    volume = layout.durable_volume()
    with pytest.raises(AteomError) as info:
        capture([volume], str(layout.actor / "nope"))
    assert info.value.code is ErrorCode.FAILED_PRECONDITION
    assert info.value.message.startswith("actor_dirs.checkpoint_dir")
