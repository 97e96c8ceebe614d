"""A simulated GPU worker for doctor tests: what a healthy Pod would have, in a temp dir.

    dev/nvidia0, dev/nvidia1, dev/nvidiactl, dev/nvidia-uvm  symlinks to host stand-in
                                                             char devices (/dev/null, ...)
    driver/lib64/libcuda.so.<v>, libnvidia-ml.so.<v>, ...   real ELF (gcc) with SONAMEs
    driver/bin/nvidia-smi                                    stand-in answering ateom's
                                                             query for the node below
    driver/bin/cuda-checkpoint                               stand-in printing a recorded
                                                             --help (590.44.01)
    node/proc/driver/nvidia/...                              the NVIDIA module's /proc files
                                                             for those GPUs (same driver)
    toolkit/nvidia-cdi-hook (wrapper) + .real, nvidia-ctk.real
    cdi/nvidia.json                                          simulated nvidia.com/gpu spec
    runsc                                                    shim: the real runsc, plus
                                                             the nvproxy flags,
                                                             list-supported-drivers and
                                                             checkpoint's GPU flags

Each seeded breakage is a small function that damages one piece.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ateom.doctor.config import DoctorConfig
from tests.support import (
    DEFAULT_DRIVER_VERSION,
    build_fake_driver_libs,
    compile_shared_library,
    write_sim_gpu_spec,
)
from tests.support.configs import doctor_config
from tests.support.gpu_node import SimGpu, write_gpu_node, write_sim_fixture
from tests.support.runsc_emu import install_runsc

REAL_RUNSC = shutil.which("runsc") or "/usr/bin/runsc"
CUDA_CHECKPOINT_HELP = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / \
    "cuda-checkpoint"

# The shim adds nvproxy's flags to what `runsc flags` lists (a no-op on a build
# that has them), answers list-supported-drivers with this node's driver, and
# runs the real binary for everything else (so --version and help are genuine).
RUNSC_SHIM = """#!/bin/sh
REAL={real}
case "$1" in
  flags)
    "$REAL" flags
    printf '  -nvproxy\\n    \\tEXPERIMENTAL: enable support for Nvidia GPUs.\\n'
    printf '  -nvproxy-driver-version string\\n    \\tNVIDIA driver ABI version to use.\\n'
    printf '  -nvproxy-allowed-driver-capabilities string\\n    \\tcomma separated.\\n'
    exit 0 ;;
  nvproxy)
    if [ "$2" = list-supported-drivers ]; then
      printf '535.104.05\\n550.54.15\\n{version}\\n'
      exit 0
    fi ;;
  help)
    if [ "$2" = checkpoint ]; then
      "$REAL" help checkpoint
      printf '  -cuda-checkpoint-path string\\n    \\tpath to the cuda-checkpoint binary\\n'
      printf '  -cuda-checkpoint-sequential\\n    \\trun cuda-checkpoint sequentially\\n'
      exit 0
    fi ;;
