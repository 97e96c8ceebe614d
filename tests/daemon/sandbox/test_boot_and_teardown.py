"""A sandbox's runsc calls in order (`sandbox.boot`, `sandbox.teardown`), over a recording
stand-in for `Runsc`: the order is the contract with runsc, and these tests say it
without a daemon around them."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import ateom.daemon.sandbox.teardown as td  # not `teardown`: pytest would call it
from ateom.daemon.bundles.plan import ContainerPlan, SandboxPlan
from ateom.daemon.sandbox.boot import Sandbox, boot
from ateom.daemon.sandbox.teardown import TeardownIncomplete
from ateom.process import exits
from ateom.process.exits import alive
from ateom.runsc.commands import RunscTimeout
from tests.support.exiting_process import main_thread_gone


@dataclass
class _Info:
    restore_needs_create: bool = False


@dataclass
class _Target:
    root: str
    info: _Info = field(default_factory=_Info)


class RecordingRunsc:
    """`unanswered`: calls ("list", "kill TERM", "delete app"...) that time out,
    as every runsc call does on a sandbox whose processes are stopped."""

    def __init__(self, root: Path, *, listed: list[str] | None = None,
                 restore_needs_create: bool = False, unanswered: tuple[str, ...] = ()) -> None:
        self.target = _Target(str(root), _Info(restore_needs_create))
        self.calls: list[str] = []
        self.listed = listed
        self.log_names: dict[str, str] = {}
        self.unanswered = unanswered

    def _answer(self, call: str) -> None:
        if any(call == u or call.startswith(u + " ") for u in self.unanswered):
            self.calls.append(f"{call} (no answer)")
            raise RunscTimeout(call, "", "u", 3.0)

    def create(self, name: str, bundle: str, pid_file: str, **_: object) -> None:
        self.calls.append(f"create {name}")
        Path(pid_file).write_text("4242")

    def start(self, name: str) -> None:
        self.calls.append(f"start {name}")

    def restore(self, name: str, bundle: str, image: str, pid_file: str, **_: object) -> None:
        self.calls.append(f"restore {name}")
        Path(pid_file).write_text("4343")

    def list(self) -> list[str] | None:
        self._answer("list")
        return self.listed

    def kill(self, name: str, sig: str, **_: object) -> None:
        self._answer(f"kill {sig} {name}")
        self.calls.append(f"kill {name} {sig}")

    def status(self, name: str) -> str:
        return "stopped"

    def delete(self, name: str) -> None:
        self._answer(f"delete {name}")
        self.calls.append(f"delete {name}")


def _plan(name: str, *, root: bool) -> ContainerPlan:
    return ContainerPlan(name, f"u_{name}" if root else name, f"/b/{name}", b"{}", b"{}", (),
                         None, root)


CONTAINERS = [_plan("_pause", root=True), _plan("app", root=False), _plan("side", root=False)]


@pytest.mark.parametrize(("image", "needs_create", "expected"), [
    (None, False, ["create u__pause", "start u__pause", "create app", "start app",
                   "create side", "start side"]),
    ("/img", False, ["restore u__pause", "restore app", "restore side"]),
    ("/img", True, ["create u__pause", "restore u__pause", "create app", "restore app",
                    "create side", "restore side"]),
])
def test_boot_runs_the_root_first_and_reports_the_sandbox_pid(
        tmp_path: Path, image: str | None, needs_create: bool, expected: list[str]) -> None:
    runsc = RecordingRunsc(tmp_path / "state", restore_needs_create=needs_create)
    pids: list[int] = []
    boot(Sandbox(runsc, SandboxPlan(tuple(CONTAINERS))), CONTAINERS, image,  # type: ignore[arg-type]
         pids.append)
    assert runsc.calls == expected
    assert pids == [4343 if image else 4242]  # the root's, once it is up
    assert (tmp_path / "state").is_dir()


def test_teardown_stops_apps_first_deletes_the_root_first_and_leaves_nothing(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "u__pause.pid").write_text("1")
    runsc = RecordingRunsc(state, listed=["u__pause", "app", "stray"])
    td.teardown(runsc, ["u__pause", "app", "side"], grace=0.5)  # type: ignore[arg-type]
    assert runsc.calls == [
        "kill app TERM", "kill u__pause TERM",  # apps first, the root last
        "kill app KILL", "kill u__pause KILL",
        "delete u__pause", "delete app",  # the root's delete destroys the sandbox
        "kill stray KILL", "delete stray",  # listed but never asked for: gone too
    ]  # "side" was not listed: not touched
    assert not state.exists()


def _wedged(root: Path) -> subprocess.Popen[bytes]:
    """A stand-in sandbox process (its argv names the actor's --root, as runsc's do),
    stopped as a wedged sandbox's are."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             f"--root={root}"])
    while td.sandbox_processes(str(root)) != [proc.pid]:  # until it has exec'd
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGSTOP)
    return proc


