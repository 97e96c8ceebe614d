"""Restore: each volume emptied and made to hold its snapshot exactly; a tar that
would write anywhere else, or anything but files, directories and symlinks,
is refused whole, before anything changes."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from ateom.errors import AteomError, ErrorCode
from ateom.volumes import DurableVolume, capture, restore
from tests.volumes.conftest import Layout, is_root, tree

Member = tuple[tarfile.TarInfo, bytes | None]


def _member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"",
            linkname: str = "", mode: int = 0o644) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, mode
    if kind == tarfile.REGTYPE:
        info.size = len(data)
        return info, data
    return info, None


def _write_tar(path: Path, members: list[Member]) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _build(data: Path) -> None:
    """A tree with every kind of entry capture keeps, each with its own times."""
    (data / "a.txt").write_bytes(b"hello")
    (data / "a.txt").chmod(0o640)
    (data / "exec").write_bytes(b"#!/bin/sh\n")
    (data / "exec").chmod(0o4755)
    (data / "big.bin").write_bytes(os.urandom(300_000))
    (data / "empty").touch()
    (data / "dir" / "nested").mkdir(parents=True)
    (data / "dir" / "nested" / "deep.txt").write_text("deep")
    (data / "dir").chmod(0o750)
    (data / "ro").mkdir()
    (data / "ro" / "inside").write_text("in a read-only dir")
    (data / os.fsdecode(b"caf\xe9")).write_text("not utf-8")
    (data / "link-rel").symlink_to("a.txt")
    (data / "link-abs").symlink_to("/etc/shadow")
    (data / "dangling").symlink_to("nowhere/at/all")
    (data / "dirlink").symlink_to("dir")
    if is_root():
        os.chown(data / "a.txt", 1234, 5678)
        os.lchown(data / "link-rel", 42, 43)
    paths = sorted(data.rglob("*"), key=lambda p: -len(p.parts))
    for i, path in enumerate(paths):
        t = 1_600_000_000_000_000_000 + i * 1_000_000_007
        os.utime(path, ns=(t, t), follow_symlinks=False)
    (data / "ro").chmod(0o500)


def _unchanged(layout: Layout, data: Path, before: dict[str, tuple[object, ...]]) -> None:
    assert tree(data) == before
    assert layout.outside_snapshot() == {"sentinel": b"untouched"}


def _refused(volume: DurableVolume, layout: Layout, code: ErrorCode) -> str:
    with pytest.raises(AteomError) as info:
        restore([volume], str(layout.restore))
    assert info.value.code is code, info.value.message
    return info.value.message


def test_a_round_trip_gives_the_same_tree(layout: Layout) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    _build(data)
    expected = tree(data)
    assert capture([volume], str(layout.checkpoint)).skipped == ()
    shutil.copy(layout.checkpoint / "durable-data.tar", layout.restore)
    (data / "ro").chmod(0o700)
    shutil.rmtree(data)
    data.mkdir()
    restore([volume], str(layout.restore))
    got = tree(data)
    kind, mode, *rest = expected["exec"]
    assert mode == 0o4755
    expected["exec"] = (kind, 0o755, *rest)  # setuid never comes back
    assert got == expected
    assert (data / "ro" / "inside").read_text() == "in a read-only dir"


def test_what_was_there_is_replaced_and_never_followed(layout: Layout) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    (data / "keep").write_text("snapshot")
    capture([volume], str(layout.checkpoint))
    shutil.copy(layout.checkpoint / "durable-data.tar", layout.restore)
    (data / "keep").write_text("changed since")
    (data / "junk" / "deeper").mkdir(parents=True)
    (data / "junk" / "escape").symlink_to(layout.outside)
    (data / "escape").symlink_to(layout.outside)
    (data / "junk.txt").write_text("junk")
    restore([volume], str(layout.restore))
    assert sorted(os.listdir(data)) == ["keep"]
    assert (data / "keep").read_text() == "snapshot"
    assert layout.outside_snapshot() == {"sentinel": b"untouched"}


def test_hard_links_come_back_as_separate_files(layout: Layout) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    (data / "one").write_bytes(b"shared")
    os.link(data / "one", data / "two")
    capture([volume], str(layout.checkpoint))
    shutil.copy(layout.checkpoint / "durable-data.tar", layout.restore)
    restore([volume], str(layout.restore))
    assert (data / "two").read_bytes() == b"shared"
    assert os.stat(data / "one").st_ino != os.stat(data / "two").st_ino


@pytest.mark.parametrize("members,why", [
    ([_member("../x", data=b"x")], "normalized"),
    ([_member("ok", data=b"ok"), _member("a/../../x", data=b"x")], "normalized"),
    ([_member("/abs", data=b"x")], "absolute"),
    ([_member("./x", data=b"x")], "normalized"),
    ([_member("link", tarfile.SYMTYPE, linkname="OUTSIDE"), _member("link/file", data=b"x")],
     "not a directory made earlier"),
    ([_member("f", data=b"x"), _member("f/x", data=b"x")], "not a directory made earlier"),
    ([_member("d/x", data=b"x")], "not a directory made earlier"),
    ([_member("ok", data=b"ok"), _member("hard", tarfile.LNKTYPE, linkname="ok")],
     "a hard link"),
    ([_member("null", tarfile.CHRTYPE)], "a character device"),
    ([_member("disk", tarfile.BLKTYPE)], "a block device"),
    ([_member("pipe", tarfile.FIFOTYPE)], "a FIFO"),
    ([_member("cont", tarfile.CONTTYPE)], "type"),
    ([_member("twice", data=b"1"), _member("twice", data=b"2")], "named twice"),
    ([_member("l", tarfile.SYMTYPE, linkname="")], "symlink target"),
])
def test_a_tar_that_breaks_a_rule_changes_nothing(layout: Layout, members: list[Member],
                                                  why: str) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    (data / "sentinel").write_text("before")
    for info, _ in members:
        if info.linkname == "OUTSIDE":
            info.linkname = str(layout.outside)
    _write_tar(layout.restore / "durable-data.tar", members)
    before = tree(data)
    message = _refused(volume, layout, ErrorCode.INVALID_ARGUMENT)
    assert message.startswith(f"{layout.restore}/durable-data.tar: member ")
    assert why in message
    _unchanged(layout, data, before)
    assert not (layout.durable / "x").exists() and not Path("/abs").exists()


def test_setuid_and_setgid_are_dropped_from_a_hostile_tar(layout: Layout) -> None:
    volume = layout.durable_volume()
    _write_tar(layout.restore / "durable-data.tar",
               [_member("suid", data=b"x", mode=0o6755), _member("d", tarfile.DIRTYPE,
                                                                 mode=0o3777)])
    restore([volume], str(layout.restore))
    assert (layout.durable / "data" / "suid").stat().st_mode & 0o7777 == 0o755
    assert (layout.durable / "data" / "d").stat().st_mode & 0o7777 == 0o1777


def test_a_header_too_big_to_read_is_refused(layout: Layout) -> None:
    volume = layout.durable_volume()
    info, data = _member("f", data=b"x")
    info.pax_headers = {"comment": "x" * 2_000_000}
    _write_tar(layout.restore / "durable-data.tar", [(info, data)])
    message = _refused(volume, layout, ErrorCode.INVALID_ARGUMENT)
    assert "not a readable tar archive" in message


def _valid_tar(tmp_path: Path) -> tuple[bytes, list[tarfile.TarInfo]]:
    path = tmp_path / "valid.tar"
    _write_tar(path, [_member("first", data=b"1" * 3000), _member("second", data=b"2" * 3000)])
    with tarfile.open(path) as tar:
        return path.read_bytes(), tar.getmembers()


@pytest.mark.parametrize("cut", ["empty", "garbage", "mid-data", "mid-header", "no-end",
                                 "half-end", "last-data"])
def test_a_corrupt_or_truncated_tar_changes_nothing(layout: Layout, tmp_path: Path,
                                                    cut: str) -> None:
    volume = layout.durable_volume()
    data = layout.durable / "data"
    (data / "sentinel").write_text("before")
    raw, (first, second) = _valid_tar(tmp_path)
    end_of_data = second.offset_data + 3072  # 3000 bytes, padded to blocks
    broken = {"empty": b"", "garbage": os.urandom(4096),
              "mid-data": raw[:first.offset_data + 1000], "mid-header": raw[:second.offset + 200],
              "no-end": raw[:end_of_data], "half-end": raw[:end_of_data + 512],
              "last-data": raw[:second.offset_data + 1000]}[cut]
    (layout.restore / "durable-data.tar").write_bytes(broken)
    before = tree(data)
    message = _refused(volume, layout, ErrorCode.INVALID_ARGUMENT)
    assert message.startswith(f"{layout.restore}/durable-data.tar: ")
    _unchanged(layout, data, before)


def test_the_whole_valid_tar_is_accepted(layout: Layout, tmp_path: Path) -> None:
    volume = layout.durable_volume()
    raw, (_, second) = _valid_tar(tmp_path)
    # The shortest whole archive: the two zero blocks right after the data.
    (layout.restore / "durable-data.tar").write_bytes(raw[:second.offset_data + 3072 + 1024])
    restore([volume], str(layout.restore))
    assert (layout.durable / "data" / "second").read_bytes() == b"2" * 3000


def test_a_missing_tar_is_a_failed_precondition_and_changes_no_volume(layout: Layout) -> None:
    a, b = layout.durable_volume("a"), layout.durable_volume("b")
    (layout.durable / "a" / "sentinel").write_text("before")
    _write_tar(layout.restore / "durable-a.tar", [_member("new", data=b"x")])
    before = tree(layout.durable / "a")
    with pytest.raises(AteomError) as info:
        restore([a, b], str(layout.restore))
    assert info.value.code is ErrorCode.FAILED_PRECONDITION
    assert info.value.message == (f"durable-dir volume 'b': {layout.restore}/durable-b.tar:"
                                  " missing (the snapshot holds no data for this volume)")
    assert tree(layout.durable / "a") == before


def test_a_tar_for_a_volume_not_named_is_ignored(layout: Layout) -> None:
    volume = layout.durable_volume()
    _write_tar(layout.restore / "durable-data.tar", [_member("f", data=b"x")])
    (layout.restore / "durable-other.tar").write_bytes(b"not even a tar")
    restore([volume], str(layout.restore))
    assert (layout.durable / "data" / "f").read_bytes() == b"x"


def test_a_symlinked_tar_is_not_followed(layout: Layout, tmp_path: Path) -> None:
    volume = layout.durable_volume()
    elsewhere = tmp_path / "elsewhere.tar"
    _write_tar(elsewhere, [_member("f", data=b"x")])
    (layout.restore / "durable-data.tar").symlink_to(elsewhere)
    message = _refused(volume, layout, ErrorCode.FAILED_PRECONDITION)
    assert "cannot be opened" in message
    assert os.listdir(layout.durable / "data") == []


def test_a_symlinked_volume_directory_is_not_restored_into(layout: Layout) -> None:
    (layout.durable / "data").symlink_to(layout.outside)
    volume = layout.durable_volume(make=False)
    _write_tar(layout.restore / "durable-data.tar", [_member("f", data=b"x")])
    _refused(volume, layout, ErrorCode.INVALID_ARGUMENT)
    assert layout.outside_snapshot() == {"sentinel": b"untouched"}


def test_extraction_never_passes_through_a_symlink_it_finds(
        layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    # Belt and braces: were the archive rules ever to let "d/x" through with "d"
    # a symlink on disk, the O_NOFOLLOW walk still refuses it.
    from ateom.volumes import extract

    volume = layout.durable_volume()
    _write_tar(layout.restore / "durable-data.tar",
               [_member("d", tarfile.DIRTYPE, mode=0o755), _member("d/x", data=b"x")])
    real_mkdir = os.mkdir

    def mkdir_then_swap(name: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(name, mode, dir_fd=dir_fd)
        os.rmdir(name, dir_fd=dir_fd)
        os.symlink(str(layout.outside), name, dir_fd=dir_fd)

    monkeypatch.setattr(extract.os, "mkdir", mkdir_then_swap)
    with pytest.raises(AteomError) as info:
        restore([volume], str(layout.restore))
    assert info.value.code is ErrorCode.INVALID_ARGUMENT and "'d'" in info.value.message
    assert layout.outside_snapshot() == {"sentinel": b"untouched"}
