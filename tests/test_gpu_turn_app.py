"""turn_app, the real-GPU checkpoint actor, run here against the CPU libcuda stand-in.

The binary is the one built for the H200; only libcuda.so.1 differs. These
tests pin its output protocol (what a checkpoint / restore run reads), that
the device-side counter ticks 1, 2, 3... and the pattern check counts real
corruption, and its failure exits.
"""

from __future__ import annotations

import ctypes.util
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cuda_stand_in import (
    GCC,
    LIBCUDA_STAND_IN_SOURCE,
    TURN_APP_SOURCE,
    TURN_KERNELS_SOURCE,
    build_libcuda_stand_in,
    build_turn_app,
)

pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc to build turn_app and libcuda")

DRIVER_VERSION = "580.95.05"
# What turn_app must resolve: the _v2 names where cuda.h #defines them.
SYMBOLS = {
    "cuInit", "cuDriverGetVersion", "cuDeviceGet", "cuDeviceGetName",
    "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuModuleLoadDataEx",
    "cuModuleGetFunction", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyDtoH_v2",
    "cuMemsetD8_v2", "cuLaunchKernel", "cuCtxSynchronize", "cuGetErrorName",
}  # fmt: skip

START = re.compile(r'turn_app: start pid=(\d+) mib=(\d+) device="([^"]*)" driver=(\d+)')
FILLED = re.compile(r"turn_app: filled bytes=(\d+) seconds=\d+\.\d{3}")
TICK = re.compile(r"tick=(\d+) bad=(\d+) t=(\d+\.\d{3})")
WAIT_S = 20


@dataclass(frozen=True)
class Built:
    app: Path
    lib_dir: Path  # the stand-in and its libcuda.so.1 link
    unlinked_dir: Path  # the stand-in alone: dlopen("libcuda.so.1") finds nothing


@dataclass(frozen=True)
class Run:
    rc: int
    pid: int
    stdout: str
    stderr: str

    def lines(self) -> list[str]:
        """Whole lines only: a kill may land mid-write."""
        return self.stdout.split("\n")[:-1]

    def __str__(self) -> str:
        return f"rc={self.rc}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("turn")
    lib = build_libcuda_stand_in(root / "lib", DRIVER_VERSION)
    (root / "lib" / "libcuda.so.1").symlink_to(lib.name)
    build_libcuda_stand_in(root / "unlinked", DRIVER_VERSION)
    return Built(build_turn_app(root / "bin"), root / "lib", root / "unlinked")


def _env(lib_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LIBCUDA_STAND_IN_CORRUPT"}
    return {**env, "LD_LIBRARY_PATH": str(lib_dir), **extra}


def run_ticking(built: Built, tmp_path: Path, **env: str) -> Run:
    """Run turn_app (4 MiB, 20 ms period) for about a second, then SIGTERM it."""
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(
            [built.app, TURN_KERNELS_SOURCE, "4", "20"],
            stdout=o,
            stderr=e,
            env=_env(built.lib_dir, **env),
        )
    try:
        started = time.monotonic()
        while proc.poll() is None and time.monotonic() - started < WAIT_S:
            if time.monotonic() - started >= 1 and out.read_text().count("tick=") >= 5:
                break
            time.sleep(0.05)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=WAIT_S)
    return Run(proc.returncode, proc.pid, out.read_text(), err.read_text())


def run_once(built: Built, args: list[str | Path], lib_dir: Path | None = None) -> Run:
    """Run turn_app where it is expected to exit by itself."""
    proc = subprocess.run(
        [built.app, *args],
        capture_output=True,
        text=True,
        env=_env(lib_dir or built.lib_dir),
        timeout=WAIT_S,
        check=False,
    )
    return Run(proc.returncode, -1, proc.stdout, proc.stderr)


def ticks(run: Run) -> list[tuple[int, int, float]]:
    lines = run.lines()
    assert lines[2:], run
    found = [TICK.fullmatch(line) for line in lines[2:]]
    assert all(found), run
    return [(int(m[1]), int(m[2]), float(m[3])) for m in found if m]


def test_it_fills_then_ticks_from_one_with_a_clean_check(built: Built, tmp_path: Path) -> None:
    run = run_ticking(built, tmp_path)
    assert run.rc == 0, run  # SIGTERM is a clean stop
    lines = run.lines()
    start = START.fullmatch(lines[0])
    assert start, run
    assert start.groups() == (str(run.pid), "4", "libcuda stand-in (CPU)", "13000"), run
    filled = FILLED.fullmatch(lines[1])
    assert filled and int(filled[1]) == 4 << 20, run
    got = ticks(run)
    assert len(got) >= 5, run
    assert [t[0] for t in got] == list(range(1, len(got) + 1)), run
    assert all(t[1] == 0 for t in got), run
    times = [t[2] for t in got]
    assert all(a < b for a, b in zip(times, times[1:], strict=False)), run
    assert run.stderr == "", run


