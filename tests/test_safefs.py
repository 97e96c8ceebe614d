"""The one writer: atomic, beneath a trusted dir, never through a symlink."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ateom import safefs


def test_write_replaces_atomically_with_exact_mode(tmp_path: Path) -> None:
    target = tmp_path / "b" / "config.json"
    target.parent.mkdir()
    target.write_bytes(b"old")
    old_umask = os.umask(0o077)
    try:
        safefs.write_atomic(str(target), b"new", beneath=str(tmp_path), mode=0o644)
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["config.json"]  # no temp left


@pytest.mark.parametrize("durable", [False, True])
def test_planted_tmp_symlink_is_never_followed(tmp_path: Path, durable: bool) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    bundle = tmp_path / "actors" / "b"
    bundle.mkdir(parents=True)
    # The names the old writer used, and a few more: none is ever opened.
    for name in ("config.json.ateom-tmp", ".config.json.ateom-tmp"):
        (bundle / name).symlink_to(victim)
    safefs.write_atomic(str(bundle / "config.json"), b"{}", beneath=str(tmp_path / "actors"),
                        durable=durable)
    assert victim.read_bytes() == b"precious"
    assert not (bundle / "config.json").is_symlink()
    assert (bundle / "config.json").read_bytes() == b"{}"


def test_final_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").symlink_to(victim)
    safefs.write_atomic(str(tmp_path / "d" / "config.json"), b"x", beneath=str(tmp_path))
    assert victim.read_bytes() == b"precious"
    assert (tmp_path / "d" / "config.json").read_bytes() == b"x"
    assert not (tmp_path / "d" / "config.json").is_symlink()


def test_symlinked_directory_below_trusted_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(OSError) as err:
        safefs.write_atomic(str(root / "link" / "f"), b"x", beneath=str(root))
    assert err.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert list(outside.iterdir()) == []
    with pytest.raises(OSError):
        safefs.makedirs(str(root / "link" / "sub"), beneath=str(root))
    assert list(outside.iterdir()) == []


def test_trusted_root_itself_may_be_reached_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)  # like /var/run -> /run
    safefs.write_atomic(str(tmp_path / "alias" / "a" / "f"), b"x",
                        beneath=str(tmp_path / "alias"), make_parents=True)
    assert (real / "a" / "f").read_bytes() == b"x"


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "/tmp/other/../../etc/x"])
def test_path_outside_trusted_root_is_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(safefs.UnsafePathError):
        safefs.write_atomic(path if path.startswith("/") else str(tmp_path / path), b"x",
                            beneath=str(tmp_path / "root"))


def test_nul_in_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(safefs.UnsafePathError):
        safefs.write_atomic(str(tmp_path) + "/a\0b", b"x", beneath=str(tmp_path))


def test_failed_write_leaves_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")

    def broken(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "no space")

    monkeypatch.setattr(safefs.os, "write", broken)
    with pytest.raises(OSError):
        safefs.write_atomic(str(target), b"new", beneath=str(tmp_path))
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_read_refuses_symlink_and_fifo(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.mkfifo(tmp_path / "fifo")
    assert safefs.read_file(str(tmp_path / "real"), beneath=str(tmp_path))[0] == b"data"
    with pytest.raises(OSError) as err:
        safefs.read_file(str(tmp_path / "link"), beneath=str(tmp_path))
    assert err.value.errno == errno.ELOOP
    with pytest.raises(OSError) as err:
        safefs.read_file(str(tmp_path / "fifo"), beneath=str(tmp_path))
    assert err.value.errno == errno.EINVAL


def test_a_missing_trusted_root_is_made_when_parents_are(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"  # a daemon's --run-dir before anything made it
    safefs.write_atomic(str(run_dir / "cdi" / "nvidia.json"), b"{}", beneath=str(run_dir),
                        make_parents=True)
    assert (run_dir / "cdi" / "nvidia.json").read_bytes() == b"{}"
    with pytest.raises(FileNotFoundError):
        safefs.write_atomic(str(tmp_path / "other" / "f"), b"x", beneath=str(tmp_path / "other"))


def test_a_staged_write_replaces_nothing_until_committed(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        staged = safefs.stage_at(fd, "f", b"new", mode=0o600, durable=True)
        assert target.read_bytes() == b"old"
        assert (tmp_path / staged).read_bytes() == b"new" and staged.startswith(".f.")
        safefs.commit_staged_at(fd, staged, "f", durable=True)
        assert target.read_bytes() == b"new"
        assert (target.stat().st_mode & 0o777) == 0o600
        assert [p.name for p in tmp_path.iterdir()] == ["f"]
        discarded = safefs.stage_at(fd, "f", b"newer")
        safefs.discard_staged_at(fd, discarded)
        safefs.discard_staged_at(fd, discarded)  # gone already: no error
    finally:
        os.close(fd)
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_a_commit_that_fails_removes_what_it_staged(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()  # a directory where the file goes: the rename fails
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        staged = safefs.stage_at(fd, "d", b"new")
        with pytest.raises(OSError):
            safefs.commit_staged_at(fd, staged, "d")
    finally:
        os.close(fd)
    assert [p.name for p in tmp_path.iterdir()] == ["d"]
