"""cuda-checkpoint: where it is looked for, what --help says, every judge verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom.gpuinfo.cuda_checkpoint import (
    CudaCheckpointFacts,
    CudaCheckpointHelp,
    checkpoint_mode,
    judge_binary,
    judge_driver,
    locate,
    parse_help,
    probe,
    search_dirs,
)

HELP_DIR = Path(__file__).parents[1] / "fixtures" / "gpu" / "cuda-checkpoint"
HELP_570 = (HELP_DIR / "help-570.86.10.txt").read_text()
HELP_590 = (HELP_DIR / "help-590.44.01.txt").read_text()


def _tool(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _prints(path: Path, text_file: Path) -> Path:
    return _tool(path, f"cat '{text_file}'")


def test_search_order_driver_then_toolkit_then_path() -> None:
    assert search_dirs("/usr/local/nvidia", "/opt/nvidia-toolkit", "/usr/bin:/bin:/usr/bin") == \
        ("/usr/local/nvidia/bin", "/opt/nvidia-toolkit", "/usr/bin", "/bin")
    assert search_dirs("", "", "") == ()


def test_locate_takes_the_first_match_in_order(tmp_path: Path) -> None:
    driver, toolkit, image = tmp_path / "driver", tmp_path / "toolkit", tmp_path / "image"
    for d in (toolkit, image):
        _tool(d / "cuda-checkpoint", "exit 0")
    found, said = locate("", driver_root=str(driver), toolkit_dir=str(toolkit),
                         path_env=str(image))
    assert found == str(toolkit / "cuda-checkpoint")
    assert said == (str(driver / "bin"), str(toolkit), "$PATH")
    _tool(driver / "bin" / "cuda-checkpoint", "exit 0")
    assert locate("", driver_root=str(driver), toolkit_dir=str(toolkit),
                  path_env=str(image))[0] == str(driver / "bin" / "cuda-checkpoint")
    (driver / "bin" / "cuda-checkpoint").unlink()
    (toolkit / "cuda-checkpoint").unlink()
    assert locate("", driver_root=str(driver), toolkit_dir=str(toolkit),
                  path_env=str(image))[0] == str(image / "cuda-checkpoint")


def test_a_configured_path_is_not_second_guessed(tmp_path: Path) -> None:
    _tool(tmp_path / "toolkit" / "cuda-checkpoint", "exit 0")
    found, said = locate(str(tmp_path / "mine"), driver_root="", path_env="",
                         toolkit_dir=str(tmp_path / "toolkit"))
    assert (found, said) == ("", (str(tmp_path / "mine"),))
    verdict = judge_binary(probe(str(tmp_path / "mine"), driver_root="", path_env="",
                                 toolkit_dir=str(tmp_path / "toolkit")))
    assert (verdict.status, verdict.reason) == (
        "fail", f"{tmp_path / 'mine'} does not exist: fix --cuda-checkpoint or install "
                "cuda-checkpoint there")


def test_not_found_names_where_it_looked_and_the_fix() -> None:
    facts = probe("", driver_root="/nonexistent/nvidia", toolkit_dir="/nonexistent/toolkit",
                  path_env="/nonexistent/bin")
    assert facts.path == "" and facts.help is None
    verdict = judge_binary(facts)
    assert (verdict.status, verdict.reason) == (
        "fail", "cuda-checkpoint not found in /nonexistent/nvidia/bin, /nonexistent/toolkit or "
                "$PATH: install it on the node (NVIDIA/cuda-checkpoint) or pass "
                "--cuda-checkpoint")


def test_parse_the_real_570_help() -> None:
    h = parse_help(HELP_570)
    assert h == CudaCheckpointHelp(
        "570.86.10",
        frozenset({"get-state", "action", "toggle", "get-restore-tid", "pid", "timeout", "help"}),
        frozenset({"lock", "checkpoint", "restore", "unlock"}))
    assert "launch-job" in parse_help(HELP_590).options
    assert parse_help("garbage") == CudaCheckpointHelp("", frozenset(), frozenset())


def test_probe_runs_help_once(tmp_path: Path) -> None:
    help_file = tmp_path / "help.txt"
    help_file.write_text(HELP_590)
    calls = tmp_path / "calls"
    _tool(tmp_path / "driver" / "bin" / "cuda-checkpoint",
          f"echo \"$@\" >> '{calls}'; cat '{help_file}'")
    facts = probe(driver_root=str(tmp_path / "driver"), toolkit_dir="", path_env="")
    assert facts.executable and facts.error == "" and facts.help is not None
    assert facts.help.version == "590.44.01"
    assert calls.read_text() == "--help\n"
    verdict = judge_binary(facts)
    assert verdict.status == "pass" and verdict.reason.startswith(
        f"{facts.path} 590.44.01 (options: action, get-restore-tid, get-state, help, launch-job")


def test_probe_a_non_executable_file(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "cuda-checkpoint").write_text("")
    facts = probe(driver_root=str(tmp_path), toolkit_dir="", path_env="")
    verdict = judge_binary(facts)
    assert verdict.status == "fail" and "not an executable file: chmod 0755 it" in verdict.reason


def test_probe_a_hanging_tool(tmp_path: Path) -> None:
    _tool(tmp_path / "bin" / "cuda-checkpoint", "sleep 600")
    facts = probe(driver_root=str(tmp_path), toolkit_dir="", path_env="", timeout=0.5)
    assert facts.help is None and "timed out after 0.5s" in facts.error
    assert judge_binary(facts).status == "fail"


def test_probe_something_else(tmp_path: Path) -> None:
    _tool(tmp_path / "bin" / "cuda-checkpoint", "echo 'usage: frobnicate'; exit 2")
    verdict = judge_binary(probe(driver_root=str(tmp_path), toolkit_dir="", path_env=""))
    assert verdict.status == "fail"
    assert "--help (exit 2) lists no --toggle: 'usage: frobnicate'" in verdict.reason
    assert "does not behave like NVIDIA's cuda-checkpoint; replace it" in verdict.reason


@pytest.mark.parametrize("driver, gpus, mode", [
    ("610.43.02", 1, (False, False)),
    ("580.95.05", 8, (False, False)),
    ("610.43.02", 2, (True, True)),
    ("615.15.00", 8, (True, True)),
    ("", 8, (False, False)),
])
def test_checkpoint_mode(driver: str, gpus: int, mode: tuple[bool, bool]) -> None:
    m = checkpoint_mode(driver, gpus)
    assert (m.sequential, m.launch_job) == mode
    if m.launch_job:
        assert "--launch-job" in m.reason and "--cuda-checkpoint-sequential" in m.reason


def _statuses(driver: str, gpus: int = 1, help_text: str = HELP_590,
              sequential: bool = True) -> list[tuple[str, str]]:
    return [(j.check, j.status) for j in judge_driver(
        driver, gpu_count=gpus, help=parse_help(help_text), runsc_sequential=sequential)]


def test_driver_older_than_550_fails_with_the_fix() -> None:
    (j,) = judge_driver("525.89.02", gpu_count=1, help=None, runsc_sequential=False)
    assert (j.status, j.reason) == ("fail", "driver 525.89.02 < R550: cuda-checkpoint needs "
                                            "R550+ (it answers 'Insufficient driver'): upgrade "
                                            "the node's NVIDIA driver")


def test_driver_unknown_fails() -> None:
    (j,) = judge_driver("", gpu_count=1, help=None, runsc_sequential=False)
    assert j.status == "fail" and "is the NVIDIA kernel module loaded?" in j.reason


def test_driver_550_works_with_warnings() -> None:
    verdicts = judge_driver("550.54.15", gpu_count=8, help=None, runsc_sequential=False)
    assert [j.status for j in verdicts] == ["pass", "warn", "warn"]
    assert "no --get-state" in verdicts[1].reason and "--device-map" in verdicts[2].reason


def test_driver_580_multi_gpu_passes() -> None:
    assert _statuses("580.95.05", gpus=8) == [("cuda-checkpoint-driver", "pass")]


def test_driver_610_multi_gpu_needs_launch_job_and_sequential() -> None:
    assert _statuses("610.43.02", gpus=2) == [("cuda-checkpoint-driver", "pass"),
                                              ("cuda-checkpoint-multi-gpu", "pass")]
    no_job = judge_driver("610.43.02", gpu_count=2, help=parse_help(HELP_570),
                          runsc_sequential=True)[-1]
    assert no_job.status == "fail" and no_job.reason.endswith(
        "this cuda-checkpoint 570.86.10 has no --launch-job: install cuda-checkpoint 590.44.01 "
        "or newer (NVIDIA/cuda-checkpoint)")
    no_seq = judge_driver("610.43.02", gpu_count=2, help=parse_help(HELP_590),
                          runsc_sequential=False)[-1]
    assert no_seq.status == "fail" and no_seq.reason.endswith(
        "upgrade runsc to release-20260615.0 or later")
    assert _statuses("610.43.02", gpus=1) == [("cuda-checkpoint-driver", "pass")]


def test_binary_facts_without_help_fail() -> None:
    facts = CudaCheckpointFacts(("/d/bin",), "/d/bin/cuda-checkpoint", executable=True,
                                error="/d/bin/cuda-checkpoint: Exec format error")
    assert judge_binary(facts).status == "fail"
