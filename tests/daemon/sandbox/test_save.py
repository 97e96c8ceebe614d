"""After a failed save, the answer follows what became of the sandbox; before
a save, the image must fit.

runsc's exit code does not say whether the sandbox survived: 20260817 keeps it
when the save fails before the pause (its image file could not be created),
and lets it die a second or two later when it fails after (a full disk, runsc
killed); 0.0~20240729 kills it; and ``runsc state`` says "running" all along.
So `save.fate` waits (bounded) for the sandbox process to exit, then asks
runsc that every container runs, its pid alive. The files a failed save wrote
are removed either way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ateom.daemon.sandbox import save
from ateom.errors import AteomError, ErrorCode
from ateom.process.exits import alive as process_alive
from ateom.runsc.commands import Runsc, RunscError, RunscTimeout


class _Runsc:
    """The calls `save` makes: a checkpoint that writes part of an image and fails,
    and the state after (`state`: per container, or a RunscTimeout)."""

    def __init__(self, state: dict[str, Any] | RunscTimeout) -> None:
        self._state = state

    def checkpoint(self, name: str, image_path: str, *, flags: Sequence[str] = (),
                   timeout: float | None = None, meanwhile: object = None) -> None:
        Path(image_path, "pages.img").write_bytes(b"half")  # what a full disk leaves
        raise RunscError("checkpoint", name, 128, "", "no space left on device")

    def state(self, name: str) -> dict[str, Any]:
        if isinstance(self._state, RunscTimeout):
            raise self._state
        return self._state

    def not_running(self, name: str) -> str:
        return Runsc.not_running(self, name)  # type: ignore[arg-type]


@dataclass
class _Container:
    name: str
    runsc_id: str


class _Plan:
    root_id = "a_pause"
    containers = (_Container("_pause", "a_pause"), _Container("app", "app"))


class _Sandbox:
    def __init__(self, state: dict[str, Any] | RunscTimeout, pid: int) -> None:
        self.runsc = _Runsc(state)
        self.plan = _Plan()
        self.pid = pid


@pytest.fixture(autouse=True)
def short_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(save, "SETTLE_AFTER_FAILED_SAVE", 0.5)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _save(tmp_path: Path, sandbox: _Sandbox) -> None:
    image = tmp_path / "ck"
    image.mkdir(exist_ok=True)
    (image / "notes.txt").write_text("the node agent's, before the save")
    save.save(sandbox, str(image), "a", beneath=str(tmp_path))  # type: ignore[arg-type]


def test_a_failed_save_whose_sandbox_runs_on_is_refused_and_the_actor_kept(
        tmp_path: Path) -> None:
    sandbox = _Sandbox({"status": "running", "pid": os.getpid()}, os.getpid())
    with pytest.raises(save.SaveRefused) as err:
        _save(tmp_path, sandbox)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "keeps running" in str(err.value) and "no space left" in str(err.value)
    # What the save wrote is gone; what was there before is not.
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["notes.txt"]


def test_a_sandbox_that_exits_after_the_failed_save_is_the_actor_lost(
        tmp_path: Path) -> None:
    # The newest runsc's, a second or two after a save that failed once it had
    # paused the sandbox; runsc state still says "running" meanwhile.
    dying = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    sandbox = _Sandbox({"status": "running", "pid": dying.pid}, dying.pid)
    try:
        with pytest.raises(save.SandboxLost) as err:
            _save(tmp_path, sandbox)
    finally:
        dying.wait()
    assert err.value.code is ErrorCode.DATA_LOSS
    message = str(err.value)
    assert "was lost" in message and "exited" in message and "no space left" in message
    assert "removed" in message and "keeps running" not in message
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(("state", "says"), [
    ({"status": "running"}, "no live process"),  # no pid: runsc could not say
    ({"status": "stopped", "pid": os.getpid()}, "stopped"),
    ({"status": "paused", "pid": os.getpid()}, "paused"),  # nothing runs in it
    ({}, "unknown"),  # runsc state failed
    (RunscTimeout("state", "a_pause", "a", 3.0), "no longer answers runsc"),
])
def test_a_sandbox_not_running_after_a_failed_save_is_the_actor_lost(
        tmp_path: Path, state: dict[str, Any] | RunscTimeout, says: str) -> None:
    with pytest.raises(save.SandboxLost, match=says):
        _save(tmp_path, _Sandbox(state, os.getpid()))


def test_running_with_a_dead_pid_is_not_running(tmp_path: Path) -> None:
    # What 0.0~20240729 shows after a save that killed the sentry.
    pid = _dead_pid()
    assert not process_alive(pid) and process_alive(os.getpid())
    with pytest.raises(save.SandboxLost):
        _save(tmp_path, _Sandbox({"status": "running", "pid": pid}, pid))


def test_fate_waits_no_longer_than_its_bound_for_a_sandbox_that_runs_on(
        tmp_path: Path) -> None:
    import time

    sandbox = _Sandbox({"status": "running", "pid": os.getpid()}, os.getpid())
    started = time.monotonic()
    assert save.fate(sandbox, lambda: False, settle=0.3) == ""  # type: ignore[arg-type]
    assert 0.3 <= time.monotonic() - started < 2.0
    assert "exited" in save.fate(sandbox, lambda: True)  # type: ignore[arg-type]


def test_an_image_needs_the_actor_s_memory_its_gpu_memory_and_a_margin() -> None:
    mib = save.MiB
    assert save.image_bytes_needed(0) == save.IMAGE_MARGIN_BYTES
    assert save.image_bytes_needed(100 * mib, 28 * mib) == (
        128 * mib + save.IMAGE_MARGIN_BYTES + int(128 * mib * save.IMAGE_MARGIN_SHARE))


def test_a_checkpoint_that_cannot_fit_is_refused_naming_both_sizes_and_the_dir(
        tmp_path: Path) -> None:
    image = tmp_path / "actor" / "checkpoint"  # not made yet: measured at its parent
    free, at = save.free_bytes(str(image))
    assert at == str(tmp_path) and free > 0
    save.check_room(str(image), free // 2, "a", what="memory")  # fits
    with pytest.raises(AteomError) as err:
        save.check_room(str(image), free + 64 * save.MiB, "a", what="memory 1.0 MiB + margin")
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    message = str(err.value)
    assert str(image) in message and "keeps running" in message
    assert f"{(free + 64 * save.MiB) / save.MiB:.1f} MiB" in message
    assert f"{free / save.MiB:.1f} MiB free" in message
    assert not image.exists()  # nothing was written


def test_the_files_a_failed_save_wrote_are_removed_without_following_a_symlink(
        tmp_path: Path) -> None:
    image = tmp_path / "ck"
    image.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not ateom's")
    before = save.file_versions(str(image))
    (image / "pages.img").write_bytes(b"half")
    (image / "link").symlink_to(outside / "keep")  # written by the failed save too
    assert sorted(save.remove_written(str(image), before, beneath=str(tmp_path))) == [
        "link", "pages.img"]
    assert list(image.iterdir()) == [] and (outside / "keep").read_text() == "not ateom's"


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


def test_a_sandbox_seen_exiting_is_waited_for_until_it_is_gone(tmp_path: Path) -> None:
    # A large sandbox's exit takes the kernel a while (its memory freed, its device
    # files closed): still "alive" meanwhile, it is not judged running.
    from ateom.process.exits import alive
    from tests.support.exiting_process import main_thread_gone

    with main_thread_gone(1.0) as proc:
        sandbox = _Sandbox({"status": "running", "pid": proc.pid}, proc.pid)
        with pytest.raises(save.SandboxLost, match="exited"):
            _save(tmp_path, sandbox)
        assert not alive(proc.pid)  # its last thread gone before the answer
