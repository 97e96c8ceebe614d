"""process/proc_io: what a process has read, from /proc/<pid>/io."""

from __future__ import annotations

import os
from pathlib import Path

from ateom.process.proc_io import bytes_read


def test_a_process_that_reads_counts_up_and_a_gone_one_counts_nothing(tmp_path: Path) -> None:
    before = bytes_read([os.getpid()])
    data = tmp_path / "data"
    data.write_bytes(b"x" * 100_000)
    assert data.read_bytes()
    assert bytes_read([os.getpid()]) >= before + 100_000
    assert bytes_read([2**22 + 7]) == 0  # no such pid


def test_it_reads_the_rchar_line(tmp_path: Path) -> None:
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "io").write_text("rchar: 1234\nwchar: 9\nread_bytes: 0\n")
    (tmp_path / "6").mkdir()
    (tmp_path / "6" / "io").write_text("rchar: 66\n")
    assert bytes_read([5, 6, 7], proc=str(tmp_path)) == 1300
