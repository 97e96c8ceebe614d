"""Build turn_app, the real-GPU checkpoint actor, and a CPU libcuda to run it on.

``scripts/gpu_real_turn/turn_app.c`` is meant for an H200 in a gVisor
sandbox, where cuda-checkpoint saves and restores its device memory. The
machines the tests run on have no GPU, so ``libcuda_stand_in.c`` (beside this
file) stands in for the driver's ``libcuda.so.1``: the same binary, built the
same way, runs here against it, and its output protocol and failure paths
are tested without a GPU. Both builds need only gcc (no CUDA headers).

    lib = build_libcuda_stand_in(tmp / "lib", "580.95.05")
    (tmp / "lib" / "libcuda.so.1").symlink_to(lib.name)
    app = build_turn_app(tmp / "bin")
    # run app with LD_LIBRARY_PATH=tmp/lib
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

GCC = shutil.which("gcc")

ROOT = Path(__file__).resolve().parents[2]
TURN_DIR = ROOT / "scripts" / "gpu_real_turn"
TURN_APP_SOURCE = TURN_DIR / "turn_app.c"
TURN_KERNELS_SOURCE = TURN_DIR / "turn_kernels.cu"
LIBCUDA_STAND_IN_SOURCE = Path(__file__).resolve().with_name("libcuda_stand_in.c")

# The flags the real builds use: warnings are errors, so a stand-in that
# drifts from turn_app's declarations fails here rather than misbehaving.
_WARN = ["-O2", "-Wall", "-Wextra", "-Werror"]


def _gcc(out: Path, args: list[str]) -> Path:
    if GCC is None:
        raise RuntimeError(f"gcc not found: needed to build {out.name}")
    out.parent.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([GCC, *args], capture_output=True, text=True, check=False, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"gcc failed building {out}:\n{res.stderr}")
    return out


def build_libcuda_stand_in(lib_dir: Path, driver_version: str) -> Path:
    """Compile the stand-in to ``lib_dir/libcuda.so.<driver_version>`` (SONAME libcuda.so.1).

    Named as NVIDIA's installer names it; the caller makes the
    ``libcuda.so.1`` link when it wants the library found (leaving it out
    is how a test shows turn_app failing to dlopen the driver).
    """
    out = lib_dir / f"libcuda.so.{driver_version}"
    args = ["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out)]
    return _gcc(out, [*_WARN, *args, str(LIBCUDA_STAND_IN_SOURCE)])


def build_turn_app(out_dir: Path) -> Path:
    """Compile ``turn_app.c`` to ``out_dir/turn_app`` exactly as the GPU machine does."""
    out = out_dir / "turn_app"
    return _gcc(out, [*_WARN, "-o", str(out), str(TURN_APP_SOURCE), "-ldl"])
