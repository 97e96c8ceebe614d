"""Sandboxes that ended without being asked to, as events other parts may count
(the metrics do).

`cause` says how: "on_its_own" (a running actor's sandbox exited: a crash,
the kernel's OOM killer, a kill -9 by anyone), "failed_save" (a checkpoint
that failed left it dead or not answering, and it was torn down). Observers
must be cheap and must not raise; the daemon calls them on the reaper's thread
or the RPC's.
"""

from __future__ import annotations

from collections.abc import Callable

# observer(cause)
SANDBOX_EXIT_OBSERVERS: list[Callable[[str], None]] = []


def exited(cause: str) -> None:
    for observer in SANDBOX_EXIT_OBSERVERS:
        observer(cause)
