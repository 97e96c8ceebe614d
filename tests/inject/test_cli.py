"""``ateom inject``: the daemon's profile by default, flags replace parts of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from ateom.cli import main
from ateom.inject import ANNOTATION_KEY
from tests.support import FakeLibrary, build_busybox_bundle, write_sim_gpu_spec

from ._support import tree_snapshot


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """The CLI configures structlog (logs to stderr) unless someone did: start
    from the defaults (capture_logs in another test leaves it configured), and
    undo it for other tests."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture
def setup(tmp_path: Path, fake_driver: list[FakeLibrary],
          monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    toolkit = tmp_path / "toolkit"
    toolkit.mkdir()
    monkeypatch.setenv("ATEOM_NVIDIA_TOOLKIT_DIR", str(toolkit))
    monkeypatch.setenv("ATEOM_NVIDIA_DRIVER_ROOT", "/usr/local/nvidia")
    spec_dir = tmp_path / "cdi"
    write_sim_gpu_spec(spec_dir, fake_driver)
    bundle = build_busybox_bundle(tmp_path / "bundle", ["true"],
                                  env=["NVIDIA_VISIBLE_DEVICES=all"])
    return bundle, spec_dir


def test_dry_run_prints_diff_and_writes_nothing(setup: tuple[Path, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    bundle, spec_dir = setup
    before = tree_snapshot(bundle), (bundle / "config.json").read_bytes()
    rc = main(["inject", "--bundle", str(bundle), "--spec-dir", str(spec_dir),
               "--device", "nvidia.com/gpu=0", "nvidia.com/gpu=1", "--dry-run"])
    assert rc == 0
    out = capsys.readouterr().out
    assert out.startswith("--- a/config.json")
    assert "+symlink rootfs/usr/local/nvidia/lib64/libcuda.so.1 -> libcuda.so.580.65.06" in out
    assert (tree_snapshot(bundle), (bundle / "config.json").read_bytes()) == before


def test_inject_uses_daemon_profile(setup: tuple[Path, Path],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    bundle, spec_dir = setup
    rc = main(["inject", "--bundle", str(bundle), "--spec-dir", str(spec_dir),
               "--device", "nvidia.com/gpu=1"])
    assert rc == 0
    assert "config.json updated" in capsys.readouterr().out
    config = json.loads((bundle / "config.json").read_text())
    hook_binary = str(Path(str(spec_dir)).parent / "toolkit" / "nvidia-cdi-hook")
    assert [(h["path"], h["args"][1]) for h in config["hooks"]["createContainer"]] == [
        (hook_binary, "create-symlinks"), (hook_binary, "enable-cuda-compat")]
    assert "LD_LIBRARY_PATH=/usr/local/nvidia/lib64" in config["process"]["env"]
    assert not any(e.startswith("NVIDIA_VISIBLE_DEVICES") for e in config["process"]["env"])
    assert config["annotations"][ANNOTATION_KEY] == "nvidia.com/gpu=1"
    # Same command again: nothing to do.
    assert main(["inject", "--bundle", str(bundle), "--spec-dir", str(spec_dir),
                 "--device", "nvidia.com/gpu=1"]) == 0
    assert "config.json unchanged, 0 SONAME link(s) staged" in capsys.readouterr().out


def test_flags_replace_profile_parts(setup: tuple[Path, Path]) -> None:
    bundle, spec_dir = setup
    rc = main(["inject", "--bundle", str(bundle), "--spec-dir", str(spec_dir),
               "--device", "nvidia.com/gpu=0", "--allow-hook", "update-ldcache",
               "--hook-binary", "/trusted/hook", "--library-dir", "/a", "--library-dir", "/b",
               "--drop-env", "PATH"])
    assert rc == 0
    config = json.loads((bundle / "config.json").read_text())
    assert [h["args"] for h in config["hooks"]["createContainer"]] == [
        ["/trusted/hook", "update-ldcache", "--folder", "/usr/local/nvidia/lib64"]]
    env = config["process"]["env"]
    assert "LD_LIBRARY_PATH=/a:/b" in env
    assert "NVIDIA_VISIBLE_DEVICES=void" in env  # the spec's value, no longer dropped
    assert not any(e.startswith("PATH=") for e in env)


def test_unresolvable_device_is_a_clear_error(setup: tuple[Path, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bundle, spec_dir = setup
    before = (bundle / "config.json").read_bytes()
    rc = main(["inject", "--bundle", str(bundle), "--spec-dir", str(spec_dir),
               "--device", "nvidia.com/gpu=9"])
    assert rc == 1
    assert "nvidia.com/gpu=9" in capsys.readouterr().err
    assert (bundle / "config.json").read_bytes() == before


def test_profile_comes_from_the_environment(setup: tuple[Path, Path],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # The toolkit's .real binary beats its shell wrapper; the driver root
    # decides LD_LIBRARY_PATH. Both read from the env, as the daemon does.
    bundle, spec_dir = setup
    toolkit = spec_dir.parent / "toolkit"
    (toolkit / "nvidia-cdi-hook").write_text("#!/bin/sh\n")
    (toolkit / "nvidia-cdi-hook.real").write_text("")
    monkeypatch.setenv("ATEOM_NVIDIA_DRIVER_ROOT", "/drv")
    assert main(["inject", "--bundle", str(bundle), "--spec-dir", str(spec_dir),
                 "--device", "nvidia.com/gpu=0"]) == 0
    config = json.loads((bundle / "config.json").read_text())
    real = str(toolkit / "nvidia-cdi-hook.real")
    assert {(h["path"], h["args"][0]) for h in config["hooks"]["createContainer"]} == {
        (real, real)}
    assert [e for e in config["process"]["env"] if e.startswith("LD_LIBRARY_PATH=")] == [
        "LD_LIBRARY_PATH=/drv/lib64"]


def test_another_vendors_device_gets_none_of_the_nvidia_profile(
        setup: tuple[Path, Path]) -> None:
    bundle, spec_dir = setup
    (spec_dir / "example.json").write_text(json.dumps({
        "cdiVersion": "0.6.0", "kind": "example.com/gpu",
        "devices": [{"name": "0", "containerEdits": {
            "env": ["EXAMPLE_GPU=0"],
            "hooks": [{"hookName": "createContainer", "path": "/usr/bin/example-hook",
                       "args": ["example-hook", "create-symlinks"]}]}}]}))
    assert main(["inject", "--bundle", str(bundle), "--spec-dir", str(spec_dir),
                 "--device", "example.com/gpu=0"]) == 0
    config = json.loads((bundle / "config.json").read_text())
    env = config["process"]["env"]
    assert "EXAMPLE_GPU=0" in env
    assert not any(e.startswith("LD_LIBRARY_PATH=") for e in env)
    assert "hooks" not in config  # not run from NVIDIA's hook binary
    # With a profile of one's own (--library-dir), it applies to every vendor.
    assert main(["inject", "--bundle", str(bundle), "--spec-dir", str(spec_dir),
                 "--device", "example.com/gpu=0", "--library-dir", "/opt/example/lib"]) == 0
    env = json.loads((bundle / "config.json").read_text())["process"]["env"]
    assert "LD_LIBRARY_PATH=/opt/example/lib" in env


def test_json_says_what_was_done_and_errors_as_json(setup: tuple[Path, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bundle, spec_dir = setup
    base = ["inject", "--bundle", str(bundle), "--spec-dir", str(spec_dir), "--json"]
    assert main([*base, "--device", "nvidia.com/gpu=0", "--dry-run"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["written"] is False and planned["config_changed"] is True
    assert planned["diff"].startswith("--- a/config.json")
    assert any(link["path"] == "/usr/local/nvidia/lib64/libcuda.so.1"
               and link["target"] == "libcuda.so.580.65.06" for link in planned["links"])
    assert main([*base, "--device", "nvidia.com/gpu=0"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["written"] is True and done["devices"] == ["nvidia.com/gpu=0"]
    assert "diff" not in done
    assert main([*base, "--device", "nvidia.com/gpu=9"]) == 1
    out, err = capsys.readouterr()
    said = json.loads(out)
    assert said["exit_code"] == 1 and "nvidia.com/gpu=9" in said["error"] and err == ""
