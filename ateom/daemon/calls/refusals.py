"""Refusals the daemon makes, as events other parts may count (the metrics do).

A refusal is a request ateom turned down on purpose, with a reason slug:
`kind` says which decision ("placement", "mps", "checkpoint", "restore"), `reason`
why (e.g. "too_few_free", "no_cuda_checkpoint", "driver_changed"). Observers
must be cheap and must not raise; the daemon calls them on the RPC thread.
"""

from __future__ import annotations

from collections.abc import Callable

# observer(kind, reason)
REFUSAL_OBSERVERS: list[Callable[[str, str], None]] = []


def refused(kind: str, reason: str) -> None:
    for observer in REFUSAL_OBSERVERS:
        observer(kind, reason)
