"""Shared bits of the daemon's pure tests."""

from __future__ import annotations

import pytest

from ateom.daemon.calls.requests import ActorDirs
from ateom.errors import AteomError, ErrorCode

ROOT = "/srv/actors"
DIRS = ActorDirs(root_dir=f"{ROOT}/a", oci_bundle_dir=f"{ROOT}/a/bundles",
                 checkpoint_dir=f"{ROOT}/a/ckpt", restore_dir=f"{ROOT}/a/restore")


def code(fn, *args, **kw) -> ErrorCode:  # type: ignore[no-untyped-def]
    with pytest.raises(AteomError) as err:
        fn(*args, **kw)
    return err.value.code
