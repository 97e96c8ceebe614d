"""Bounded logs: each container's log rotated at a size, an actor's logs removed a
while after it stopped being hosted.

The logs live under ``<run dir>/logs/<uid>/`` (often a hostPath on the node):
runsc and the sandbox append a container's stdout/stderr to one file
(O_APPEND, held open by the sandbox), so ateom cannot stop the writes; it
bounds the file instead. A file over ``--log-max-bytes`` keeps its last half
in ``<name>.1`` (replacing the previous one) and is truncated in place: the
writers' O_APPEND continues at the new end. Bytes written between the copy
and the truncate are lost; a log is a window, not an archive. An actor's
log directory goes ``--log-retention`` seconds after its newest write once
the actor is not hosted (terminated, checkpointed, or left by a dead daemon).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Collection

import structlog

from ateom import safefs

log = structlog.get_logger("ateom.janitor")

ROTATED_SUFFIX = ".1"


def _newest_mtime(directory: str) -> float:
    newest = 0.0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
                except FileNotFoundError:
                    continue
    except FileNotFoundError:
        return 0.0
    return newest or os.lstat(directory).st_mtime


class LogJanitor:
    def __init__(self, log_root: str, *, max_bytes: int, retention: float,
                 hosted: Callable[[], Collection[str]]) -> None:
        self.log_root = log_root
        self.max_bytes = max_bytes
        self.retention = retention
        self.hosted = hosted
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def interval(self) -> float:
        """How often to sweep: often enough for the retention, at most every 10 s."""
        return min(10.0, max(self.retention / 4, 0.5))

    def sweep(self, now: float | None = None) -> None:
        """Rotate oversize logs and remove expired actors' log dirs (writes files)."""
        now = time.time() if now is None else now
        try:
            uids = sorted(os.listdir(self.log_root))
        except FileNotFoundError:
            return
        hosted = set(self.hosted())
        for uid in uids:
            directory = os.path.join(self.log_root, uid)
            if uid not in hosted and now - _newest_mtime(directory) >= self.retention:
                if uid in set(self.hosted()):  # admitted meanwhile: its logs stay
                    continue
                shutil.rmtree(directory, ignore_errors=True)
                log.info("actor_logs_removed", actor_uid=uid)
                continue
            self._rotate_oversize(directory)

    def _rotate_oversize(self, directory: str) -> None:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if entry.name.endswith(ROTATED_SUFFIX) or not entry.is_file(follow_symlinks=False):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_size > self.max_bytes:
                    self._rotate(entry.path)
            except OSError as exc:
                log.warning("log_rotate_failed", path=entry.path, error=str(exc))

    def _rotate(self, path: str) -> None:
        keep = self.max_bytes // 2
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            tail = os.pread(fd, keep, max(size - keep, 0))
            safefs.write_atomic(path + ROTATED_SUFFIX, tail, beneath=self.log_root, mode=0o640)
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)
        log.info("log_rotated", path=path, bytes=size)

    def start(self) -> None:
        """Sweep every `interval` on a daemon thread until `stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="log-janitor", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - a sweep must never end the loop
                log.exception("log_sweep_failed")

    def stop(self) -> None:
        self._stop.set()
