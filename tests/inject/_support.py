"""Helpers shared by the injector's tests."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


def tree_snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under `root` (not following symlinks): mode, size, link target."""
    snap: dict[str, tuple[int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            target = os.readlink(p) if stat.S_ISLNK(st.st_mode) else ""
            snap[os.path.relpath(p, root)] = (st.st_mode, st.st_size, target)
    return snap
