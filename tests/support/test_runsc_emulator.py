"""The emulated runsc executable: outputs per release, Debian byte-identity, stripping
and records, and real sandboxes through the real runsc behind it (root + runsc)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import build_busybox_bundle, read_config, write_config
from tests.support.conftest import (
    DEBIAN_2022,
    GLOBAL,
    REAL,
    REAL_RUNSC,
    Runsc,
    needs_debian_2022,
    needs_runsc,
    needs_runsc_binary,
)
from tests.support.cuda_checkpoint_stub import CudaCheckpointStub, install_cuda_checkpoint_stub
from tests.support.runsc_emu import RELEASES, EmulatedRunsc, install_runsc
from tests.support.runsc_emu_gpu import sim_gpus
from tests.support.runsc_emu_state import IMAGE_NOTE
from tests.support.runsc_release import load_release, release_file, short_usage

LIFECYCLE = ("20221219", "20240930", "20260608", "20260817")
# A driver each release supports (20240930 predates R580).
DRIVER = {"20240930": "550.90.07"}
COUNTER = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.1; done"


def emulate(tmp: Path, release: str, **kw: object) -> EmulatedRunsc:
    kw.setdefault("driver_version", DRIVER.get(release, "580.65.06"))
    kw.setdefault("real_runsc", REAL_RUNSC or "runsc")
    return install_runsc(release, tmp / f"bin-{release}", **kw)  # type: ignore[arg-type]


def run(emu: EmulatedRunsc, *argv: str) -> subprocess.CompletedProcess[str]:
    # A pipe for stdin, never /dev/null: runsc chowns the stdio of some commands.
    return subprocess.run([str(emu.path), *argv], capture_output=True, text=True, input="",
                          timeout=60, check=False)


@pytest.mark.parametrize("name", RELEASES)
def test_outputs_are_the_release_files(tmp_path: Path, name: str) -> None:
    emu = emulate(tmp_path, name)
    data = json.loads(release_file(name).read_text())
    version = run(emu, "--version")
    fmt = data["output_formats"]["version"]
    assert (version.returncode, version.stderr) == (0, "")
    assert version.stdout == (fmt["example_debian_bookworm"] or fmt["example_official_build"])
    flags = run(emu, "flags")
    assert (flags.returncode, flags.stdout, flags.stderr) == (0, "", data["runsc_flags_output"])
    helped = run(emu, "help", "restore")
    cmd = data["commands"]["restore"]
    assert helped.stdout == cmd.get("help_output_via_runsc_help", cmd["help_output"])
    bad = run(emu, "--no-such-flag", "list")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == "flag provided but not defined: -no-such-flag\n" + short_usage(
        load_release(name))
    drivers = run(emu, "nvproxy", "list-supported-drivers")
    if data["gpu_launcher_features"]["nvproxy_list_supported_drivers_cmd"]:
        assert drivers.stdout.split() == data["nvproxy"]["driver_versions"]["supported"]
    else:
        assert drivers.returncode == 128 and drivers.stdout == ""
    calls = emu.calls()
    assert [c.argv[0] for c in calls] == ["--version", "flags", "help", "--no-such-flag",
                                          "nvproxy"]
    assert all(c.ran == () and c.notes == ("answered from the release file",) for c in calls)
    assert [c.exit_code for c in calls][:4] == [0, 0, 0, 2]


DEBIAN_ARGV = [
    ["--version"], ["-version"], ["--version=false"], ["-h"], ["-help"], ["help"], ["flags"],
    ["--nvproxy", "list"], ["--nvproxy-driver-version=535.104.05", "list"], ["--root"],
    ["-debug=maybe", "list"], ["bogus"], [], ["nvproxy", "list-supported-drivers"],
    ["checkpoint", "--cuda-checkpoint-path=/x", "c1"], ["restore", "--background", "c1"],
    ["help", "bogus"], ["help", "state"], ["help", "spec"],
    *[[verb, c] for c in ("create", "start", "run", "checkpoint", "restore", "delete", "kill",
                          "events", "state", "list", "wait", "ps", "exec")
      for verb in ("help",)],
    *[[c, "-help"] for c in ("create", "checkpoint", "restore", "list", "exec")],
]


@needs_debian_2022
def test_debian_release_is_byte_identical_to_the_real_binary(tmp_path: Path) -> None:
    emu = emulate(tmp_path, "20221219", real_runsc=DEBIAN_2022)
    for argv in DEBIAN_ARGV:
        real = subprocess.run([DEBIAN_2022 or "runsc", *argv], capture_output=True, text=True,
                              input="", timeout=60, check=False)
        got = run(emu, *argv)
        assert (got.stdout, got.stderr, got.returncode) == (
            real.stdout, real.stderr, real.returncode), argv


@needs_runsc_binary
def test_flags_the_real_build_lacks_are_stripped_and_recorded(tmp_path: Path) -> None:
    assert REAL is not None
    emu = emulate(tmp_path, "20260817")
    root = tmp_path / "state"
    root.mkdir()
    given = ["--nvproxy", "--nvproxy-driver-version=580.65.06", "--root", str(root),
             "-allow-connected-on-save", "-restore-spec-validation=ignore"]
    done = run(emu, *given, "list", "-quiet")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    [call] = emu.calls()
    assert call.command == "list" and call.has_flag("nvproxy")
    assert call.has_flag("nvproxy-driver-version") and not call.has_flag("root-x")
    # Computed from the real build's own `runsc flags`, whichever build it is.
    names = ("nvproxy", "nvproxy-driver-version", "allow-connected-on-save",
             "restore-spec-validation")
    assert call.stripped == tuple(n for n in names if n not in REAL.release.flags)
    assert "restore-spec-validation" in call.stripped or REAL.release.date >= 20260525
    kept = [a for a in given if a.lstrip("-").split("=")[0] not in call.stripped]
    assert call.ran == ((REAL_RUNSC, *kept, "list", "-quiet"),)
    refused = run(emu, "tar", "rootfs-upper", "c1")
    assert refused.returncode == 128 and refused.stderr.startswith(
        "runsc emulator (tests.support): release-20260817.0's 'tar' command is not emulated")


# --- real sandboxes -----------------------------------------------------------

def _gpu_bundle(path: Path, args: list[str], stub: CudaCheckpointStub | None = None,
                sandbox: str | None = None) -> Path:
    """A busybox bundle given a GPU the way ateom injects one (/dev/nvidiactl in devices)."""
    build_busybox_bundle(path, args, mounts=[stub.mount()] if stub else [])
    cfg = read_config(path)
    # fileMode as ateom writes it: runsc 0.0~20240729 dereferences it (a nil
    # pointer panic in createDeviceFile without it).
    cfg["linux"]["devices"] = [{"path": "/dev/nvidiactl", "type": "c", "major": 195,
                                "minor": 255, "fileMode": 0o666}]
    if sandbox:
        cfg["annotations"] = {"io.kubernetes.cri.container-type": "container",
                              "io.kubernetes.cri.sandbox-id": sandbox}
    write_config(path, cfg)
    return path


def _ticks(text: str) -> list[int]:
    return [int(line.split()[1]) for line in text.splitlines() if line.startswith("tick ")]


def _wait_ticks(log: Path, more_than: int, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ticks = _ticks(log.read_text()) if log.exists() else []
        if ticks and ticks[-1] > more_than:
            return ticks
        time.sleep(0.05)
    raise AssertionError(f"no tick above {more_than} in {log}")


def _to_log(r: Runsc, log: Path, *argv: str) -> int:
    """The emulated runsc with `argv`, its output (and the container's) appended to `log`.

    stdin is an empty file, never /dev/null: runsc chowns the stdio it hands
    to a sandbox to the sandbox user.
    """
    stdin = r.base / "empty-stdin"
    stdin.write_bytes(b"")
    with open(stdin, "rb") as fin, open(log, "ab") as out:
        return subprocess.run([str(r.emu.path), "--root", str(r.root), *GLOBAL, *argv],
                              stdin=fin, stdout=out, stderr=out, timeout=120,
                              check=False).returncode


def _start(r: Runsc, bundle: Path, cid: str, *global_flags: str) -> Path:
    """create + start, the container's stdio in a log file; returns the log."""
    log = r.base / f"{cid}.log"
    code = _to_log(r, log, *global_flags, "create", "--bundle", str(bundle), cid)
    assert code == 0, log.read_text()
    assert r("start", cid).code == 0
    return log


@needs_runsc
@pytest.mark.parametrize("name", LIFECYCLE)
def test_checkpoint_and_restore_through_debian(tmp_path: Path, runsc_factory: list[Runsc],
                                               name: str) -> None:
    r = Runsc(emulate(tmp_path, name), tmp_path / "run")
    runsc_factory.append(r)
    bundle = build_busybox_bundle(tmp_path / "counter", ["sh", "-c", COUNTER])
    log = _start(r, bundle, "c1")
    _wait_ticks(log, 3)
    image = tmp_path / "image"
    release = load_release(name)
    extra = ["--compression=none"] if "compression" in release.commands["checkpoint"].flags else []
    done = r("checkpoint", "--image-path", str(image), *extra, "c1")
    assert done.code == 0, done.err
    before = _ticks(log.read_text())[-1]
    names = sorted(p.name for p in image.iterdir())
    assert "checkpoint.img" in names and IMAGE_NOTE in names, names
    assert r("delete", "-force", "c1").code == 0
    background = ["-background"] if release.feature("restore_background_flag") else []
    code = _to_log(r, log, "restore", "--bundle", str(bundle), "--image-path", str(image),
                   *background, "-detach", "c1")
    assert code == 0, log.read_text()
    after = _wait_ticks(log, before + 3)
    resumed = after[after.index(before) + 1:]
    assert resumed[0] == before + 1  # counted on from memory, not restarted
    calls = {c.command: c for c in r.emu.calls()}
    assert REAL is not None
    real = REAL.release.commands
    assert calls["checkpoint"].stripped == tuple(
        f"checkpoint:{n}" for n in (f.lstrip("-").split("=")[0] for f in extra)
        if n not in real["checkpoint"].flags)
    assert calls["restore"].stripped == tuple(
        f"restore:{f.lstrip('-')}" for f in background
        if f.lstrip("-") not in real["restore"].flags)
    assert calls["restore"].nvproxy is False


def _gpu_sandbox(tmp: Path, runsc_factory: list[Runsc], name: str, **kw: object
                 ) -> tuple[Runsc, CudaCheckpointStub, Path]:
    r = Runsc(emulate(tmp, name, gpus=sim_gpus(2), **kw), tmp / "run")
    runsc_factory.append(r)
    stub = install_cuda_checkpoint_stub(tmp / "cuda-ckpt")
    bundle = _gpu_bundle(tmp / "gpu", ["sleep", "1000"], stub)
    _start(r, bundle, "g1", "--nvproxy")
    return r, stub, bundle


def _restore(r: Runsc, bundle: Path, image: Path, cid: str = "g1"):  # type: ignore[no-untyped-def]
    return r("--nvproxy", "restore", "--bundle", str(bundle), "--image-path", str(image),
             "-detach", cid)


def _pid_in_sandbox(r: Runsc, cid: str) -> str:
    return r.real("ps", "-format", "json", cid).out.strip().strip("[]").split(",")[0]


@needs_runsc
@pytest.mark.parametrize("name", ["20260608", "20260817"])
def test_cuda_checkpoint_runs_inside_the_sandbox(tmp_path: Path, runsc_factory: list[Runsc],
                                                 name: str) -> None:
    r, stub, bundle = _gpu_sandbox(tmp_path, runsc_factory, name)
    pid = _pid_in_sandbox(r, "g1")
    image = tmp_path / "image"
    sequential = ["--cuda-checkpoint-sequential"] if name >= "20260706" else []
    done = r("checkpoint", "--image-path", str(image), "--cuda-checkpoint-path", stub.path,
             *sequential, "g1")
    assert done.code == 0, done.err
    # R580: the sentry asks --get-state first, then toggles (state_cuda.go's argv).
    assert stub.calls() == [(stub.path, "--get-state", "--pid", pid),
                            (stub.path, "--toggle", "--pid", pid)]
    [ckpt] = [c for c in r.emu.calls() if c.command == "checkpoint"]
    execs = [run[run.index("exec"):] for run in ckpt.ran if "exec" in run]
    assert execs == [("exec", "g1", stub.path, "--get-state", "--pid", pid),
                     ("exec", "g1", stub.path, "--toggle", "--pid", pid)]
    assert ckpt.ran[-1][-4:] == ("checkpoint", "--image-path", str(image), "g1")
    assert "checkpoint:cuda-checkpoint-path" in ckpt.stripped
    note = json.loads((image / IMAGE_NOTE).read_text())
    assert note["cuda_procs"] == [["g1", int(pid)]] and note["driver_version"] == "580.65.06"
    assert note["gpus"] == []  # toggled: no device file open, nothing to remap
    r("delete", "-force", "g1")
    stub.clear_calls()
    restored = _restore(r, bundle, image)
    assert restored.code == 0, restored.err
    # Restore needs no CUDA flag: the path was saved in the image; toggled back to running.
    assert stub.calls() == [(stub.path, "--toggle", "--pid", pid)]
    assert r.status("g1") == "running"


@needs_runsc
def test_a_failed_toggle_fails_the_checkpoint_undoes_the_others_and_keeps_running(
        tmp_path: Path, runsc_factory: list[Runsc]) -> None:
    # R550-R554: no --get-state; every GPU process is toggled, in parallel.
    r = Runsc(emulate(tmp_path, "20260817", driver_version="550.90.12"), tmp_path / "run")
    runsc_factory.append(r)
    stub = install_cuda_checkpoint_stub(tmp_path / "cuda-ckpt")
    bundle = _gpu_bundle(tmp_path / "gpu", ["sh", "-c", "sleep 1000 & exec sleep 1000"], stub)
    _start(r, bundle, "g1", "--nvproxy")
    deadline = time.monotonic() + 10
    while len(pids := r.real("ps", "-format", "json", "g1").out.strip("[]\n").split(",")) < 2:
        assert time.monotonic() < deadline, pids
        time.sleep(0.05)
    first, second = pids
    stub.set_mode("fail", f"--toggle --pid {second}")
    image = tmp_path / "image"
    done = r("checkpoint", "--image-path", str(image), "--cuda-checkpoint-path", stub.path, "g1")
    said = ("cuda-checkpoint stand-in: failing as its mode file says\\n")
    assert done.code == 128
    assert done.err == (
        f'checkpoint failed: checkpointing container "g1": "cuda-checkpoint toggle for PID '
        f'{second} in container \\"g1\\"" failed with exit status 1; output: "{said}"\n')
    toggles = [c[-1] for c in stub.calls()]
    # Both toggled, then the one that succeeded toggled back (undo); never --get-state.
    assert sorted(toggles[:2]) == sorted([first, second]) and toggles[2:] == [first]
    assert all(c[1] == "--toggle" for c in stub.calls())
    assert r.status("g1") == "running" and not (image / "checkpoint.img").exists()


@needs_runsc
def test_get_state_failure_skips_the_process(tmp_path: Path, runsc_factory: list[Runsc]) -> None:
    r, stub, _ = _gpu_sandbox(tmp_path, runsc_factory, "20260817")
    pid = _pid_in_sandbox(r, "g1")
    stub.set_mode("fail", "--get-state")
    image = tmp_path / "image"
    done = r("checkpoint", "--image-path", str(image), "--cuda-checkpoint-path", stub.path, "g1")
    assert done.code == 0, done.err
    assert stub.calls() == [(stub.path, "--get-state", "--pid", pid)]
    [ckpt] = [c for c in r.emu.calls() if c.command == "checkpoint"]
    assert any(n.startswith('warning: "cuda-checkpoint get-state for PID') and
               "skipping CUDA checkpoint for PID" in n for n in ckpt.notes)
    # Not toggled, so a live GPU client: 20260706+ saves it and records the GPUs.
    note = json.loads((image / IMAGE_NOTE).read_text())
    assert [g["uuid"] for g in note["gpus"]] == [g.uuid for g in sim_gpus(2)]


@needs_runsc
@pytest.mark.parametrize("name", ["20240930", "20260608", "20260817"])
def test_live_gpu_clients_panic_the_save_where_the_release_does(
        tmp_path: Path, runsc_factory: list[Runsc], name: str) -> None:
    r, _, _ = _gpu_sandbox(tmp_path, runsc_factory, name)
    image = tmp_path / "image"
    done = r("checkpoint", "--image-path", str(image), "g1")
    if name == "20260817":
        assert done.code == 0, done.err
        assert (image / "checkpoint.img").is_file()
        return
    assert done.code == 128
    assert done.err == ('checkpoint failed: checkpointing container "g1": '
                        "can't save with live nvproxy clients\n")
    # A failed save kills the sandbox (no --leave-running); nothing was written.
    assert r.status("g1") == "stopped" and not (image / "checkpoint.img").exists()


@needs_runsc
def test_restore_refuses_a_changed_driver_and_too_few_gpus(
        tmp_path: Path, runsc_factory: list[Runsc]) -> None:
    r, _, bundle = _gpu_sandbox(tmp_path, runsc_factory, "20260817")
    image = tmp_path / "image"
    assert r("checkpoint", "--image-path", str(image), "g1").code == 0
    r("delete", "-force", "g1")
    r.emu.set_driver_version("590.48.01")
    done = _restore(r, bundle, image)
    assert done.code == 128
    assert done.err == ("starting container: nvidia driver version changed during restore: "
                        "was 580.65.06, now 590.48.01\n")
    assert r.real("list", "-quiet").out.split() == []
    r.emu.set_driver_version("580.65.06")
    r.emu.set_gpus(sim_gpus(1))
    done = _restore(r, bundle, image)
    assert done.code == 128
    assert done.err == "starting container: can't remap 2 saved devices to 1 restored devices\n"
    r.emu.set_gpus(sim_gpus(4))
    done = _restore(r, bundle, image)
    assert done.code == 0, done.err
    assert r.status("g1") == "running"
    restores = [c for c in r.emu.calls() if c.command == "restore"]
    assert [c.exit_code for c in restores] == [128, 128, 0]
    assert all(c.nvproxy for c in restores) and len(restores[-1].ran) == 1


def _two_container_sandbox(r: Runsc, tmp: Path) -> tuple[Path, Path, Path]:
    """A root `sb` (pause) and a GPU sub-container `app` counting, checkpointed, deleted."""
    pause = build_busybox_bundle(tmp / "pause", ["sleep", "1000"])
    app = _gpu_bundle(tmp / "app", ["sh", "-c", COUNTER], sandbox="sb")
    _start(r, pause, "sb")
    # A sub-container's process gets the stdio of `runsc start` (its create only
    # starts a gofer).
    log = r.base / "app.log"
    assert _to_log(r, log, "create", "--bundle", str(app), "app") == 0, log.read_text()
    assert _to_log(r, log, "start", "app") == 0, log.read_text()
    _wait_ticks(log, 3)
    image = tmp / "image"
    assert r("checkpoint", "--image-path", str(image), "sb").code == 0
    assert json.loads((image / IMAGE_NOTE).read_text())["containers"] == ["sb", "app"]
    for cid in ("sb", "app"):  # the root first: a sub-container's delete may then fail
        r("delete", "-force", cid)
    return pause, app, log


@needs_runsc
def test_multi_container_restore_runs_on_the_real_build(
        tmp_path: Path, runsc_factory: list[Runsc]) -> None:
    assert REAL is not None and REAL.restores_subcontainers, REAL_RUNSC
    r = Runsc(emulate(tmp_path, "20240930"), tmp_path / "run")
    runsc_factory.append(r)
    pause, app, log = _two_container_sandbox(r, tmp_path)
    before = _ticks(log.read_text())[-1]
    image = tmp_path / "image"
    root = r("restore", "--bundle", str(pause), "--image-path", str(image), "-background",
             "-detach", "sb")
    assert (root.code, root.err) == (0, "")
    code = _to_log(r, log, "restore", "--bundle", str(app), "--image-path", str(image),
                   "-background", "-detach", "app")
    assert code == 0, log.read_text()[-2000:]
    after = _wait_ticks(log, before + 3)
    assert after[after.index(before) + 1] == before + 1  # the app counts on from memory
    restores = [c for c in r.emu.calls() if c.command == "restore"]
    assert [(c.container, c.exit_code, len(c.ran)) for c in restores] == [("sb", 0, 1),
                                                                          ("app", 0, 1)]
    # Without the root first, a sub-container restore is refused outright.
    for cid in ("sb", "app"):
        r("delete", "-force", cid)
    again = r("restore", "--bundle", str(app), "--image-path", str(image), "-detach", "app")
    assert again.code == 128 and "restore the sandbox's root container first" in again.err


@needs_runsc
@needs_debian_2022
def test_multi_container_restore_is_refused_where_the_real_build_restores_only_a_root(
        tmp_path: Path, runsc_factory: list[Runsc]) -> None:
    r = Runsc(emulate(tmp_path, "20240930", real_runsc=DEBIAN_2022), tmp_path / "run")
    runsc_factory.append(r)
    pause, app, _ = _two_container_sandbox(r, tmp_path)
    image = tmp_path / "image"
    root = r("restore", "--bundle", str(pause), "--image-path", str(image), "-background",
             "-detach", "sb")
    assert (root.code, root.err) == (0, "")
    done = r("restore", "--bundle", str(app), "--image-path", str(image), "-background",
             "-detach", "app")
    assert done.code == 128
    assert done.err == (
        "runsc emulator (tests.support): release-20240930.0 would now load sandbox 'sb' with "
        "containers ['sb', 'app'] from the image, but the real runsc 0.0~20221219.0 restores "
        "only a single-container sandbox: nothing was restored\n")
    assert r.real("list", "-quiet").out.split() == []
    restores = [c for c in r.emu.calls() if c.command == "restore"]
    assert [(c.container, c.exit_code, c.ran) for c in restores] == [("sb", 0, ()),
                                                                     ("app", 128, ())]
