"""benchmarks/bench_durable_capture.py's volume: the same bytes' layout on the host and
in the sandbox (one shell for both). The benchmark itself (root, gVisor's newest runsc)
is not run here; no timings are asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_durable_capture import fill_script  # noqa: E402


def test_the_volume_is_one_large_random_file_and_the_small_ones(tmp_path: Path) -> None:
    subprocess.run(["sh", "-c", fill_script(1, 5, str(tmp_path / "v"))], check=True)
    big = (tmp_path / "v" / "big").read_bytes()
    assert len(big) == 1 << 20 and big.count(0) < len(big) // 100  # random, not zeros
    small = sorted(p.name for p in (tmp_path / "v" / "small").iterdir())
    assert small == [f"f{i}" for i in range(5)]
    assert (tmp_path / "v" / "small" / "f3").read_text() == "3\n"
