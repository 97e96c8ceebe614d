"""A sandbox's runsc calls in order (`sandbox.boot`, `sandbox.teardown`), over a recording
stand-in for `Runsc`: the order is the contract with runsc, and these tests say it
without a daemon around them."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import ateom.daemon.sandbox.teardown as td  # not `teardown`: pytest would call it
from ateom.daemon.bundles.plan import ContainerPlan, SandboxPlan
from ateom.daemon.sandbox.boot import Sandbox, boot
from ateom.daemon.sandbox.teardown import TeardownIncomplete
from ateom.process.exits import alive


@dataclass
class _Info:
    restore_needs_create: bool = False


@dataclass
class _Target:
    root: str
    info: _Info = field(default_factory=_Info)


class RecordingRunsc:
    def __init__(self, root: Path, *, listed: list[str] | None = None,
                 restore_needs_create: bool = False) -> None:
        self.target = _Target(str(root), _Info(restore_needs_create))
        self.calls: list[str] = []
        self.listed = listed
        self.log_names: dict[str, str] = {}

    def create(self, name: str, bundle: str, pid_file: str, **_: object) -> None:
        self.calls.append(f"create {name}")
        Path(pid_file).write_text("4242")

    def start(self, name: str) -> None:
        self.calls.append(f"start {name}")

    def restore(self, name: str, bundle: str, image: str, pid_file: str, **_: object) -> None:
        self.calls.append(f"restore {name}")
        Path(pid_file).write_text("4343")

    def list(self) -> list[str] | None:
        return self.listed

    def kill(self, name: str, sig: str) -> None:
        self.calls.append(f"kill {name} {sig}")

    def status(self, name: str) -> str:
        return "stopped"

    def delete(self, name: str) -> None:
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


def test_teardown_right_after_a_checkpoint_asks_no_list_and_kills_nothing(
        tmp_path: Path) -> None:
    # runsc checkpoint stopped every container: no list, no kill; each deleted, the
    # root first (the apps' deletes remove their rootfs overlays' filestore files).
    state = tmp_path / "state"
    state.mkdir()
    (state / "app.state").write_text("stopped")
    runsc = RecordingRunsc(state, listed=None)
    td.teardown(runsc, ["u__pause", "app"], grace=0, after_checkpoint=True)  # type: ignore[arg-type]
    assert runsc.calls == ["delete u__pause", "delete app"]
    assert not state.exists()


def test_after_a_checkpoint_the_stopped_sandbox_is_killed_and_gone_before_any_delete(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = subprocess.Popen(["sleep", "60"])  # stands in for the checkpointed sandbox
    monkeypatch.setattr(td, "sandbox_processes",
                        lambda root: [sandbox.pid] if alive(sandbox.pid) else [])
    runsc = RecordingRunsc(tmp_path / "state", listed=None)
    real_kill = td.kill_stopped_sandbox

    def kill(pids: list[int]) -> None:
        runsc.calls.append(f"kill {pids}")
        real_kill(pids)
    monkeypatch.setattr(td, "kill_stopped_sandbox", kill)
    try:
        td.teardown(runsc, ["u__pause", "app"], grace=0, after_checkpoint=True,  # type: ignore[arg-type]
                    on_exited=lambda: runsc.calls.append("exited"))
    finally:
        sandbox.kill()
        sandbox.wait()
    # Killed before runsc delete started (which would only kill it 20-30 ms on);
    # its GPUs go back once it is gone, before the deletes (which wait for
    # on_exited to return: the daemon lets the starts in flight go first there).
    assert runsc.calls == [f"kill {[sandbox.pid]}", "exited", "delete u__pause", "delete app"]
    assert sandbox.returncode == -9


def test_after_a_checkpoint_the_deletes_wait_until_on_exited_returns(tmp_path: Path) -> None:
    runsc = RecordingRunsc(tmp_path / "state", listed=None)
    held = threading.Event()

    def on_exited() -> None:
        runsc.calls.append("exited")
        assert held.wait(5)  # e.g. a Run booting on the GPUs just given back
        runsc.calls.append("let go")

    threading.Timer(0.2, held.set).start()
    td.teardown(runsc, ["u__pause", "app"], grace=0, after_checkpoint=True,  # type: ignore[arg-type]
                on_exited=on_exited)
    assert runsc.calls == ["exited", "let go", "delete u__pause", "delete app"]


def test_after_a_checkpoint_on_exited_waits_for_a_sandbox_slow_to_exit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The kill lands, but the kernel takes a while to tear the sandbox down (a
    # large address space, a device's release): on_exited comes when it is gone.
    sandbox = subprocess.Popen(["sleep", "60"])
    monkeypatch.setattr(td, "sandbox_processes",
                        lambda root: [sandbox.pid] if alive(sandbox.pid) else [])
    monkeypatch.setattr(td, "kill_stopped_sandbox", lambda pids: None)
    threading.Timer(0.2, sandbox.kill).start()
    runsc = RecordingRunsc(tmp_path / "state", listed=None)
    exited_after: list[bool] = []
    try:
        td.teardown(runsc, ["u__pause", "app"], grace=0, after_checkpoint=True,  # type: ignore[arg-type]
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
    monkeypatch.setattr(td, "kill_stopped_sandbox", lambda pids: None)  # stuck in the kernel
    monkeypatch.setattr(td, "EXIT_WAIT", 0.2)
    runsc = RecordingRunsc(tmp_path / "state", listed=None)
    try:
        td.teardown(runsc, ["u__pause"], grace=0, after_checkpoint=True,  # type: ignore[arg-type]
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
