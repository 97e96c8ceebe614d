"""An ordinary mistake on the command line gets one line and its documented exit code,
never a traceback (ateom/cli.py; docs/operations.md, "Exit codes and output"): 1 for a
failure, 2 for usage, 3 for nothing answering, 4 for an unusable input, 141 for output
closed early; with --json, the error as JSON on stdout. Errors name what the user typed."""

from __future__ import annotations

import json
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


def fatal_log_line(done: subprocess.CompletedProcess[str], says: str) -> None:
    """Once `serve` logs (JSON), a fatal error is its last JSON line, not a plain one."""
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert done.stderr == ""
    last = json.loads(done.stdout.splitlines()[-1])
    assert last["event"] == "serve_failed" and last["level"] == "error", last
    assert says in last["error"], last


def test_a_socket_under_a_regular_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    fatal_log_line(serve(tmp_path, str(tmp_path / "file" / "ateom.sock")),
                   f"{tmp_path / 'file'} is not a directory")
    # With the console log, the same one plain line on stderr.
    console = ateom("serve", "--actors-root", str(tmp_path / "actors"), "--log-format",
                    "console", "--socket", str(tmp_path / "file" / "ateom.sock"),
                    "--run-dir", str(tmp_path / "run"), "--runsc", "/bin/true")
    one_line(console, 1, f"{tmp_path / 'file'} is not a directory")


@pytest.mark.skipif(os.geteuid() != 0, reason="as root, /proc refuses the bind itself")
def test_a_socket_in_proc_is_one_line(tmp_path: Path) -> None:
    fatal_log_line(serve(tmp_path, "/proc/ateom.sock"), "cannot bind a unix socket there")


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
    assert relative.returncode == absolute.returncode == 4  # a corrupt record: bad input
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


def test_a_mistake_after_the_verb_is_told_with_the_verbs_usage() -> None:
    done = ateom("doctor", "--bogus")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: ateom doctor ")
    assert done.stderr.rstrip().endswith("ateom doctor: error: unrecognized arguments: --bogus")
    as_json = ateom("doctor", "--json", "--bogus")
    assert as_json.returncode == 2 and as_json.stderr == ""
    assert json.loads(as_json.stdout) == {
        "error": "ateom doctor: unrecognized arguments: --bogus", "exit_code": 2}


def test_a_value_that_starts_with_a_dash_gets_the_hint_to_write_it_with_equals() -> None:
    done = ateom("serve", "--actors-root", "/tmp", "--runsc-global-flag", "--network=none")
    assert done.returncode == 2
    assert ("argument --runsc-global-flag: expected one argument (a value that starts with '-'"
            " is written --runsc-global-flag=VALUE)") in done.stderr


def test_an_error_names_the_twin_or_the_flag_as_the_user_wrote_it(tmp_path: Path) -> None:
    root = str(tmp_path)
    one_line(ateom("serve", "--actors-root", root, env={"ATEOM_GPU_PLACEMENT": "bogus"}), 2,
             "ateom serve: $ATEOM_GPU_PLACEMENT='bogus': must be exclusive, shared or shared:N")
    one_line(ateom("serve", "--actors-root", root, "--gpu-placement", "bogus"), 2,
             "ateom serve: --gpu-placement 'bogus': must be exclusive, shared or shared:N")
    one_line(ateom("serve", "--actors-root", root, env={"ATEOM_MAX_ACTORS": "0"}), 2,
             "ateom serve: $ATEOM_MAX_ACTORS=0: must be >= 1")
    one_line(ateom("serve", env={"ATEOM_ACTORS_ROOT": "relative"}), 2,
             "ateom serve: $ATEOM_ACTORS_ROOT='relative': must be an absolute path")


def test_serve_help_shows_defaults_as_typed_and_what_is_required() -> None:
    done = ateom("serve", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())  # argparse wraps where it likes
    assert "must be under it [$ATEOM_ACTORS_ROOT; required without --pod-uid]" in text
    assert "[$ATEOM_CDI_SPEC_DIRS; default /etc/cdi:/var/run/cdi]" in text
    assert "[$ATEOM_RUNSC_GLOBAL_FLAGS; default none]" in text
    assert "default (" not in text and "default '" not in text


def test_version_says_ateom_its_commit_and_the_runsc_found(tmp_path: Path) -> None:
    fake = tmp_path / "runsc"
    fake.write_text("#!/bin/sh\necho 'runsc version release-20260817.0'\necho 'spec: 1.1.0'\n")
    fake.chmod(0o755)
    done = ateom("--version", env={"ATEOM_RUNSC": str(fake)})
    assert done.returncode == 0
    first, second = done.stdout.splitlines()
    assert first.startswith("ateom ") and "(commit " in first
    assert second == f"runsc: {fake} (runsc version release-20260817.0)"
    missing = ateom("--version", env={"ATEOM_RUNSC": str(tmp_path / "absent")})
    assert missing.stdout.splitlines()[1] == f"runsc: {tmp_path / 'absent'} not found"
