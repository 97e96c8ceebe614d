"""docs/quickstart.md, run as written: its shell blocks, in order, as one script.

The page is the test's script (read from the page, not copied), run as root against a
real `ateom serve` on the set-up's runsc (Debian's 0.0~20240729) with grpcurl, in a temp
dir: it must end 0 (every call answered, the daemon stopped cleanly), and the counter the
page runs must have gone on from memory across the checkpoint and restore.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.daemon import runsc_processes
from tests.test_documented_commands import shell_blocks

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "quickstart.md"
VENV_BIN = REPO / ".venv" / "bin"
_TOOLS_PATH = f"{VENV_BIN}:{os.environ.get('PATH', '')}"
MISSING = [what for what, there in (
    ("root", os.geteuid() == 0),
    ("runsc", shutil.which("runsc", path=_TOOLS_PATH) is not None),
    ("grpcurl", shutil.which("grpcurl", path=_TOOLS_PATH) is not None),
    ("/bin/busybox", os.path.exists("/bin/busybox")),
) if not there]


def test_the_page_has_the_whole_turn_in_order() -> None:
    script = "\n".join(shell_blocks(PAGE.read_text()))
    calls = re.findall(r"ateom\.Ateom/(\w+)", script)
    assert calls == ["RunWorkload", "GetWorkloadStats", "CheckpointWorkload",
                     "RestoreWorkload", "TerminateWorkload"]


@pytest.mark.skipif(bool(MISSING), reason=f"the quick start needs {', '.join(MISSING)} "
                    "(scripts/bootstrap.sh installs runsc and grpcurl): it did not run")
def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    q = tmp_path / "quickstart"
    script = "set -euo pipefail\n" + "\n".join(shell_blocks(PAGE.read_text()))
    env = {**os.environ, "Q": str(q), "PATH": _TOOLS_PATH}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    log = q / "ateom.log"
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:],
                                  log.read_text()[-3000:] if log.exists() else "")
    assert "SERVING" in done.stdout
    ticks = [int(n) for n in re.findall(r"^tick (\d+)$",
                                        (q / "run/logs/hello/app.log").read_text(), re.M)]
    # One count, never restarted: the restore went on from the checkpointed memory.
    assert len(ticks) >= 5 and ticks == list(range(1, len(ticks) + 1)), ticks
    assert not (q / "actors/hello/restore").exists()  # consumed by the restore
    assert not runsc_processes(str(q / "run" / "actors")), "sandbox processes left"
