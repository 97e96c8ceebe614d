"""Keep or terminate after a failed save follows what happened to the sandbox.

runsc's exit code does not say whether the sandbox survived: 20260817 refuses
some saves and keeps it; 0.0~20240729 kills it for the same cause; and
``runsc state`` still says "running" after a save, with a dead pid. So
`save.save` asks `Runsc.running` (state *and* a live pid).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ateom.daemon.sandbox import save
from ateom.process.exits import alive as process_alive
from ateom.runsc.commands import RunscError


class _Runsc:
    """The two calls `save` makes: a checkpoint that fails, and the state after."""

    def __init__(self, state: dict[str, Any]) -> None:
        self._state = state

    def checkpoint(self, name: str, image_path: str, *, flags: Sequence[str] = (),
                   timeout: float | None = None, meanwhile: object = None) -> None:
        raise RunscError("checkpoint", name, 128, "", "failed to get nvproxy device IDs")

    def state(self, name: str) -> dict[str, Any]:
        return self._state

    def running(self, name: str) -> bool:
        from ateom.runsc.commands import Runsc
        return Runsc.running(self, name)  # type: ignore[arg-type]


class _Plan:
    root_id = "a_pause"


class _Sandbox:
    def __init__(self, state: dict[str, Any]) -> None:
        self.runsc = _Runsc(state)
        self.plan = _Plan()


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_refused_save_with_the_sandbox_alive_keeps_the_actor(tmp_path: Path) -> None:
    sandbox = _Sandbox({"status": "running", "pid": os.getpid()})
    with pytest.raises(save.SaveRefused) as err:
        save.save(sandbox, str(tmp_path), "a")  # type: ignore[arg-type]
    assert "keeps running" in str(err.value) and "device IDs" in str(err.value)


@pytest.mark.parametrize("state", [
    {"status": "running"},  # no pid: runsc could not say
    {"status": "stopped", "pid": os.getpid()},
    {},  # runsc state failed
])
def test_a_failed_save_without_a_running_sandbox_is_the_runsc_error(
        tmp_path: Path, state: dict[str, Any]) -> None:
    with pytest.raises(RunscError):
        save.save(_Sandbox(state), str(tmp_path), "a")  # type: ignore[arg-type]


def test_running_with_a_dead_pid_is_not_running(tmp_path: Path) -> None:
    # What 0.0~20240729 shows after a save that killed the sentry.
    pid = _dead_pid()
    assert not process_alive(pid) and process_alive(os.getpid())
    with pytest.raises(RunscError):
        save.save(_Sandbox({"status": "running", "pid": pid}), str(tmp_path),
                        "a")  # type: ignore[arg-type]


def test_a_consumed_image_is_set_aside_then_removed_with_any_a_crash_left(
        tmp_path: Path) -> None:
    from ateom.daemon.sandbox.save import remove_set_aside, set_aside

    image = tmp_path / "restore"
    (image / "sub").mkdir(parents=True)
    (image / "sub" / "pages.img").write_bytes(b"x" * 4096)
    stale = tmp_path / ".restore.ateom-discarded-0123456789ab"  # a crashed daemon's
    stale.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep").write_text("not ateom's")
    (tmp_path / ".restore.ateom-discarded-link").symlink_to(outside)
    assert set_aside(str(image), beneath=str(tmp_path))
    assert not image.exists()  # the node agent's restore_dir is free at once
    assert len(list(tmp_path.glob(".restore.ateom-discarded-*"))) == 3
    remove_set_aside(str(image), beneath=str(tmp_path))
    # Both images gone; the symlink not followed: what it points at is untouched.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".restore.ateom-discarded-link", "elsewhere"]
    assert (outside / "keep").read_text() == "not ateom's"
    assert not set_aside(str(image), beneath=str(tmp_path))  # nothing there: removed in place
    # A parent swapped for a symlink out of the actor's dirs is not walked through.
    actor = tmp_path / "actor"
    actor.mkdir()
    (outside / "restore").mkdir()
    (outside / ".restore.ateom-discarded-feedfacecafe").mkdir()
    (actor / "via").symlink_to(outside)
    assert not set_aside(str(actor / "via" / "restore"), beneath=str(tmp_path))
    remove_set_aside(str(actor / "via" / "restore"), beneath=str(tmp_path))
    assert sorted(p.name for p in outside.iterdir()) == [
        ".restore.ateom-discarded-feedfacecafe", "keep", "restore"]
