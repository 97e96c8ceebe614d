"""GPU presence and the nvidia.com/gpu CDI spec (shell: globs, runs nvidia-ctk).

A Pod has GPUs when its device glob matches (`/dev/nvidia[0-9]*`, any index).
When no spec for nvidia.com/gpu is in the spec dirs, ateom generates one
with nvidia-ctk, once per process. A failed generation is not remembered:
the next actor retries (the driver may simply not be ready yet), and the
failing actor gets the tool's output.
"""

from __future__ import annotations

import glob
import os
import shutil
import threading

import structlog

from ateom.daemon.reaper import Reaper
from ateom.errors import AteomError, ErrorCode

log = structlog.get_logger("ateom.gpu")


def gpu_present(pattern: str) -> bool:
    """Glob the device nodes (reads /dev)."""
    return bool(glob.glob(pattern))


def nvidia_ctk_argv(tool: str, driver_root: str, output: str) -> list[str]:
    return [tool, "cdi", "generate", "--format=json",
            f"--library-search-path={driver_root}/lib64", f"--output={output}"]


def find_nvidia_ctk(driver_root: str, path_env: str) -> str | None:
    """Prefer nvidia-ctk.real (the plain name is often an installer's wrapper)."""
    search = os.pathsep.join([os.path.join(driver_root, "bin"), path_env])
    return shutil.which("nvidia-ctk.real", path=search) or shutil.which("nvidia-ctk", path=search)


class SpecGenerator:
    """Runs nvidia-ctk cdi generate at most once successfully per process."""

    def __init__(self, reaper: Reaper, driver_root: str, out_dir: str,
                 environ: dict[str, str]) -> None:
        self.reaper = reaper
        self.driver_root = driver_root
        self.out_dir = out_dir
        self.environ = environ
        self._lock = threading.Lock()
        self.generated: str | None = None

    def ensure(self) -> str:
        """Path of the generated spec; generates it if not done yet (runs nvidia-ctk)."""
        with self._lock:
            if self.generated:
                return self.generated
            env = dict(self.environ)
            env["PATH"] = os.pathsep.join(
                [os.path.join(self.driver_root, "bin"), env.get("PATH", os.defpath)]
            )
            tool = find_nvidia_ctk(self.driver_root, env["PATH"])
            if tool is None:
                raise AteomError(
                    "GPUs present but no nvidia.com/gpu CDI spec, and no nvidia-ctk found in"
                    f" {self.driver_root}/bin or $PATH to generate one",
                    code=ErrorCode.FAILED_PRECONDITION,
                )
            os.makedirs(self.out_dir, mode=0o755, exist_ok=True)
            output = os.path.join(self.out_dir, "nvidia.json")
            done = self.reaper.run_capture(
                nvidia_ctk_argv(tool, self.driver_root, output), env=env, timeout=120
            )
            if done.returncode != 0 or not os.path.exists(output):
                raise AteomError(
                    f"nvidia-ctk cdi generate failed (exit {done.returncode}):"
                    f" {done.output[-2048:]}",
                    code=ErrorCode.FAILED_PRECONDITION,
                )
            log.info("cdi_spec_generated", path=output, tool=tool)
            self.generated = output
            return output
