"""Test configs spelled as the flags spell them: `daemon_config(gpu_glob=..., proc_root=...)`.

`DaemonConfig` and `DoctorConfig` hold the node's and the GPU settings as one
typed value each (`ateom.settings`); a test names the few it changes, flat,
and these put each where it belongs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ateom.daemon.lifecycle.config import DaemonConfig
from ateom.doctor.config import DoctorConfig
from ateom.settings import GpuSettings, NodeSettings

_NODE = ("driver_root", "toolkit_dir", "spec_dirs", "gpu_glob")
# flag-spelled name -> GpuSettings field
_GPU = {"cuda_checkpoint": "cuda_checkpoint", "cuda_checkpoint_timeout": "cuda_checkpoint_timeout",
        "gpu_placement": "placement", "proc_root": "proc_root"}
_NVPROXY = {"nvproxy_driver_version": "driver_version", "nvproxy_capabilities": "capabilities"}


def _split(kw: dict[str, Any], node: NodeSettings, gpu: GpuSettings) -> dict[str, Any]:
    node = replace(node, **{k: kw.pop(k) for k in _NODE if k in kw})
    nvproxy = replace(gpu.nvproxy, **{f: kw.pop(k) for k, f in _NVPROXY.items() if k in kw})
    gpu = replace(gpu, nvproxy=nvproxy, **{f: kw.pop(k) for k, f in _GPU.items() if k in kw})
    return {**kw, "node": node, "gpu": gpu}


def daemon_config(**kw: Any) -> DaemonConfig:
    """A config as the flags spell it; runsc's global flags default to ``--network=none``,
    as every worker here runs: the node agent's bundles name no network namespace, which
    runsc's own default network refuses (`readiness.host_problems`)."""
    kw.setdefault("runsc_global_flags", ("--network=none",))
    return DaemonConfig(**_split(kw, NodeSettings(), GpuSettings()))


def doctor_config(base: DoctorConfig | None = None, **kw: Any) -> DoctorConfig:
    base = base or DoctorConfig()
    return replace(base, **_split(kw, base.node, base.gpu))


__all__ = ["daemon_config", "doctor_config"]
