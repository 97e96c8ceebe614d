"""Ready-made symlink inodes, hard-linked into rootfs instead of made anew.

Making a symlink allocates an inode: cheap on a quiet disk, but slow while
the disk's journal is busy (other writers' fsyncs, block frees and discards),
and then most of an injection for a GPU's driver libraries. A hard link to
an existing symlink inode (``linkat`` without AT_SYMLINK_FOLLOW) is a
directory entry only (docs/performance.md, "Figures behind the code"). A
`LinkPool` keeps one symlink per target (``libcuda.so.580.65.06 ->
libcuda.so.580.65.06``) in a private directory and links it in under the
SONAME; the rootfs sees an ordinary symlink.

Trade-off, why it is opt-in: every bundle's link shares the pool's inode, so
``chown -h`` / ``touch -h`` on it inside one sandbox changes the owner and
times the others see (the target text cannot change: a symlink's content is
immutable). Pass a pool only where bundles belong to one trust domain or that
metadata does not matter. The pool must be on the rootfs's filesystem; where
it is not (EXDEV), a plain symlink is made instead.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid


class LinkPool:
    """A directory (made 0700 if missing) of symlinks to hard-link from."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.directory = directory
        self._fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.linked = 0
        self.fallbacks = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _entry(self, target: str, *, fresh: bool = False) -> None:
        """Make sure the pool holds ``target -> target``; `fresh` forces a new inode."""
        if not fresh:
            try:
                st = os.stat(target, dir_fd=self._fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode) and os.readlink(target, dir_fd=self._fd) == target:
                    return
            except FileNotFoundError:
                try:
                    os.symlink(target, target, dir_fd=self._fd)
                    return
                except FileExistsError:
                    return self._entry(target)  # another injector made it: check it
        # Wrong, or full (EMLINK): replace by rename, so the name never dangles.
        tmp = f".{target}.{uuid.uuid4().hex[:8]}"
        os.symlink(target, tmp, dir_fd=self._fd)
        os.rename(tmp, target, src_dir_fd=self._fd, dst_dir_fd=self._fd)

    def link(self, target: str, dir_fd: int, name: str) -> bool:
        """Hard-link the pool's symlink to `target` as `name` in `dir_fd`.

        False when the pool is on another filesystem (the caller makes a plain
        symlink). `target` and `name` must be bare file names; FileExistsError
        propagates when `name` exists.
        """
        self._entry(target)
        for attempt in range(2):
            try:
                os.link(target, name, src_dir_fd=self._fd, dst_dir_fd=dir_fd,
                        follow_symlinks=False)
                self.linked += 1
                return True
            except OSError as e:
                if e.errno == errno.EXDEV:
                    self.fallbacks += 1
                    return False
                if e.errno == errno.EMLINK and attempt == 0:
                    self._entry(target, fresh=True)  # inode at its link limit
                    continue
                raise
        return False
