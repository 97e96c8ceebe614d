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


def nvidia_ctk_search_dirs(toolkit_dir: str, driver_root: str, path_env: str) -> list[str]:
    """Where nvidia-ctk is looked for, first match wins (pure).

    The toolkit dir first: it is the toolkit the operator mounted and pointed
    ateom at, the one whose nvidia-cdi-hook kept hooks run, so a spec it
    generates matches that hook. Then ``<driver root>/bin`` (some driver
    installs ship the toolkit beside nvidia-smi), then $PATH, the image's own.
    """
    return [d for d in (toolkit_dir, os.path.join(driver_root, "bin"),
                        *path_env.split(os.pathsep)) if d]


def nvidia_ctk_path_env(toolkit_dir: str, driver_root: str, path_env: str) -> str:
    """$PATH for the nvidia-ctk child (pure): ``<driver root>/bin`` first, where the
    driver's own tools are (nvidia-smi, ...), then the toolkit dir, then the daemon's."""
    return os.pathsep.join(
        d for d in (os.path.join(driver_root, "bin"), toolkit_dir, path_env) if d)


def find_nvidia_ctk(toolkit_dir: str, driver_root: str, path_env: str) -> str | None:
    """The nvidia-ctk to run, or None (stats candidates).

    Within each directory ``nvidia-ctk.real`` before ``nvidia-ctk``: the plain
    name is often the toolkit installer's shell wrapper around the ``.real``
    next to it, which needs a shell and env the daemon does not promise.
    Directory by directory, not ``.real`` anywhere first: a ``.real`` further
    down $PATH belongs to another installation than the one the operator
    configured, and mixing them would generate a spec for the wrong toolkit.
    """
    for directory in nvidia_ctk_search_dirs(toolkit_dir, driver_root, path_env):
        for name in ("nvidia-ctk.real", "nvidia-ctk"):
            found = shutil.which(name, path=directory)
            if found:
                return found
    return None


class SpecGenerator:
    """Runs nvidia-ctk cdi generate at most once successfully per process."""

    def __init__(self, reaper: Reaper, driver_root: str, out_dir: str,
                 environ: dict[str, str], *, toolkit_dir: str) -> None:
        self.reaper = reaper
        self.driver_root = driver_root
        self.toolkit_dir = toolkit_dir
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
            path_env = env.get("PATH", os.defpath)
            env["PATH"] = nvidia_ctk_path_env(self.toolkit_dir, self.driver_root, path_env)
            tool = find_nvidia_ctk(self.toolkit_dir, self.driver_root, path_env)
            if tool is None:
                searched = [d for d in (self.toolkit_dir, f"{self.driver_root}/bin") if d]
                raise AteomError(
                    "GPUs present but no nvidia.com/gpu CDI spec, and no nvidia-ctk found in"
                    f" {', '.join(searched)} or $PATH to generate one",
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
