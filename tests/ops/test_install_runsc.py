"""deploy/image/install-runsc.sh: which runsc the worker image gets, and what it refuses.

Run here on a build context made in tmp_path with the real runsc the set-up installs
(Debian's 0.0~20240729 or newer on $PATH) as the release binary. Debian's package
branch (no binary given) needs apt inside the image build: `test_worker_image.py`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "image" / "install-runsc.sh"
RUNSC = shutil.which("runsc")
pytestmark = pytest.mark.skipif(RUNSC is None, reason="no runsc on $PATH "
                                "(scripts/bootstrap.sh installs one)")


def sha512(path: Path) -> str:
    return hashlib.sha512(path.read_bytes()).hexdigest()


def install(context: Path, out: Path, binary: str = "", sha: str = ""
            ) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "RUNSC_BINARY": binary,
           "RUNSC_SHA512": sha}
    return subprocess.run(["sh", str(SCRIPT), str(context), str(out)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def context(tmp_path: Path) -> Path:
    ctx = tmp_path / "context"
    (ctx / "deploy").mkdir(parents=True)
    assert RUNSC
    shutil.copy(RUNSC, ctx / "deploy" / "runsc-release")
    return ctx


def source_of(out: Path) -> dict[str, str]:
    lines = (out / "runsc.source").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines)


def test_a_context_binary_is_taken_checked_and_described(context: Path, tmp_path: Path) -> None:
    binary = context / "deploy" / "runsc-release"
    done = install(context, tmp_path / "out", "deploy/runsc-release", sha512(binary))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert (out / "runsc").read_bytes() == binary.read_bytes()
    assert (out / "runsc").stat().st_mode & 0o777 == 0o755
    got = source_of(out)
    assert got["source"] == "build-context file deploy/runsc-release"
    assert got["sha512"] == sha512(binary)
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             check=True).stdout.splitlines()[0]
    assert got["version"] == version
    assert got["nvproxy"].startswith("drivers ")  # 0.0~20240729 and newer have nvproxy
    # The build log says the same.
    assert done.stdout.splitlines() == [f"runsc for the image: {k}: {v}" for k, v in got.items()]


def test_a_wrong_sha512_stops_the_build_naming_both(context: Path, tmp_path: Path) -> None:
    done = install(context, tmp_path / "out", "deploy/runsc-release", "0" * 128)
    assert done.returncode == 1
    assert sha512(context / "deploy" / "runsc-release") in done.stderr
    assert "0" * 128 in done.stderr
    assert not (tmp_path / "out" / "runsc.source").exists()


def test_deploy_runsc_is_taken_without_arguments_and_its_sha512_file_checked(
        context: Path, tmp_path: Path) -> None:
    (context / "deploy" / "runsc-release").rename(context / "deploy" / "runsc")
    (context / "deploy" / "runsc.sha512").write_text("f" * 128 + "  runsc\n")
    refused = install(context, tmp_path / "out")
    assert refused.returncode == 1 and "not " + "f" * 128 in refused.stderr
    (context / "deploy" / "runsc.sha512").write_text(
        sha512(context / "deploy" / "runsc") + "  runsc\n")
    done = install(context, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert source_of(tmp_path / "out")["source"] == "build-context file deploy/runsc"


@pytest.mark.parametrize(("binary", "reason"), [
    ("https://example.invalid/runsc", "give its RUNSC_SHA512 too"),
    ("http://example.invalid/runsc", "only https URLs"),
    ("/usr/bin/runsc", "relative to the build context"),
    ("deploy/../../runsc", "relative to the build context"),
    ("./deploy/runsc-release", "relative to the build context"),
    ("deploy/missing", "no such file in the build context"),
])
def test_refused_sources_say_why(context: Path, tmp_path: Path, binary: str,
                                 reason: str) -> None:
    done = install(context, tmp_path / "out", binary)
    assert done.returncode == 1
    assert f"install-runsc: RUNSC_BINARY={binary}" in done.stderr and reason in done.stderr
    assert not (tmp_path / "out" / "runsc").exists()


def test_a_runsc_without_nvproxy_is_described_as_such(context: Path, tmp_path: Path) -> None:
    # A stand-in for a runsc build without nvproxy: what the image would say of it.
    fake = context / "deploy" / "runsc-old"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'runsc version 0.0~20221219.0'"
                    " && exit 0\necho 'unknown command' >&2; exit 2\n")
    done = install(context, tmp_path / "out", "deploy/runsc-old")
    assert done.returncode == 0, done.stderr
    got = source_of(tmp_path / "out")
    assert got["version"] == "runsc version 0.0~20221219.0"
    assert got["nvproxy"] == "none: this runsc cannot run GPU actors"
