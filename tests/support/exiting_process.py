"""A real process that exits the way a checkpointed sandbox does by itself: its
main thread first (a zombie leader, its cmdline read empty), its last thread
`linger` seconds later, holding the process's memory and files until then.

    with main_thread_gone(1.0, ["--root=/x"]) as proc: ...

On entry the main thread is gone and the other still runs; on exit the process
is killed and reaped.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

_CHILD = """
import ctypes, sys, threading, time
threading.Thread(target=time.sleep, args=(float(sys.argv[1]),)).start()
sys.stdin.read(1)  # until told
ctypes.CDLL(None).pthread_exit(None)  # the main thread goes; the other stays
"""


def _state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rfind(b")") + 2:][:1]


@contextmanager
def main_thread_gone(linger: float, argv_tail: Sequence[str] = (),
                     before: Callable[[], None] | None = None,
                     ) -> Iterator[subprocess.Popen[bytes]]:
    """`before`, when given, runs while the process is still whole (e.g. listing
    it), before its main thread goes."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(linger), *argv_tail],
                            stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while b"-c" not in open(f"/proc/{proc.pid}/cmdline", "rb").read():
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.01)
        if before is not None:
            before()
        assert proc.stdin is not None
        proc.stdin.write(b"x")
        proc.stdin.flush()
        while _state(proc.pid) != b"Z":
            assert time.monotonic() < deadline, "the main thread never went"
            time.sleep(0.005)
        yield proc
    finally:
        proc.kill()
        proc.wait()
