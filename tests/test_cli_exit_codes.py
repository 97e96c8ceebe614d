"""An ordinary mistake on the command line gets one line and its documented exit code,
never a traceback (ateom/cli.py; docs/operations.md, "Exit codes"): 1 for a
failure, 2 for usage, 141 for output closed early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ateom.gpuinfo.record import RECORD_FILE

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "cdi_specs"


def ateom(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None,
          stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ateom", *args], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60,
                          check=False)


def one_line(done: subprocess.CompletedProcess[str], code: int, says: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if not ln.startswith("{")]
    assert says in line, line


def serve(tmp_path: Path, socket: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "actors").mkdir(exist_ok=True)
    return ateom("serve", "--actors-root", str(tmp_path / "actors"), "--socket", socket,
                 "--run-dir", str(tmp_path / "run"), "--runsc", "/bin/true")


def test_a_socket_under_a_regular_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    one_line(serve(tmp_path, str(tmp_path / "file" / "ateom.sock")), 1,
             f"{tmp_path / 'file'} is not a directory")


@pytest.mark.skipif(os.geteuid() != 0, reason="as root, /proc refuses the bind itself")
def test_a_socket_in_proc_is_one_line(tmp_path: Path) -> None:
    one_line(serve(tmp_path, "/proc/ateom.sock"), 1, "cannot bind a unix socket there")


def test_a_socket_path_too_long_for_a_unix_socket_is_usage(tmp_path: Path) -> None:
    long = str(tmp_path / ("s" * 120)) + ".sock"
    one_line(serve(tmp_path, long), 2, "a unix socket's path is at most 107")


def test_a_bad_flag_value_or_twin_is_usage(tmp_path: Path) -> None:
    one_line(ateom("serve", "--actors-root", "relative"), 2, "must be an absolute path")
    one_line(ateom("serve", "--actors-root", str(tmp_path), env={"ATEOM_MAX_ACTORS": "abc"}),
             2, "$ATEOM_MAX_ACTORS='abc': not a number")


def test_output_closed_early_is_141_and_quiet() -> None:
    reader, writer = os.pipe()
    os.close(reader)  # nobody reads: every write is EPIPE
    try:
        done = ateom("cdi", "resolve", "--spec-dir", str(SPECS / "valid"), "nvidia.com/gpu=0",
                     stdout=writer)
    finally:
        os.close(writer)
    assert done.returncode == 141 and done.stderr == "", done.stderr


def test_checkpoint_info_takes_a_relative_path(tmp_path: Path) -> None:
    (tmp_path / "ck1").mkdir()
    (tmp_path / "ck1" / RECORD_FILE).write_text("{not json")
    relative = ateom("checkpoint-info", "ck1", cwd=tmp_path)
    absolute = ateom("checkpoint-info", str(tmp_path / "ck1"))
    assert relative.returncode == absolute.returncode == 1
    assert "not beneath" not in relative.stderr
    assert relative.stderr.replace(str(tmp_path / "ck1"), "ck1") == \
        absolute.stderr.replace(str(tmp_path / "ck1"), "ck1")


def test_cdi_devices_of_a_missing_dir_or_invalid_specs_fails() -> None:
    one_line(ateom("cdi", "devices", "--spec-dir", "/nope"), 1,
             "--spec-dir /nope: no such directory")
    invalid = ateom("cdi", "devices", "--spec-dir", str(SPECS / "invalid"))
    assert invalid.returncode == 1 and "Traceback" not in invalid.stderr
    assert invalid.stderr.strip()  # each bad spec named
    valid = ateom("cdi", "devices", "--spec-dir", str(SPECS / "valid"))
    assert valid.returncode == 0 and "nvidia.com/gpu=0" in valid.stdout