@pytest.mark.parametrize("unanswered", [("list",), ("kill",), ("kill KILL",)])
def test_a_sandbox_that_does_not_answer_runsc_is_killed_by_pid_and_deleted(
        tmp_path: Path, unanswered: tuple[str, ...]) -> None:
    state = tmp_path / "state"
    state.mkdir()
    sandbox = _wedged(state)
    runsc = RecordingRunsc(state, listed=["u__pause", "app"], unanswered=unanswered)
    try:
        td.teardown(runsc, ["u__pause", "app"], grace=0.5)  # type: ignore[arg-type]
        # Killed by pid at once (SIGKILL ends a stopped process), then deleted: no
        # runsc call is made of the sandbox once one went unanswered.
        assert sandbox.wait(5) == -signal.SIGKILL
    finally:
        sandbox.kill()
        sandbox.wait()
    unanswered_at = next(i for i, c in enumerate(runsc.calls) if c.endswith("(no answer)"))
    assert runsc.calls[unanswered_at + 1:] == ["delete u__pause", "delete app"]
    assert not state.exists()


def test_a_delete_that_does_not_answer_does_not_stop_the_teardown(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    runsc = RecordingRunsc(state, listed=["u__pause", "app"], unanswered=("delete u__pause",))
    td.teardown(runsc, ["u__pause", "app"], grace=0)  # type: ignore[arg-type]
    assert runsc.calls[-2:] == ["delete u__pause (no answer)", "delete app"]
    assert not state.exists()


def test_teardown_right_after_a_checkpoint_asks_no_list_and_kills_nothing(
        tmp_path: Path) -> None:
    # runsc checkpoint stopped every container: no list, no kill; each deleted, the
    # root first (the apps' deletes remove their rootfs overlays' filestore files).
    state = tmp_path / "state"
    state.mkdir()
    (state / "app.state").write_text("stopped")
    runsc = RecordingRunsc(state, listed=None)
    td.teardown(runsc, ["u__pause", "app"], grace=0,  # type: ignore[arg-type]
                stopped=td.StoppedSandbox(str(state)))
    assert runsc.calls == ["delete u__pause", "delete app"]
    assert not state.exists()


def test_after_a_checkpoint_the_stopped_sandbox_is_killed_and_gone_before_any_delete(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = subprocess.Popen(["sleep", "60"])  # stands in for the checkpointed sandbox
    monkeypatch.setattr(td, "sandbox_processes",
                        lambda root: [sandbox.pid] if alive(sandbox.pid) else [])
    runsc = RecordingRunsc(tmp_path / "state", listed=None)
    stopped = td.StoppedSandbox(str(tmp_path / "state"))
    stopped.hold()  # as while runsc saved it
    try:
        td.teardown(runsc, ["u__pause", "app"], grace=0, stopped=stopped,  # type: ignore[arg-type]
                    on_exited=lambda: runsc.calls.append(f"exited {sandbox.poll()}"))
    finally:
        sandbox.kill()
        sandbox.wait()
    # Killed (here by the teardown: nobody had yet) before runsc delete started
    # (which would only kill it 20-30 ms on); its GPUs go back once it is gone,
    # before the deletes (which wait for on_exited to return: the daemon lets
    # the starts in flight go first there).
    assert runsc.calls == ["exited -9", "delete u__pause", "delete app"]


@pytest.fixture(params=["pidfd", "proc"])
def pidfds(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "proc":  # as under a seccomp profile that refuses pidfd_open
        def refused(pid: int, flags: int = 0) -> int:
            raise OSError(errno.ENOSYS, "pidfd_open")
        monkeypatch.setattr(exits.os, "pidfd_open", refused)
    return str(request.param)


def test_a_stopped_sandbox_held_while_it_was_saved_is_killed_and_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pidfds: str) -> None:
    sandbox, runsc_checkpoint = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["true"])
    listed = [sandbox.pid, runsc_checkpoint.pid]  # runsc checkpoint runs with --root too
    monkeypatch.setattr(td, "sandbox_processes",
                        lambda root: [p for p in listed if alive(p)])
    stopped = td.StoppedSandbox(str(tmp_path / "state"))
    try:
        stopped.hold()
        runsc_checkpoint.wait()  # it exits, and is reaped, before the kill
        stopped.kill()
        stopped.kill()  # once: a second is nothing
        assert stopped.wait_exited(5) == []
        assert sandbox.wait(5) == -9
    finally:
        stopped.close()
        sandbox.kill()
        sandbox.wait()


def test_holding_a_stopped_sandbox_never_fails_the_save_beside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(root: str) -> list[int]:
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(td, "sandbox_processes", unreadable)
    stopped = td.StoppedSandbox(str(tmp_path / "state"))
    stopped.hold()  # logs, holds nothing
    sandbox = subprocess.Popen(["sleep", "60"])
    monkeypatch.setattr(td, "sandbox_processes", lambda root: [sandbox.pid])
    try:
        stopped.kill()  # lists them itself then
        assert sandbox.wait(5) == -9
    finally:
        sandbox.kill()
        sandbox.wait()


def test_after_a_checkpoint_the_deletes_wait_until_on_exited_returns(tmp_path: Path) -> None:
    runsc = RecordingRunsc(tmp_path / "state", listed=None)
    held = threading.Event()

    def on_exited() -> None:
        runsc.calls.append("exited")
        assert held.wait(5)  # e.g. a Run booting on the GPUs just given back
        runsc.calls.append("let go")

    threading.Timer(0.2, held.set).start()
    td.teardown(runsc, ["u__pause", "app"], grace=0,  # type: ignore[arg-type]
                stopped=td.StoppedSandbox(str(tmp_path / "state")), on_exited=on_exited)
    assert runsc.calls == ["exited", "let go", "delete u__pause", "delete app"]


def test_after_a_checkpoint_on_exited_waits_for_a_sandbox_slow_to_exit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The kill lands, but the kernel takes a while to tear the sandbox down (a
    # large address space, a device's release): on_exited comes when it is gone.
    sandbox = subprocess.Popen(["sleep", "60"])
    monkeypatch.setattr(td, "sandbox_processes",
                        lambda root: [sandbox.pid] if alive(sandbox.pid) else [])
    monkeypatch.setattr(td.StoppedSandbox, "kill", lambda self: None)
    threading.Timer(0.2, sandbox.kill).start()
    runsc = RecordingRunsc(tmp_path / "state", listed=None)
    exited_after: list[bool] = []
    stopped = td.StoppedSandbox(str(tmp_path / "state"))
    stopped.hold()
    try:
        td.teardown(runsc, ["u__pause", "app"], grace=0, stopped=stopped,  # type: ignore[arg-type]
                    on_exited=lambda: exited_after.append(not alive(sandbox.pid)))
    finally:
        sandbox.wait()
    assert exited_after == [True]
    assert runsc.calls == ["delete u__pause", "delete app"]


def test_after_a_checkpoint_a_sandbox_that_does_not_exit_is_killed_and_on_exited_not_called(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = subprocess.Popen(["sleep", "60"])
    monkeypatch.setattr(td, "sandbox_processes",
                        lambda root: [sandbox.pid] if alive(sandbox.pid) else [])
    monkeypatch.setattr(td.StoppedSandbox, "kill", lambda self: None)  # stuck in the kernel
    monkeypatch.setattr(td, "EXIT_WAIT", 0.2)
    runsc = RecordingRunsc(tmp_path / "state", listed=None)
    stopped = td.StoppedSandbox(str(tmp_path / "state"))
    stopped.hold()
    try:
        td.teardown(runsc, ["u__pause"], grace=0, stopped=stopped,  # type: ignore[arg-type]
                    on_exited=lambda: runsc.calls.append("exited"))
        assert not alive(sandbox.pid)  # killed by the teardown's last step
    finally:
        sandbox.kill()
        sandbox.wait()
    assert runsc.calls == ["delete u__pause"]


def test_teardown_names_what_it_left_behind(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(td, "remove_state_dir",
                        lambda root: [f"{root}/runsc.sock: busy"])
    runsc = RecordingRunsc(tmp_path / "state", listed=[])
    with pytest.raises(TeardownIncomplete, match="runsc.sock: busy") as err:
        td.teardown(runsc, ["u__pause"], grace=0)  # type: ignore[arg-type]
    assert err.value.code.name == "INTERNAL"


def test_a_sandbox_exiting_by_itself_is_listed_through_its_threads(tmp_path: Path) -> None:
    root = str(tmp_path / "state")
    with main_thread_gone(5.0, [f"--root={root}"]) as proc:
        assert td.sandbox_processes(root) == [proc.pid]  # its own cmdline reads empty now


def test_a_sandbox_held_while_saved_is_waited_for_until_its_last_thread_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Once runsc checkpoint returns, the sandbox may be exiting by itself already:
    # its GPUs go back only when its last thread (and its device files) are gone.
    root = str(tmp_path / "state")
    monkeypatch.setattr(td.StoppedSandbox, "kill", lambda self: None)  # exits by itself
    stopped = td.StoppedSandbox(root)
    runsc = RecordingRunsc(tmp_path / "state", listed=None)
    with main_thread_gone(1.0, [f"--root={root}"], before=stopped.hold) as proc:
        td.teardown(runsc, ["u__pause"], grace=0, stopped=stopped,  # type: ignore[arg-type]
                    on_exited=lambda: runsc.calls.append(f"exited, alive={exits.alive(proc.pid)}"))
    assert runsc.calls == ["exited, alive=False", "delete u__pause"]
