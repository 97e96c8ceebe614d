"""Where the doctor looks: every root it inspects, so tests can point it at a fixture.

Defaults are the daemon's: the same environment variables, read the same way,
so `ateom doctor` in a worker Pod inspects exactly what `ateom serve` will use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ateom.errors import AteomError, ErrorCode, quote
from ateom.gpuinfo.nvproxy import ALL_GPUS_NAME, control_node_paths
from ateom.settings import (
    ACTORS_ROOT_ENV,
    DEFAULT_RUN_DIR,
    RUN_DIR_ENV,
    GpuSettings,
    NodeSettings,
    runsc_global_flags_from_env,
)
from ateom.worker.capacity import DEFAULT_CAPACITY_DIR

DEFAULT_DEVICES = (ALL_GPUS_NAME,)
# The libraries without which CUDA cannot start: their SONAME links are the
# ones a workload's loader looks up first.
CORE_LIBRARY_SONAMES = ("libcuda.so.1", "libnvidia-ml.so.1")


@dataclass(frozen=True, slots=True)
class DoctorConfig:
    """The roots and settings one doctor run inspects.

    node, gpu: the daemon's own settings values (`ateom.settings`), read
        from the same environment twins with the same defaults.
    control_nodes: the control device nodes nvproxy needs; default, the
        `ateom.gpuinfo.nvproxy.CONTROL_NODE_NAMES` in the GPU glob's directory.
    devices: the qualified CDI names resolved and dry-run injected (what a
        GPU actor gets by default: every GPU of the Pod).
    proc_driver_version: the kernel module's version file, read for the host
        driver version (falls back to libcuda's file name under lib64);
        "" for ``<proc_root>/driver/nvidia/version``.
    nvidia_smi: the nvidia-smi to ask for PCI ids and memory; "" to look in
        the driver root's bin/, then $PATH, as the daemon does.
    gpu.cuda_checkpoint: a configured one means GPU checkpoints are
        expected: what they lack FAILs. gpu.placement is checked, not
        parsed, here: a bad value is a finding.
    max_actors: the daemon's ``--max-actors``.
    actors_root, run_dir: the daemon's ``--actors-root`` ("" when not given: not
        checked) and ``--run-dir``, which must be usable for it to serve.
    pod_uid, capacity_dir, accepted_not_served: the worker Pod as Substrate's
        controller started it (``--pod-uid`` or ``$POD_UID``; the downward-API
        limits; the ``--atunnel-*`` flags it took and does not serve yet, which
        only the running daemon knows: its Inspect/Doctor passes them).
    runsc_global_flags: the daemon's global runsc flags (its env twin), judged
        against the cgroups and network namespace the worker runs in.
    generate_timeout / probe_timeout: seconds allowed for nvidia-ctk cdi
        generate / for each runsc command; after one runsc command times out
        the rest are not run.
    """

    node: NodeSettings = field(default_factory=NodeSettings)
    gpu: GpuSettings = field(default_factory=GpuSettings)
    runsc: str = "runsc"
    runsc_global_flags: tuple[str, ...] = ()
    devices: tuple[str, ...] = DEFAULT_DEVICES
    control_nodes: tuple[str, ...] = ()
    proc_driver_version: str = ""
    nvidia_smi: str = ""
    max_actors: int = 1
    actors_root: str = ""
    run_dir: str = DEFAULT_RUN_DIR
    generate_timeout: float = 60.0
    # Started as Substrate's controller starts a worker: the Pod's uid ("" when not),
    # where its capacity files are, and the flags it takes without serving them yet.
    pod_uid: str = ""
    capacity_dir: str = DEFAULT_CAPACITY_DIR
    accepted_not_served: tuple[str, ...] = ()
    # Each runsc probe command (--version, flags, help, list-supported-drivers)
    # answers in well under a second; a wedged binary must not wedge the doctor.
    probe_timeout: float = 10.0

    @property
    def driver_version_file(self) -> str:
        return self.proc_driver_version or os.path.join(self.gpu.proc_root, "driver", "nvidia",
                                                        "version")

    @property
    def checkpoint_expected(self) -> bool:
        """The operator named a cuda-checkpoint: GPU checkpoints are part of this
        worker's job, so what they need FAILs when missing (else it WARNs)."""
        return bool(self.gpu.cuda_checkpoint)

    @property
    def control_node_paths(self) -> tuple[str, ...]:
        return self.control_nodes or control_node_paths(self.node.dev_dir)


def _first(environ: Mapping[str, str], *names: str) -> str:
    for name in names:
        if environ.get(name):
            return environ[name]
    return ""


def config_from_env(environ: Mapping[str, str] = os.environ) -> DoctorConfig:
    """The daemon's settings from its ``ATEOM_*`` variables (pure over `environ`).

    The same names `ateom serve` reads for its flags' twins (and the CDI
    registry and injector for their own): ``ATEOM_CDI_SPEC_DIRS`` (split on
    ``:`` like PATH), ``ATEOM_NVIDIA_DRIVER_ROOT``, ``ATEOM_NVIDIA_TOOLKIT_DIR``,
    ``ATEOM_CUDA_CHECKPOINT``, ``ATEOM_GPU_PLACEMENT``, ``ATEOM_PROC_ROOT``,
    ``ATEOM_NVPROXY_*``, ``ATEOM_MAX_ACTORS``, ``ATEOM_RUNSC_GLOBAL_FLAGS``
    (`NodeSettings.from_env`,
    `GpuSettings.from_env`). Raises AteomError (INVALID_ARGUMENT) for a
    number that is not one, as ``ateom serve`` refuses to start with it.
    """
    max_actors = _first(environ, "ATEOM_MAX_ACTORS") or "1"
    try:
        actors = int(max_actors)
    except ValueError:
        raise AteomError(f"$ATEOM_MAX_ACTORS={quote(max_actors)}: not a number",
                         code=ErrorCode.INVALID_ARGUMENT) from None
    return DoctorConfig(
        node=NodeSettings.from_env(environ),
        gpu=GpuSettings.from_env(environ),
        runsc=_first(environ, "ATEOM_RUNSC") or "runsc",
        runsc_global_flags=runsc_global_flags_from_env(environ),
        max_actors=actors,
        actors_root=_first(environ, ACTORS_ROOT_ENV),
        run_dir=_first(environ, RUN_DIR_ENV) or DEFAULT_RUN_DIR,
        pod_uid=_first(environ, "ATEOM_POD_UID", "POD_UID"),
        capacity_dir=_first(environ, "ATEOM_CAPACITY_DIR") or DEFAULT_CAPACITY_DIR,
    )
