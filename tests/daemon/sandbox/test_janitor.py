"""Logs stay bounded: rotated at a size, removed a while after the actor left."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ateom.daemon.sandbox.janitor import LogJanitor


def _janitor(root: Path, hosted: list[str], *, max_bytes: int = 4096,
             retention: float = 60) -> LogJanitor:
    return LogJanitor(str(root), max_bytes=max_bytes, retention=retention,
                      hosted=lambda: hosted)


def test_an_oversize_log_keeps_its_tail_and_starts_over(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    log = tmp_path / "a" / "app.log"
    data = b"".join(b"line %05d\n" % i for i in range(1000))  # 11000 bytes
    log.write_bytes(data)
    (tmp_path / "a" / "small.log").write_bytes(b"x" * 100)
    # A writer holding the file O_APPEND, like the sandbox, keeps writing after.
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    _janitor(tmp_path, ["a"]).sweep()
    assert log.stat().st_size == 0
    assert (tmp_path / "a" / "app.log.1").read_bytes() == data[-2048:]
    assert (tmp_path / "a" / "small.log").stat().st_size == 100  # under the cap
    os.write(fd, b"after\n")
    os.close(fd)
    assert log.read_bytes() == b"after\n"  # appended at the new end, no hole


def test_logs_of_actors_gone_longer_than_retention_are_removed(tmp_path: Path) -> None:
    for uid in ("hosted", "recent", "old"):
        (tmp_path / uid).mkdir()
        (tmp_path / uid / "_pause.log").write_bytes(b"x")
    old = time.time() - 120
    os.utime(tmp_path / "old" / "_pause.log", (old, old))
    os.utime(tmp_path / "hosted" / "_pause.log", (old, old))
    _janitor(tmp_path, ["hosted"], retention=60).sweep()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosted", "recent"]
    _janitor(tmp_path, [], retention=60).sweep(now=time.time() + 61)
    assert list(tmp_path.iterdir()) == []


def test_a_symlink_in_the_log_dir_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"v" * 10000)
    logs = tmp_path / "logs"
    (logs / "a").mkdir(parents=True)
    (logs / "a" / "app.log").symlink_to(victim)
    _janitor(logs, ["a"]).sweep()
    assert victim.read_bytes() == b"v" * 10000
    assert not (logs / "a" / "app.log.1").exists()
