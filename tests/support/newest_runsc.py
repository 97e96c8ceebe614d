"""Where the tests find gVisor's newest runsc, when a machine has one (reads files).

No package registry carries a runsc newer than Debian's 0.0~20240729, so the
suites that run the whole GPU turn on a current gVisor release need a binary
the machine was given: ``$ATEOM_TEST_NEWEST_RUNSC``, else the project's shared
material beside the checkout (``../shared/runsc-bin/runsc``, present on the
project's own machines and in CI, never on a user's clone). ateom itself never
looks for it. `newest_runsc` says which, or why none is usable, so a suite
that cannot run says so plainly.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.runsc_real import RealRunsc, real_runsc

NEWEST_ENV = "ATEOM_TEST_NEWEST_RUNSC"
_BESIDE = Path(__file__).resolve().parents[2].parent / "shared" / "runsc-bin" / "runsc"


def newest_runsc() -> tuple[RealRunsc | None, str]:
    """(the newest runsc, "") or (None, why not)."""
    given = os.environ.get(NEWEST_ENV)
    path = Path(given) if given else _BESIDE
    if not given and not path.exists():
        return None, (f"no newest runsc: set ${NEWEST_ENV} to a gVisor release binary"
                      f" (none at {_BESIDE} either)")
    if not os.access(path, os.X_OK):
        return None, f"{path}: not an executable file"
    try:
        found = real_runsc(str(path))
    except OSError as exc:
        return None, f"{path}: {exc}"
    checkpoint = found.release.commands.get("checkpoint")
    if checkpoint is None or "cuda-checkpoint-path" not in checkpoint.flags:
        return None, (f"{path} ({found.release.tag}) has no checkpoint --cuda-checkpoint-path"
                      " (release-20260608.0 or newer needed)")
    return found, ""
