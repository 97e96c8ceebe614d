"""An actor's runsc state dir goes with whatever runsc mounted in it (root for the mount)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ateom.daemon.sandbox import state_dir
from ateom.daemon.sandbox.state_dir import mounts_under, remove_state_dir

MOUNTINFO = """\
22 1 0:21 / /run rw - tmpfs tmpfs rw
68 27 0:4 net:[4026532253] /run/ateom/actors/a/null-netns rw - nsfs nsfs rw
69 27 0:4 net:[4026532254] /run/ateom/actors/a/sub/deeper rw - nsfs nsfs rw
70 27 0:4 net:[4026532255] /run/ateom/actors/ab/null-netns rw - nsfs nsfs rw
71 27 0:50 / /run/ateom/actors/a\\040b/x rw - tmpfs tmpfs rw
"""


def test_mounts_strictly_under_the_dir_deepest_first() -> None:
    assert mounts_under("/run/ateom/actors/a", MOUNTINFO) == [
        "/run/ateom/actors/a/sub/deeper", "/run/ateom/actors/a/null-netns"]
    # A sibling whose name starts the same is not under it; escapes are read.
    assert mounts_under("/run/ateom/actors/a b", MOUNTINFO) == ["/run/ateom/actors/a b/x"]
    assert mounts_under("/run/ateom/actors/a/null-netns", MOUNTINFO) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_a_mount_in_the_state_dir_is_detached_and_the_dir_removed(tmp_path: Path) -> None:
    # What runsc 20260817 leaves: a file its gofers bind an nsfs onto. A tmpfs
    # on a dir stands in for it; ignore_errors rmtree would leave both behind.
    state = tmp_path / "actors" / "a"
    (state / "null-netns").mkdir(parents=True)
    (state / "null-netns-outside").write_text("x")
    subprocess.run(["mount", "-t", "tmpfs", "stand-in", str(state / "null-netns")], check=True)
    assert mounts_under(str(state), Path("/proc/self/mountinfo").read_text())
    assert remove_state_dir(str(state)) == []
    assert not state.exists()
    assert mounts_under(str(state), Path("/proc/self/mountinfo").read_text()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_what_cannot_be_removed_is_returned(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert remove_state_dir(str(tmp_path / "absent")) == []
    # A mount that will not go (umount2 refused, as for a mount held elsewhere):
    # the dir stays, and both the mount and the dir's removal are reported.
    state = tmp_path / "a"
    (state / "null-netns").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "stand-in", str(state / "null-netns")], check=True)
    try:
        monkeypatch.setattr(state_dir._libc, "umount2", lambda *_: -1)
        left = remove_state_dir(str(state))
        assert any(i.startswith(f"{state / 'null-netns'} (umount:") for i in left), left
        assert any(str(state / "null-netns") in i and "umount" not in i for i in left), left
        assert state.exists()
    finally:
        monkeypatch.undo()
        subprocess.run(["umount", str(state / "null-netns")], check=False)
