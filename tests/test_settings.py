"""One settings value per concern: every CLI reads the same environment twins into
the same typed values, and every default is written once (`ateom.settings`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ateom import settings
from ateom.daemon.lifecycle import config as daemon_config
from ateom.doctor import cli as doctor_cli
from ateom.doctor.config import DoctorConfig, config_from_env
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo import cli as gpuinfo_cli
from ateom.settings import GpuSettings, NodeSettings, NvproxyOptions
from tests.support.gpu_node import SimGpu, write_gpu_node, write_sim_fixture

EVERY_TWIN = {
    "ATEOM_NVIDIA_DRIVER_ROOT": "/drv", "ATEOM_NVIDIA_TOOLKIT_DIR": "/tk",
    "ATEOM_CDI_SPEC_DIRS": "/a:/b", "ATEOM_GPU_GLOB": "/g/nvidia[0-9]*",
    "ATEOM_CUDA_CHECKPOINT": "/cc/cuda-checkpoint", "ATEOM_CUDA_CHECKPOINT_TIMEOUT": "42",
    "ATEOM_NVPROXY_DRIVER_VERSION": "580.65.06", "ATEOM_NVPROXY_CAPABILITIES": "compute",
    "ATEOM_GPU_PLACEMENT": "shared:2", "ATEOM_PROC_ROOT": "/fixture/proc",
}


def _served(environ: dict[str, str], argv: list[str] | None = None) -> daemon_config.DaemonConfig:
    parser = argparse.ArgumentParser()
    daemon_config.add_flags(parser)
    return daemon_config.from_args(parser.parse_args(argv or []),
                                   {"ATEOM_ACTORS_ROOT": "/r", **environ})


def _doctor_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    doctor_cli.register(parser.add_subparsers())
    return parser.parse_args(["doctor", *argv])


def test_serve_and_doctor_read_every_twin_into_the_same_values() -> None:
    node, gpu = NodeSettings.from_env(EVERY_TWIN), GpuSettings.from_env(EVERY_TWIN)
    assert gpu == GpuSettings(cuda_checkpoint="/cc/cuda-checkpoint", cuda_checkpoint_timeout=42.0,
                              nvproxy=NvproxyOptions("580.65.06", "compute"),
                              placement="shared:2", proc_root="/fixture/proc")
    assert node == NodeSettings("/drv", "/tk", ("/a", "/b"), "/g/nvidia[0-9]*")
    served, doctor = _served(EVERY_TWIN), config_from_env(EVERY_TWIN)
    assert (served.node, served.gpu) == (doctor.node, doctor.gpu) == (node, gpu)
    # The proc root the daemon reads its GPU facts under is the doctor's too.
    assert doctor.driver_version_file == "/fixture/proc/driver/nvidia/version"


def test_every_default_is_the_settings_module_s() -> None:
    assert _served({}).gpu == GpuSettings() == DoctorConfig().gpu == GpuSettings.from_env({})
    assert _served({}).node == NodeSettings() == DoctorConfig().node == NodeSettings.from_env({})
    assert GpuSettings().placement_settings == settings.DEFAULT_PLACEMENT
    assert str(settings.DEFAULT_PLACEMENT) == settings.DEFAULT_GPU_PLACEMENT
    # Nowhere else: the daemon's and the doctor's config modules define none of their own.
    for module in (daemon_config, doctor_cli, gpuinfo_cli):
        assert not hasattr(module, "DEFAULT_GPU_PLACEMENT") or (
            module.DEFAULT_GPU_PLACEMENT is settings.DEFAULT_GPU_PLACEMENT)


def test_a_flag_wins_over_its_twin_for_serve_and_doctor_alike() -> None:
    flags = ["--proc-root", "/flag/proc", "--gpu-placement", "exclusive",
             "--nvproxy-driver-version", "550.90.07", "--driver-root", "/flag-drv"]
    served = _served(EVERY_TWIN, flags)
    doctor = doctor_cli.config_from_args(_doctor_args(flags), config_from_env(EVERY_TWIN))
    for config in (served, doctor):
        assert config.gpu.proc_root == "/flag/proc" and config.gpu.placement == "exclusive"
        assert config.gpu.nvproxy == NvproxyOptions("550.90.07", "compute")  # one flag given
        assert config.node.driver_root == "/flag-drv" and config.node.toolkit_dir == "/tk"
    assert (served.node, served.gpu) == (doctor.node, doctor.gpu)


def test_a_timeout_twin_that_is_no_number_is_refused_naming_it() -> None:
    with pytest.raises(AteomError, match=r"\$ATEOM_CUDA_CHECKPOINT_TIMEOUT='soon'") as err:
        GpuSettings.from_env({"ATEOM_CUDA_CHECKPOINT_TIMEOUT": "soon"})
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_checkpoint_info_here_reads_the_daemons_proc_root(tmp_path: Path) -> None:
    # With the daemon's own environment, `--here` must look where the daemon does.
    gpu = SimGpu(index=0, minor=0, uuid="GPU-00000000-1111-2222-3333-444444444444")
    fixture = write_sim_fixture(tmp_path / "fx", [gpu], driver_version="580.95.05")
    node = write_gpu_node(tmp_path / "node", fixture)
    env = {"ATEOM_PROC_ROOT": node.proc_root, "ATEOM_GPU_GLOB": node.gpu_glob,
           "ATEOM_RUNSC": str(tmp_path / "no-runsc"), "PATH": str(Path(node.nvidia_smi).parent)}
    here = gpuinfo_cli.gather_here(env)
    assert here.worker.driver_version == "580.95.05"
    assert [g.minor for g in here.worker.gpus] == [0]  # /proc/driver/nvidia/gpus was read
    assert here.runsc is None and "no-runsc" in here.runsc_error
    # The flag still wins.
    elsewhere = gpuinfo_cli.gather_here(env, proc_root=str(tmp_path / "empty"))
    assert [g.minor for g in elsewhere.worker.gpus] == [None]
    assert any(str(tmp_path / "empty") in p for p in elsewhere.worker.problems)



def test_an_empty_twin_means_the_default_for_serve_and_doctor_alike() -> None:
    # One reader (ateom.settings) for every CLI: an empty variable is the default
    # everywhere, not "no spec dirs" for the daemon and the defaults for the doctor.
    empty = {"ATEOM_CDI_SPEC_DIRS": "", "ATEOM_PROC_ROOT": "", "ATEOM_GPU_PLACEMENT": ""}
    served, doctor = _served(empty), config_from_env(empty)
    assert (served.node, served.gpu) == (doctor.node, doctor.gpu) == (NodeSettings(),
                                                                      GpuSettings())