esac
exec "$REAL" "$@"
"""

# The example Pod's global runsc flags (deploy/gpu-worker-pod.yaml).
POD_RUNSC_FLAGS = "--ignore-cgroups --network=none"


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@dataclass(frozen=True)
class GpuWorker:
    root: Path

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def lib64(self) -> Path:
        return self.root / "driver" / "lib64"

    @property
    def toolkit(self) -> Path:
        return self.root / "toolkit"

    @property
    def spec_path(self) -> Path:
        return self.root / "cdi" / "nvidia.json"

    @property
    def runsc(self) -> Path:
        return self.root / "runsc"

    def runsc_without_nvproxy(self) -> str:
        """A runsc with no --nvproxy: Debian 12's own 2022 build, as the release
        emulator presents it (the set-up's real runsc has nvproxy)."""
        return str(install_runsc("20221219", self.root / "runsc-2022").path)

    @property
    def proc_root(self) -> Path:
        """The simulated NVIDIA module's /proc (the real one is the host's)."""
        return self.root / "node" / "proc"

    @property
    def cuda_checkpoint(self) -> Path:
        return self.root / "driver" / "bin" / "cuda-checkpoint"

    def cli_args(self) -> list[str]:
        """What `ateom doctor` needs beyond the env to look at this worker, not the host."""
        return ["--proc-root", str(self.proc_root)]

    def config(self, **changes: object) -> DoctorConfig:
        base = doctor_config(
            gpu_glob=str(self.dev / "nvidia[0-9]*"),
            driver_root=str(self.root / "driver"),
            toolkit_dir=str(self.toolkit),
            spec_dirs=(str(self.root / "cdi"),),
            runsc=str(self.runsc),
            proc_driver_version=str(self.root / "proc-driver-nvidia-version"),
            proc_root=str(self.proc_root),
            runsc_global_flags=tuple(POD_RUNSC_FLAGS.split()),
        )
        return doctor_config(base, **changes)

    def env(self) -> dict[str, str]:
        """The daemon's environment for this worker (for the CLI)."""
        return {
            "PATH": os.environ.get("PATH", os.defpath),
            "ATEOM_GPU_GLOB": str(self.dev / "nvidia[0-9]*"),
            "ATEOM_NVIDIA_DRIVER_ROOT": str(self.root / "driver"),
            "ATEOM_NVIDIA_TOOLKIT_DIR": str(self.toolkit),
            "ATEOM_CDI_SPEC_DIRS": str(self.root / "cdi"),
            "ATEOM_RUNSC": str(self.runsc),
            "ATEOM_RUNSC_GLOBAL_FLAGS": POD_RUNSC_FLAGS,
        }

    # -- seeded breakages ---------------------------------------------------

    def remove_control_node(self, name: str = "nvidia-uvm") -> None:
        (self.dev / name).unlink()

    def make_spec_stale(self) -> None:
        """GPU 1's node in the spec now names a node this host does not have."""
        spec = json.loads(self.spec_path.read_text())
        for device in spec["devices"]:
            for node in device["containerEdits"].get("deviceNodes", []):
                if node["path"] == "/dev/nvidia1":
                    node["path"] = "/dev/nvidia7"
                    node["hostPath"] = str(self.dev / "nvidia7")
        self.spec_path.write_text(json.dumps(spec))

    def strip_libcuda_soname(self) -> None:
        """Replace libcuda with a build that has no DT_SONAME."""
        lib = self.lib64 / f"libcuda.so.{DEFAULT_DRIVER_VERSION}"
        compile_shared_library(lib, None, "int cuInit(unsigned f) { (void)f; return 0; }\n")

    def remove_toolkit(self) -> None:
        shutil.rmtree(self.toolkit)

    def cuda_checkpoint_prints(self, help_file: str) -> None:
        """The stand-in prints another recorded --help (e.g. help-570.86.10.txt)."""
        _executable(self.cuda_checkpoint,
                    f"#!/bin/sh\ncat '{CUDA_CHECKPOINT_HELP / help_file}'\n")

    def set_gpu_driver(self, version: str, gpus: int = 2) -> None:
        """The node's GPUs now run driver `version` (its /proc files and nvidia-smi)."""
        write_gpu_facts(self, version, gpus)

    def add_spec(self, name: str, doc: dict[str, object]) -> Path:
        """Another CDI spec in the worker's spec dir (a DRA claim's, say)."""
        path = self.root / "cdi" / name
        path.write_text(json.dumps(doc))
        return path


def write_gpu_facts(w: GpuWorker, driver_version: str, gpus: int) -> None:
    """The module's /proc files under node/ and a stand-in nvidia-smi in driver/bin
    for `gpus` H200s (minors 0..gpus-1) on `driver_version` (writes files)."""
    shutil.rmtree(w.root / "gpu-fixture", ignore_errors=True)
    shutil.rmtree(w.root / "node", ignore_errors=True)
    fixture = write_sim_fixture(w.root / "gpu-fixture", [
        SimGpu(i, i, f"GPU-a0000000-0000-4000-8000-{i:012d}") for i in range(gpus)
    ], driver_version=driver_version)
    node = write_gpu_node(w.root / "node", fixture)
    _executable(w.root / "driver" / "bin" / "nvidia-smi", Path(node.nvidia_smi).read_text())


def build_gpu_worker(root: Path, *, gpus: int = 2) -> GpuWorker:
    """Build a healthy simulated GPU worker under `root` (runs gcc)."""
    w = GpuWorker(root)
    w.dev.mkdir(parents=True)
    stand_ins = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random"]
    for i in range(gpus):
        os.symlink(stand_ins[i % len(stand_ins)], w.dev / f"nvidia{i}")
    os.symlink("/dev/urandom", w.dev / "nvidiactl")
    os.symlink("/dev/zero", w.dev / "nvidia-uvm")

    libs = build_fake_driver_libs(
        w.lib64, extra=[(f"libnvidia-ptxjitcompiler.so.{DEFAULT_DRIVER_VERSION}",
                         "libnvidia-ptxjitcompiler.so.1")]
    )
    # The GPUs' /proc files and nvidia-smi, for the same driver the libraries are of.
    write_gpu_facts(w, DEFAULT_DRIVER_VERSION, gpus)
    w.cuda_checkpoint_prints("help-590.44.01.txt")

    # The toolkit as the GPU operator installs it: wrappers and their .real binaries.
    true_bin = shutil.which("true") or "/bin/true"
    for name in ("nvidia-cdi-hook", "nvidia-ctk"):
        _executable(w.toolkit / name, '#!/bin/sh\nexec "$0.real" "$@"\n')
        shutil.copy(true_bin, w.toolkit / f"{name}.real")

    write_sim_gpu_spec(
        w.root / "cdi", libs, gpus=gpus, hook_path=str(w.toolkit / "nvidia-cdi-hook")
    )
    _executable(w.runsc, RUNSC_SHIM.format(real=REAL_RUNSC, version=DEFAULT_DRIVER_VERSION))
    return w