def test_the_check_counts_a_corrupted_word_on_every_tick(built: Built, tmp_path: Path) -> None:
    run = run_ticking(built, tmp_path, LIBCUDA_STAND_IN_CORRUPT="12345")
    got = ticks(run)
    assert got and all(t[1] == 1 for t in got), run
    assert [t[0] for t in got] == list(range(1, len(got) + 1)), run


def test_ptx_without_a_kernel_fails_the_module_load(built: Built, tmp_path: Path) -> None:
    ptx = tmp_path / "partial.ptx"
    ptx.write_text(".visible .entry turn_fill(\n.visible .entry turn_check(\n")
    run = run_once(built, [ptx, "4", "20"])
    line = "turn_app: error cuModuleLoadDataEx: 218 CUDA_ERROR_INVALID_PTX"
    assert run.rc == 2, run
    assert line in run.stdout.splitlines() and line in run.stderr.splitlines(), run
    assert "jit log: libcuda stand-in: the image has no kernel turn_tick" in run.stdout, run
    assert "tick=" not in run.stdout, run


@pytest.mark.skipif(
    ctypes.util.find_library("cuda") is not None,
    reason="this host has a libcuda.so.1 the loader would find anyway",
)
def test_no_libcuda_on_the_path_is_a_dlopen_error(built: Built) -> None:
    run = run_once(built, [TURN_KERNELS_SOURCE, "4"], lib_dir=built.unlinked_dir)
    assert run.rc == 2, run
    assert run.stdout.startswith("turn_app: error dlopen: libcuda.so.1: cannot open"), run
    assert run.stderr == run.stdout, run


@pytest.mark.parametrize(
    "args",
    [[], ["k.ptx"], ["k.ptx", "0"], ["k.ptx", "-1"], ["k.ptx", "4x"], ["k.ptx", "4", "0"],
     ["k.ptx", "4", "abc"], ["k.ptx", "4", "20", "more"]],
)  # fmt: skip
def test_bad_usage_exits_64_with_one_line(built: Built, args: list[str | Path]) -> None:
    run = run_once(built, args)
    assert run.rc == 64, run
    assert run.stdout == "", run
    assert run.stderr.startswith("usage: turn_app ") and run.stderr.count("\n") == 1, run


def _pattern_formula(source: Path) -> str:
    found = re.search(r"turn_pattern\([^)]*\)\s*\{\s*return ([^;]+);", source.read_text())
    assert found, f"no turn_pattern in {source}"
    return found[1]


def test_the_stand_in_checks_the_same_pattern_the_kernels_write() -> None:
    assert _pattern_formula(LIBCUDA_STAND_IN_SOURCE) == _pattern_formula(TURN_KERNELS_SOURCE)


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_the_app_resolves_and_the_stand_in_exports_the_versioned_names(built: Built) -> None:
    assert set(re.findall(r"^\s*SYM\((\w+)\)", TURN_APP_SOURCE.read_text(), re.M)) == SYMBOLS
    nm = subprocess.run(
        ["nm", "-D", "--defined-only", built.lib_dir / "libcuda.so.1"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=True,
    )
    assert {line.split()[-1] for line in nm.stdout.splitlines() if " T " in line} == SYMBOLS


NVCC = shutil.which("nvcc")
PTXAS = shutil.which("ptxas")


@pytest.mark.skipif(NVCC is None or PTXAS is None,
                    reason="the kernels were not compiled: needs nvcc and ptxas (CUDA's compiler)")
def test_the_kernels_compile_to_ptx_that_assembles_for_hopper(tmp_path: Path) -> None:
    """The command the GPU machine runs, then ptxas for the H200's sm_90: the module
    turn_app loads there is valid, with the three entries it asks for."""
    ptx = tmp_path / "turn_kernels.ptx"
    built = subprocess.run([str(NVCC), "-ptx", "-arch=compute_90", "-o", str(ptx),
                            str(TURN_KERNELS_SOURCE)], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    entries = re.findall(r"^\.visible \.entry (\w+)\(", ptx.read_text(), re.MULTILINE)
    assert sorted(entries) == ["turn_check", "turn_fill", "turn_tick"]
    assembled = subprocess.run([str(PTXAS), "-arch=sm_90", "-o", str(tmp_path / "k.cubin"),
                                str(ptx)], capture_output=True, text=True, timeout=300)
    assert assembled.returncode == 0, assembled.stderr
