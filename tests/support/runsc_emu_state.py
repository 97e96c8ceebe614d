"""The runsc emulator's files: its config, call records, per-container state, image notes.

Everything the emulator keeps between calls, and where (all JSON, all
written through `ateom.safefs`: the emulator runs as root too):

- per container: ``<-root>/.runsc-emulator/<id>.json`` (`ContainerState`:
  which sandbox, whether that sandbox has nvproxy, whether the container is a
  GPU container, the driver the sandbox uses). The real runsc lists only its
  own ``<id>_sandbox:<sid>.state`` files, so it never sees this directory.
- a multi-container restore in progress: ``<-root>/.runsc-emulator/restore-<sandbox>.json``.
- per checkpoint image: ``<image-path>/runsc-emulator.json`` (`ImageNote`):
  what the release records inside its own image (driver version, GPUs for
  remapping, cuda-checkpoint state) and the real image lacks.
- the call record: one JSON line per call, in the file `install_runsc` names.

Functions that read or write say so; the dataclasses are plain data.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ateom import safefs
from tests.support.runsc_emu_gpu import SimGpu, driver_version_from_proc

STATE_DIR = ".runsc-emulator"
IMAGE_NOTE = "runsc-emulator.json"
# runsc's compiled-in default for -root.
DEFAULT_ROOT = "/var/run/runsc"


@dataclass(frozen=True, slots=True)
class EmuConfig:
    """What `install_runsc` wrote for the emulator (paths, all absolute)."""

    release_file: str
    real_profile: str  # the probed real runsc (`runsc_real.real_profile_json`)
    real_runsc: str
    record: str
    driver_version_file: str
    gpus_file: str

    @classmethod
    def read(cls, path: str) -> EmuConfig:
        """Read the config file at `path`."""
        with open(path, "rb") as f:
            data = json.load(f)
        return cls(**{k: str(data[k]) for k in cls.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class ContainerState:
    """What the release knows about a container that the real runsc does not."""

    container: str
    sandbox: str
    bundle: str
    nvproxy: bool  # the sandbox's nvproxy
    gpu: bool  # asks for GPUs in an nvproxy sandbox: its processes are GPU clients
    driver_version: str | None  # the driver the sandbox's nvproxy uses
    # The real runsc behind runs this sandbox with its own nvproxy (pinned to a
    # driver it knows): a spec with NVIDIA device nodes needs it there (Debian's
    # 0.0~20240729 panics creating them without it).
    real_nvproxy: bool = False

    @property
    def is_sandbox_root(self) -> bool:
        return self.container == self.sandbox


@dataclass(frozen=True, slots=True)
class ImageNote:
    """What the release would have recorded in its checkpoint image."""

    release: str
    sandbox: str
    containers: tuple[str, ...]  # sandbox root first
    nvproxy: bool
    driver_version: str | None
    gpus: tuple[SimGpu, ...] = ()  # recorded for remapping at restore
    cuda_checkpoint_path: str = ""
    cuda_sequential: bool = False
    cuda_procs: tuple[tuple[str, int], ...] = ()  # (container, pid) toggled before the save
    # Each container's spec devices at the save, as (path, type): a restore's spec is
    # validated against them by path (runsc/specutils/restore.go validateDevices).
    devices: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release, "sandbox": self.sandbox,
                "containers": list(self.containers), "nvproxy": self.nvproxy,
                "driver_version": self.driver_version,
                "gpus": [g.to_json() for g in self.gpus],
                "cuda_checkpoint_path": self.cuda_checkpoint_path,
                "cuda_sequential": self.cuda_sequential,
                "cuda_procs": [list(p) for p in self.cuda_procs],
                "devices": {c: [list(d) for d in ds] for c, ds in self.devices.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImageNote:
        return cls(
            release=str(data["release"]), sandbox=str(data["sandbox"]),
            containers=tuple(data["containers"]), nvproxy=bool(data["nvproxy"]),
            driver_version=data.get("driver_version"),
            gpus=tuple(SimGpu.from_json(g) for g in data.get("gpus", ())),
            cuda_checkpoint_path=str(data.get("cuda_checkpoint_path", "")),
            cuda_sequential=bool(data.get("cuda_sequential", False)),
            cuda_procs=tuple((str(c), int(p)) for c, p in data.get("cuda_procs", ())),
            devices={str(c): tuple((str(p), str(k)) for p, k in ds)
                     for c, ds in data.get("devices", {}).items()},
        )


def _state_path(root: str, name: str) -> str:
    return os.path.join(root, STATE_DIR, f"{name}.json")


def _read_json(path: str, beneath: str) -> Any:
    try:
        data, _ = safefs.read_file(path, beneath=beneath)
    except OSError:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def _write_json(path: str, value: Any, beneath: str) -> None:
    safefs.write_atomic(path, json.dumps(value, indent=1).encode(), beneath=beneath,
                        mode=0o600, make_parents=True)


def read_container_state(root: str, container: str) -> ContainerState | None:
    """Read one container's state (None when the emulator never created it)."""
    data = _read_json(_state_path(root, container), root)
    return ContainerState(**data) if isinstance(data, dict) and "sandbox" in data else None


