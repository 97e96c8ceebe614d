"""The doctor's imperative shell: look at the machine and write down `Facts`.

Every probe here stats, globs, reads ELF, runs a binary or plans an
injection, and reuses the piece of ateom that does the same for real (the
CDI registry, the injector, the daemon's runsc probe and spec generator, the
GPU inventory and cuda-checkpoint probe of `ateom.gpuinfo`), so the doctor
sees exactly what `ateom serve` would. No probe raises for what it finds
broken: a broken thing is a fact. The node's pieces are in `gather_node`,
the CDI side in `gather_cdi`; runsc and the GPU tools here.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping

from ateom.doctor.config import DoctorConfig
from ateom.doctor.facts import Facts, RunscFact
from ateom.doctor.gather_cdi import gather_cdi
from ateom.doctor.gather_node import (
    dir_fact,
    gather_cgroups,
    host_driver_version,
    natural,
    stat_node,
    tool_fact,
)
from ateom.doctor.gather_userns import gather_userns
from ateom.errors import AteomError
from ateom.gpuinfo.cuda_checkpoint import CudaCheckpointFacts, probe
from ateom.gpuinfo.gather import find_nvidia_smi, gather_worker_gpus
from ateom.gpuinfo.inventory import WorkerGpus
from ateom.network.runsc_support import netns_problem
from ateom.process.runner import (
    Runner,
    give_up_after_a_timeout,
    subprocess_runner,
)
from ateom.runsc.probe import probe_runsc, unknown_global_flags
from ateom.settings import unusable_dir
from ateom.worker.capacity import read_capacity


def gather_runsc(config: DoctorConfig, run: Runner = subprocess_runner) -> RunscFact:
    """Probe runsc with the daemon's prober (runs the binary)."""
    path = config.runsc
    run = give_up_after_a_timeout(run, config.probe_timeout)
    try:
        info = probe_runsc(path, lambda argv: run(argv))
    except AteomError as exc:
        return RunscFact(path, found=False, error=str(exc))
    wanted = []
    if config.gpu.nvproxy.driver_version:
        wanted.append("nvproxy-driver-version")
    if config.gpu.nvproxy.capabilities:
        wanted.append("nvproxy-allowed-driver-capabilities")
    flags = tuple((f"--{flag}", info.supports(flag)) for flag in wanted)
    # The daemon's probe lists them (`nvproxy list-supported-drivers`, oldest first).
    drivers = info.supported_drivers or None
    return RunscFact(
        info.path,
        found=True,
        version=info.version,
        supports_nvproxy=info.supports_nvproxy,
        flags=flags,
        supported_drivers=drivers,
        cuda_checkpoint_path=info.supports("checkpoint:cuda-checkpoint-path"),
        cuda_checkpoint_sequential=info.supports("checkpoint:cuda-checkpoint-sequential"),
        unknown_global_flags=unknown_global_flags(config.runsc_global_flags,
                                                  info.global_flags),
        netns_problem=netns_problem(info),
    )


def gather_daemon_dirs(config: DoctorConfig) -> tuple[tuple[str, str, str], ...]:
    """--actors-root (when given) and --run-dir as the daemon would use them (stats)."""
    found = []
    if config.actors_root:
        found.append(("--actors-root", config.actors_root, unusable_dir(config.actors_root)))
    found.append(("--run-dir", config.run_dir,
                  unusable_dir(config.run_dir, writable=True, creatable=True)))
    return tuple(found)


def gather_gpus(config: DoctorConfig, environ: Mapping[str, str],
                run: Runner) -> WorkerGpus:
    """The Pod's GPUs as the daemon gathers them (reads /proc, runs nvidia-smi once)."""
    smi = config.nvidia_smi or find_nvidia_smi(config.node.driver_root, environ.get("PATH", ""))
    return gather_worker_gpus(proc_root=config.gpu.proc_root, gpu_glob=config.node.gpu_glob,
                              nvidia_smi=smi, runner=run, smi_timeout=config.probe_timeout)


def gather_cuda_checkpoint(config: DoctorConfig, environ: Mapping[str, str],
                           run: Runner) -> CudaCheckpointFacts:
    """cuda-checkpoint where the daemon would take it from (stats, runs its --help)."""
    return probe(config.gpu.cuda_checkpoint, driver_root=config.node.driver_root,
                 toolkit_dir=config.node.toolkit_dir, path_env=environ.get("PATH", ""),
                 runner=run, timeout=config.probe_timeout)


def gather(
    config: DoctorConfig,
    environ: Mapping[str, str] = os.environ,
    run: Runner = subprocess_runner,
) -> Facts:
    """Look at the machine as `config` describes it (globs, stats, ELF, runsc, plans).

    Commands (runsc, nvidia-ctk, nvidia-smi, cuda-checkpoint) go through `run`.
    """
    gpu_paths = sorted(glob.glob(config.node.gpu_glob), key=natural)
    spec, nodes, libraries, injection = gather_cdi(config, environ, run)
    return Facts(
        config=config,
        gpu_nodes=tuple(stat_node(p) for p in gpu_paths),
        control_nodes=tuple(stat_node(p) for p in config.control_node_paths),
        driver_root=dir_fact(config.node.driver_root),
        driver_lib_dir=dir_fact(config.node.driver_lib_dir),
        driver_bin_dir=dir_fact(config.node.driver_bin_dir),
        toolkit_dir=dir_fact(config.node.toolkit_dir),
        tools=tuple(tool_fact(config.node.toolkit_dir, n)
                    for n in ("nvidia-cdi-hook", "nvidia-ctk")),
        spec=spec,
        spec_nodes=nodes,
        libraries=libraries,
        runsc=gather_runsc(config, run),
        host_driver_version=host_driver_version(config),
        injection=injection,
        worker_gpus=gather_gpus(config, environ, run),
        cuda_checkpoint=gather_cuda_checkpoint(config, environ, run),
        userns=gather_userns(run, config.probe_timeout),
        cgroups=gather_cgroups(),
        daemon_dirs=gather_daemon_dirs(config),
        capacity=read_capacity(config.capacity_dir),
    )


# Where callers found these before the shell was split along its nouns.
