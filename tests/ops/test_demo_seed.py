"""The demo's seed step (scripts/demo_seed.sh, scripts/demo.sh's last) and its by-hand twin
(docs/quickstart.md, section 8), run for real as root on gVisor's newest runsc
(`tests.support.newest_runsc`): the GPU actor gpu-1 of atespace gpu-demo, reached through
ateom's ingress with the seed's Host header over mutual TLS (the router's certificate),
answers GET /gpu with the simulated GPU's nvidia-smi output; a request in flight when it
is checkpointed gets 503 with Retry-After, and once the checkpoint answered the worker
answers 404 (it hosts the actor no more); after the restore GET /gpu is 200 again and the
count kept in the sandbox's memory went on. And where the real runsc cannot give actors
networks here (Debian's, on this kernel), the step says why and how to run it, and ends 0.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.daemon import runsc_processes
from tests.support.demo_seed import GPU, why_not
from tests.support.newest_runsc import newest_runsc
from tests.test_documented_commands import shell_blocks

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "demo_seed.sh"
PAGE = REPO / "docs" / "quickstart.md"
VENV_BIN = REPO / ".venv" / "bin"
TOOLS_PATH = f"{VENV_BIN}:{os.environ.get('PATH', '')}"
NEWEST, WHY_NOT_NEWEST = newest_runsc()
SET_UP_RUNSC = shutil.which("runsc", path=TOOLS_PATH)  # what the step takes by default
MISSING = [what for what, there in (
    ("root", os.geteuid() == 0),
    ("grpcurl", shutil.which("grpcurl", path=TOOLS_PATH) is not None),
    ("gcc", shutil.which("gcc") is not None),
    ("openssl", shutil.which("openssl") is not None),
    ("/bin/busybox", os.path.exists("/bin/busybox")),
) if not there]
needs_machine = pytest.mark.skipif(
    bool(MISSING), reason=f"the demo's seed step needs {', '.join(MISSING)}: it did not run")
needs_newest = pytest.mark.skipif(
    NEWEST is None, reason=f"the seed step did not run for real: {WHY_NOT_NEWEST}")
pytestmark = [pytest.mark.root, pytest.mark.runtime, needs_machine]


def run_step(tmp_path: Path, real_runsc: str | None) -> subprocess.CompletedProcess[str]:
    """The step as demo.sh runs it; `real_runsc` None: its default, runsc on PATH."""
    env = {k: v for k, v in os.environ.items() if k != "ATEOM_DEMO_REAL_RUNSC"}
    env["PATH"] = TOOLS_PATH
    if real_runsc is not None:
        env["ATEOM_DEMO_REAL_RUNSC"] = real_runsc
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path / "seed")], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def answer(out: str, title: str) -> list[str]:
    """The indented answer lines printed under the first line starting with `title`."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title)) + 1
    body = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        body.append(line[4:])
    return body


def nothing_left(seed: Path) -> None:
    assert not runsc_processes(str(seed / "run" / "actors")), "sandbox processes left"


@needs_newest
def test_the_seed_is_reached_through_the_ingress_across_a_checkpoint_and_restore(
        tmp_path: Path) -> None:
    assert NEWEST is not None
    done = run_step(tmp_path, str(NEWEST.path))
    out = done.stdout
    log = tmp_path / "seed" / "daemon.log"
    assert done.returncode == 0, (out[-3000:], done.stderr[-3000:],
                                  log.read_text()[-3000:] if log.exists() else "")
    assert "skipped" not in out, out
    # Through the ingress, by Host, over mTLS: 200 and nvidia-smi's lines for the GPU.
    first = answer(out, "GET /gpu")
    assert first[0] == "HTTP 200", first
    assert f"GPU 0: {GPU.name} (UUID: {GPU.uuid})" in first, first
    assert any(line.startswith(f"{GPU.name}, 580.65.06, ") for line in first), first
    assert "/dev/nvidia0" in first[-1], first  # the device node the sandbox got
    # Caught in flight by the checkpoint: 503 and Retry-After; then not hosted: 404.
    slow = answer(out, "GET /slow, cut by the checkpoint")
    assert slow[0] == "HTTP 503" and re.fullmatch(r"Retry-After: \d+", slow[1]), slow
    assert "checkpointed" in slow[2], slow
    gone = answer(out, "GET /gpu once the checkpoint answered")
    assert gone == ["HTTP 404", "no actor 'gpu-1' in atespace 'gpu-demo' here"], gone
    # Restored: 200 again, and the count went on (1, 2 before; 3 after), not restarted.
    after = answer(out[out.index("RestoreWorkload"):], "GET /gpu")
    assert after[0] == "HTTP 200" and f"GPU 0: {GPU.name} (UUID: {GPU.uuid})" in after, after
    assert re.findall(r"^GET /count -> (\d+): (\d+)", out, re.M) == [
        ("200", "1"), ("200", "2"), ("200", "3")], out
    assert "TerminateWorkload gpu-1; GET /gpu -> 404:" in out
    assert "ateom serve exited 0" in out
    nothing_left(tmp_path / "seed")


@pytest.mark.skipif(SET_UP_RUNSC is None, reason="no runsc on $PATH (scripts/bootstrap.sh)")
def test_where_the_runsc_cannot_give_actors_networks_the_step_says_why_and_ends_0(
        tmp_path: Path) -> None:
    assert SET_UP_RUNSC is not None
    why = why_not(SET_UP_RUNSC)
    if not why:
        pytest.skip(f"{SET_UP_RUNSC} can give actors networks here: the step runs for real")
    done = run_step(tmp_path, None)  # the demo's default: the set-up's runsc
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.splitlines() == [
        f"skipped: {why}",
        "to run it: ATEOM_DEMO_REAL_RUNSC=<runsc of release-20240731 or newer>"
        " bash scripts/demo.sh"], done.stdout
    assert not (tmp_path / "seed").exists()  # nothing was made


def seed_section() -> str:
    """Section 8's blocks, in order, as one script (they are `text`: test_quickstart.py,
    which runs the page on Debian's runsc, leaves them out)."""
    text = PAGE.read_text()
    section = re.split(r"\n## ", text[text.index("## 8. The seed"):])[0]
    blocks = re.findall(r"^```text\n(.*?)^```", section, re.M | re.S)
    assert blocks and not shell_blocks(section), "the section's blocks must be text only"
    return "\n".join(blocks)


@needs_newest
@pytest.mark.skipif(shutil.which("curl") is None, reason="the quick start's router is curl")
def test_the_quick_start_s_seed_section_runs_as_written(tmp_path: Path) -> None:
    assert NEWEST is not None
    with socket.socket() as s:  # a free port for the ingress (the page's default is 8443)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    seed = tmp_path / "seed"
    script = "set -euo pipefail\n" + seed_section()
    env = {**os.environ, "R": str(NEWEST.path), "G": str(seed), "PORT": str(port),
           "PATH": TOOLS_PATH}
    done = subprocess.run(["bash", "-c", script], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    log = seed / "ateom.log"
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:],
                                  log.read_text()[-3000:] if log.exists() else "")
    out = done.stdout
    assert "SERVING" in out
    assert out.count(f"GPU 0: {GPU.name} (UUID: {GPU.uuid})") == 2, out
    assert re.findall(r"^(\d+)\nHTTP 200$", out, re.M) == ["1", "2", "3"], out
    assert "no actor 'gpu-1' in atespace 'gpu-demo' here\nHTTP 404" in out, out
    nothing_left(seed)