def write_container_state(root: str, state: ContainerState) -> None:
    """Write one container's state under `root`."""
    _write_json(_state_path(root, state.container), {
        k: getattr(state, k) for k in ContainerState.__dataclass_fields__}, root)


def remove_state(root: str, name: str) -> None:
    """Remove a container's (or a pending restore's) state file, if any."""
    try:
        os.unlink(_state_path(root, name))
    except OSError:
        pass


def sandbox_members(root: str, sandbox: str) -> list[ContainerState]:
    """Read the states of every container of `sandbox`, its root first."""
    try:
        names = sorted(os.listdir(os.path.join(root, STATE_DIR)))
    except OSError:
        return []
    found = [read_container_state(root, n[:-5]) for n in names
             if n.endswith(".json") and not n.startswith("restore-")]
    members = [s for s in found if s is not None and s.sandbox == sandbox]
    return sorted(members, key=lambda s: (not s.is_sandbox_root, s.container))


def read_pending_restore(root: str, sandbox: str) -> dict[str, Any] | None:
    """Read a multi-container restore in progress for `sandbox`."""
    data = _read_json(_state_path(root, f"restore-{sandbox}"), root)
    return data if isinstance(data, dict) else None


def write_pending_restore(root: str, sandbox: str, pending: Mapping[str, Any]) -> None:
    """Write a multi-container restore in progress for `sandbox`."""
    _write_json(_state_path(root, f"restore-{sandbox}"), dict(pending), root)


def read_image_note(image_path: str) -> ImageNote | None:
    """Read the release's notes from a checkpoint image (None: not taken by the emulator)."""
    data = _read_json(os.path.join(image_path, IMAGE_NOTE), image_path)
    try:
        return ImageNote.from_json(data) if isinstance(data, dict) else None
    except (KeyError, TypeError, ValueError):
        return None


def write_image_note(image_path: str, note: ImageNote) -> None:
    """Write the release's notes next to the image (beside checkpoint.img)."""
    _write_json(os.path.join(image_path, IMAGE_NOTE), note.to_json(), image_path)


def read_host_driver(config: EmuConfig) -> str | None:
    """Read the simulated ``/proc/driver/nvidia/version`` (None when absent)."""
    try:
        with open(config.driver_version_file, encoding="utf-8", errors="replace") as f:
            return driver_version_from_proc(f.read())
    except OSError:
        return None


def read_gpus(config: EmuConfig) -> tuple[SimGpu, ...]:
    """Read the simulated host GPUs (none when the file is absent)."""
    data = _read_json(config.gpus_file, os.path.dirname(config.gpus_file))
    return tuple(SimGpu.from_json(g) for g in data) if isinstance(data, list) else ()


def _open_append(path: str, mode: int = 0o640) -> int:
    """An O_APPEND fd of `path` (created with `mode`), never through a symlink there."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                   mode)


def append_record(path: str, record: Mapping[str, Any]) -> None:
    """Append one call record as a JSON line (one write: concurrent calls do not interleave)."""
    fd = _open_append(path, mode=0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def log_line(log_file: str | None, level: str, msg: str) -> None:
    """Append a runsc-style JSON log line to ``-log`` (what util.Fatalf also writes)."""
    if not log_file:
        return
    line = {"msg": msg, "level": level,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"}
    try:
        fd = _open_append(log_file)
    except OSError:
        return
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def spec_devices(spec: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """A spec's ``linux.devices`` as sorted (path, type): what a restore validates."""
    linux = (spec or {}).get("linux") or {}
    return tuple(sorted((str(d.get("path", "")), str(d.get("type", "")))
                        for d in linux.get("devices") or ()))


def read_spec(bundle: str) -> dict[str, Any] | None:
    """Read a bundle's ``config.json`` (None when unreadable: runsc reports that itself)."""
    try:
        with open(os.path.join(bundle, "config.json"), "rb") as f:
            spec = json.load(f)
    except (OSError, ValueError):
        return None
    return spec if isinstance(spec, dict) else None


def sandbox_of(spec: Mapping[str, Any] | None, container: str) -> str:
    """The sandbox a container joins: the CRI annotations' sandbox id, or itself (pure)."""
    notes = (spec or {}).get("annotations") or {}
    for kind, sid in (("io.kubernetes.cri.container-type", "io.kubernetes.cri.sandbox-id"),
                      ("io.kubernetes.cri-o.ContainerType", "io.kubernetes.cri-o.SandboxID")):
        if notes.get(kind) == "container" and isinstance(notes.get(sid), str):
            return str(notes[sid])
    return container


def pids_from_ps(output: str) -> list[int]:
    """PIDs from ``runsc ps -format json`` ([1, 2] on Debian's 2022 build, objects on
    newer; pure)."""
    start = output.find("[")
    try:
        items: Sequence[Any] = json.loads(output[start:]) if start >= 0 else []
    except ValueError:
        return []
    pids = [i.get("PID", i.get("pid")) if isinstance(i, dict) else i for i in items]
    return [int(p) for p in pids if isinstance(p, int)]
