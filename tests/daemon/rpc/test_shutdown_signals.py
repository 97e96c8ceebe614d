"""SIGTERM while the main thread holds a lock: the daemon's handler takes none.

A Python signal handler runs in the main thread between two bytecodes; ateom's main
thread waits in ``Event.wait``, which holds the event's lock at moments. A handler that
set the event there waited on its own thread's lock for good: the daemon logged
``signal`` and then hung until SIGKILL (seen once in CI, a 60 s stop that ended -9).
Each case runs in a child process (signals are the process's), with the lock held
exactly where the race put it, so the outcome does not depend on timing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

_CHILD = """
import os, signal, threading
from ateom.daemon.rpc.server import ShutdownSignals
stop = threading.Event()
signals = ShutdownSignals()
{install}
with stop._cond:  # held as Event.wait holds it when the handler runs
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10000):  # bytecodes: the handler runs among them, the lock held
        pass
print("noted", signals.received)
"""


def child(install: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
    """The child's outcome, or None when it had not ended within `timeout` s."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD).format(
            install=install)], capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return None


def test_the_daemons_handler_notes_the_signal_with_the_lock_held() -> None:
    done = child("signals.install()", timeout=30)
    assert done is not None, "the handler blocked with the main thread's lock held"
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"noted [{int(signal.SIGTERM)}]"


def test_a_handler_that_sets_the_event_there_hangs_which_is_why() -> None:
    # The handler ateom had: stop.set() inside it. Same lock, same place: it never returns.
    done = child("signal.signal(signal.SIGTERM, lambda *_: stop.set())", timeout=3)
    assert done is None
