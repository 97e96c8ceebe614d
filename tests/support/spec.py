"""A simulated-GPU CDI spec, shaped like ``nvidia-ctk cdi generate`` output."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.driver import FakeLibrary

SIM_GPU_KIND = "nvidia.com/gpu"

# Host char devices that exist on every Linux box and are harmless to open:
# the GPU and control nodes of the simulated spec point at them via hostPath.
STAND_IN_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

_CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_HOOK_ENV = ["NVIDIA_CTK_DEBUG=false"]


def _hook(hook_path: str, *args: str) -> dict[str, Any]:
    return {
        "hookName": "createContainer",
        "path": hook_path,
        "args": ["nvidia-cdi-hook", *args],
        "env": list(_HOOK_ENV),
    }


def write_sim_gpu_spec(
    spec_dir: str | os.PathLike[str],
    libraries: Sequence[FakeLibrary | str | os.PathLike[str]],
    *,
    gpus: int = 2,
    container_lib_dir: str = "/usr/local/nvidia/lib64",
    driver_version: str = "580.65.06",
    hook_path: str = "/usr/bin/nvidia-cdi-hook",
    explicit_numbers: bool = False,
    file_name: str = "nvidia.json",
) -> Path:
    """Write an ``nvidia.com/gpu`` CDI spec to `spec_dir`/`file_name`; returns its path.

    Devices ``"0"``..``str(gpus-1)`` and ``"all"``. GPU node ``/dev/nvidia<i>``
    and the control nodes (``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ...) take
    their ``hostPath`` from `STAND_IN_DEVICES` in turn (GPU i gets
    ``STAND_IN_DEVICES[i % 5]``; control nodes start at the next one). With
    `explicit_numbers` False (the default) nodes carry no type/major/minor, so
    an injector must stat the stand-in, and a runtime that creates nodes (runc)
    gives the container e.g. ``/dev/nvidia0`` as ``c 1:3``. With True they
    carry the stand-in's own numbers explicitly.

    Spec-level edits: env ``NVIDIA_CTK_LIBCUDA_DIR=<container_lib_dir>`` and
    ``NVIDIA_VISIBLE_DEVICES=void``; one read-only bind mount per library at
    `container_lib_dir`/<file name>; and nvidia-cdi-hook createContainer hooks
    ``create-symlinks`` (libcuda.so -> libcuda.so.1), ``enable-cuda-compat``,
    ``update-ldcache`` and ``disable-device-node-modification``.
    The file is JSON (YAML is a superset, so a ``.yaml`` name also parses).
    """
    if gpus < 1:
        raise ValueError("gpus must be >= 1")
    spec_dir = Path(spec_dir)
    spec_dir.mkdir(parents=True, exist_ok=True)

    def node(path: str, stand_in: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"path": path, "hostPath": stand_in}
        if explicit_numbers:
            st = os.stat(stand_in)
            entry.update(type="c", major=os.major(st.st_rdev), minor=os.minor(st.st_rdev))
        return entry

    n = len(STAND_IN_DEVICES)
    gpu_nodes = [node(f"/dev/nvidia{i}", STAND_IN_DEVICES[i % n]) for i in range(gpus)]
    control = [
        node(path, STAND_IN_DEVICES[(gpus + k) % n]) for k, path in enumerate(_CONTROL_NODES)
    ]
    devices: list[dict[str, Any]] = [
        {"name": str(i), "containerEdits": {"deviceNodes": [gpu_nodes[i]]}} for i in range(gpus)
    ]
    devices.append({"name": "all", "containerEdits": {"deviceNodes": list(gpu_nodes)}})

    mounts = []
    for lib in libraries:
        host = lib.path if isinstance(lib, FakeLibrary) else Path(lib)
        mounts.append(
            {
                "hostPath": str(host),
                "containerPath": f"{container_lib_dir.rstrip('/')}/{host.name}",
                "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"],
            }
        )
    hooks = [
        _hook(hook_path, "create-symlinks", "--link",
              f"libcuda.so.1::{container_lib_dir.rstrip('/')}/libcuda.so"),
        _hook(hook_path, "enable-cuda-compat", f"--host-driver-version={driver_version}"),
        _hook(hook_path, "update-ldcache", "--folder", container_lib_dir),
        _hook(hook_path, "disable-device-node-modification"),
    ]
    spec = {
        "cdiVersion": "0.5.0",
        "kind": SIM_GPU_KIND,
        "devices": devices,
        "containerEdits": {
            "env": [f"NVIDIA_CTK_LIBCUDA_DIR={container_lib_dir}", "NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": control,
            "hooks": hooks,
            "mounts": mounts,
        },
    }
    out = spec_dir / file_name
    out.write_text(json.dumps(spec, indent=2) + "\n")
    return out
