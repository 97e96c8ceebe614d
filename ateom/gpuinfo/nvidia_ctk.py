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
import tempfile
import threading
from collections.abc import Mapping

import structlog

from ateom import safefs
from ateom.errors import AteomError, ErrorCode
from ateom.process.reaper import Reaper
from ateom.settings import NodeSettings

log = structlog.get_logger("ateom.gpu")

SPEC_NAME = "nvidia.json"  # the generated spec's file name in the run dir's cdi/


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
    """Runs nvidia-ctk cdi generate at most once successfully per process.

    nvidia-ctk writes where it is told, following whatever is there, so it
    writes into a fresh private directory; ateom then puts the spec in place
    with its own writer (no symlink followed, old-or-new after a crash).
    """

    def __init__(self, reaper: Reaper, node: NodeSettings, out_dir: str,
                 environ: Mapping[str, str], *, beneath: str) -> None:
        self.reaper = reaper
        self.node = node
        self.out_dir = out_dir
        self.beneath = beneath  # the daemon's run dir: trusted, out_dir below it
        self.environ = dict(environ)
        self._lock = threading.Lock()
        self.generated: str | None = None

    def ensure(self) -> str:
        """Path of the generated spec; generates it if not done yet (runs nvidia-ctk)."""
        with self._lock:
            if self.generated:
                return self.generated
            self.generated = self._generate()
            return self.generated

    def _generate(self) -> str:
        node = self.node
        path_env = self.environ.get("PATH", os.defpath)
        tool = find_nvidia_ctk(node.toolkit_dir, node.driver_root, path_env)
        if tool is None:
            searched = [d for d in (node.toolkit_dir, node.driver_bin_dir) if d]
            raise AteomError(
                "GPUs present but no nvidia.com/gpu CDI spec, and no nvidia-ctk found in"
                f" {', '.join(searched)} or $PATH to generate one",
                code=ErrorCode.FAILED_PRECONDITION,
            )
        env = {**self.environ,
               "PATH": nvidia_ctk_path_env(node.toolkit_dir, node.driver_root, path_env)}
        safefs.makedirs(self.out_dir, beneath=self.beneath)
        staging = tempfile.mkdtemp(prefix=".generate-", dir=self.out_dir)  # 0700, new
        try:
            staged = os.path.join(staging, SPEC_NAME)
            done = self.reaper.run_capture(
                nvidia_ctk_argv(tool, node.driver_root, staged), env=env, timeout=120)
            try:
                spec, _ = safefs.read_file(staged, beneath=staging)
            except OSError:
                spec = None
            if done.returncode != 0 or spec is None:
                raise AteomError(
                    f"nvidia-ctk cdi generate failed (exit {done.returncode}):"
                    f" {done.output[-2048:]}",
                    code=ErrorCode.FAILED_PRECONDITION,
                )
            output = os.path.join(self.out_dir, SPEC_NAME)
            safefs.write_atomic(output, spec, beneath=self.beneath)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        log.info("cdi_spec_generated", path=output, tool=tool)
        return output
