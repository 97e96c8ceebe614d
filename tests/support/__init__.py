"""Test support for ateom and for code that drives it (like ``structlog.testing``).

Everything here builds *real* parts on a machine without a GPU:

- `build_fake_driver_libs`: real ELF driver libraries compiled with gcc, with
  the SONAMEs NVIDIA's carry (``libcuda.so.<ver>`` -> ``libcuda.so.1``, whose
  ``cuInit`` returns 0), and `build_cuda_probe`, a program linked against them.
- `write_sim_gpu_spec`: an ``nvidia.com/gpu`` CDI spec shaped like
  ``nvidia-ctk cdi generate`` output whose GPU and control nodes are stand-in
  host char devices (/dev/null, /dev/zero, ...).
- `build_busybox_bundle`: an OCI bundle whose rootfs is busybox-static.
- `run_container`: run a bundle under real ``runsc`` or ``runc`` with a unique
  container id, log files instead of /dev/null, and guaranteed clean-up.

Needs gcc for the libraries and /bin/busybox for bundles; nothing here is
imported by the daemon itself.
"""

from tests.support.bundle import (
    BUSYBOX,
    build_busybox_bundle,
    host_loader_mounts,
    read_config,
    write_config,
)
from tests.support.driver import (
    DEFAULT_DRIVER_VERSION,
    FakeLibrary,
    build_cuda_probe,
    build_fake_driver_libs,
    compile_shared_library,
)
from tests.support.runtime import (
    ContainerResult,
    run_container,
    runtime_available,
)
from tests.support.spec import (
    SIM_GPU_KIND,
    STAND_IN_DEVICES,
    write_sim_gpu_spec,
)

__all__ = [
    "BUSYBOX",
    "DEFAULT_DRIVER_VERSION",
    "SIM_GPU_KIND",
    "STAND_IN_DEVICES",
    "ContainerResult",
    "FakeLibrary",
    "build_busybox_bundle",
    "build_cuda_probe",
    "build_fake_driver_libs",
    "compile_shared_library",
    "host_loader_mounts",
    "read_config",
    "run_container",
    "runtime_available",
    "write_config",
    "write_sim_gpu_spec",
]

# The runsc release emulator (``runsc_emu``): any gVisor release from the
# shared release files, in front of Debian's real runsc; and a stand-in
# cuda-checkpoint for inside a sandbox.
from tests.support.cuda_checkpoint_stub import (  # noqa: E402
    CudaCheckpointStub,
    install_cuda_checkpoint_stub,
)
from tests.support.runsc_emu import RELEASES as RUNSC_RELEASES  # noqa: E402
from tests.support.runsc_emu import EmulatedRunsc, RunscCall, install_runsc  # noqa: E402
from tests.support.runsc_emu_gpu import SimGpu, sim_gpus  # noqa: E402

__all__ += [
    "RUNSC_RELEASES",
    "CudaCheckpointStub",
    "EmulatedRunsc",
    "RunscCall",
    "SimGpu",
    "install_cuda_checkpoint_stub",
    "install_runsc",
    "sim_gpus",
]
