"""What the steps share: bounded commands (`run`), the node's facts read from its files
(`nearest_driver`, `judge_runtime`; ateom.gpuinfo parses the rest), the
``nvidia.com/gpu`` spec such a node gets (`node_spec`), the scrub of what comes back
(`scrub`) and the packing of it. Pure where it can be; nothing here runs a step.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The binaries `nvidia-ctk cdi generate` mounts into a container, when the node has them.
SPEC_BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
                 "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
# gVisor reports this fixed kernel (pkg/sentry/kernel/version.go).
GVISOR_PROC_VERSION = "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016"
_UUID_RE = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")
_SERIAL_RE = re.compile(r"^(\s*Serial Number\s*:\s*)(\S.*)$", re.MULTILINE)


class StepFailed(Exception):
    """A step's check failed; the message says what was seen."""


class CallFailed(StepFailed):
    """An RPC to the daemon failed; `code` is its gRPC status (RESOURCE_EXHAUSTED...)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class Skip(Exception):
    """A step not run, and why (too little time left, nothing to run it on)."""


@dataclass
class Ran:
    """One bounded command: what it printed and how it ended."""

    argv: list[str]
    rc: int | None  # None: killed at its bound
    out: str
    err: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def why(self) -> str:
        """One line saying how it failed ("" when it did not)."""
        if self.rc is None:
            return f"{self.argv[0]}: no answer within {self.seconds:.0f} s (killed)"
        if self.rc != 0:
            tail = (self.err.strip() or self.out.strip()).splitlines()[-3:]
            return f"{self.argv[0]} exited {self.rc}: {' | '.join(tail)}"
        return ""


def run(argv: Sequence[str], timeout: float, *, env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None) -> Ran:
    """Run `argv` for at most `timeout` s; never raises for a failing command. Not
    `ateom.process.runner.subprocess_runner`: that one merges stderr into stdout, and
    the ateom verbs run here print JSON on stdout alone."""
    started = time.monotonic()
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, errors="replace",
                           timeout=timeout, env=None if env is None else dict(env), cwd=cwd,
                           stdin=subprocess.DEVNULL)
        return Ran(list(argv), p.returncode, p.stdout, p.stderr, time.monotonic() - started)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        return Ran(list(argv), None, out, "", time.monotonic() - started)
    except OSError as exc:
        return Ran(list(argv), 127, "", str(exc), time.monotonic() - started)


# -- facts (pure) -------------------------------------------------------------------------


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def nearest_driver(version: str, supported: Iterable[str]) -> str:
    """The listed version nvproxy should be pinned to for a driver it does not list:
    the newest listed one of the same branch not above it (its ioctls are a subset of
    what this driver answers), else the oldest of the branch above it, else the newest
    listed below it; "" when nothing is listed."""
    listed = sorted(set(supported), key=_key)
    if not listed:
        return ""
    want = _key(version)
    branch = [v for v in listed if _key(v)[:1] == want[:1]]
    below = [v for v in branch if _key(v) <= want]
    if below:
        return below[-1]
    if branch:
        return branch[0]
    older = [v for v in listed if _key(v) <= want]
    return older[-1] if older else listed[0]


def judge_runtime(proc_version: str, cmdline: str) -> tuple[str, str]:
    """(gvisor | firecracker | other, what that was judged from)."""
    if proc_version.startswith(GVISOR_PROC_VERSION):
        return "gvisor", "/proc/version is gVisor's fixed 4.4.0 line"
    release = proc_version.split()[2] if len(proc_version.split()) > 2 else ""
    if "-fc-" in release or "virtio_mmio.device" in cmdline:
        return "firecracker", f"kernel {release!r}, /proc/cmdline's virtio_mmio devices"
    return "other", f"kernel {release!r}"


def scrub(text: str, names: dict[str, str]) -> str:
    """`text` with every GPU/MIG UUID replaced by a fixed fake (the same fake for the
    same UUID across files, kept in `names`) and serial numbers zeroed."""
    def fake(m: re.Match[str]) -> str:
        real = m.group(0)
        if real not in names:
            names[real] = f"{m.group(1)}-f0000000-0000-4000-8000-{len(names):012d}"
        return names[real]
    text = _UUID_RE.sub(fake, text)
    return _SERIAL_RE.sub(lambda m: m.group(1) + "0" * len(m.group(2).strip()), text)


# -- the spec ---------------------------------------------------------------------------


def driver_libraries(lib_dir: Path, version: str) -> list[Path]:
    """The driver's own libraries in `lib_dir`: every ``lib*.so.<version>`` file."""
    return sorted(p for p in lib_dir.glob(f"lib*.so.{version}") if p.is_file())


def find_lib_dir(driver_root: str, version: str, ldconfig: str) -> str:
    """Where this node's driver libraries are: the first of the driver root's lib64/
    and lib/, then the dir ``ldconfig -p`` (its output: `ldconfig`) gives libcuda.so.1,
    that holds ``libcuda.so.<version>``; the driver root's lib64/ when none does."""
    candidates = [f"{driver_root}/lib64", f"{driver_root}/lib"]
    for line in ldconfig.splitlines():
        if line.strip().startswith("libcuda.so.1 ") and "=>" in line:
            candidates.append(os.path.dirname(line.split("=>", 1)[1].strip()))
    for d in candidates:
        if version and os.path.isfile(f"{d}/libcuda.so.{version}"):
            return d
    return candidates[0]


def node_spec(gpu_nodes: Sequence[str], control_nodes: Sequence[str],
              libraries: Sequence[Path], binaries: Sequence[Path], lib_dir: str
              ) -> dict[str, Any]:
    """The ``nvidia.com/gpu`` spec ``nvidia-ctk cdi generate`` writes for such a node:
    one device per GPU node (named by its place, as nvidia-smi numbers them) and
    ``all``; the control nodes, the driver's libraries and binaries at their host
    paths; no hooks (ateom stages the libraries' SONAME links itself)."""
    def node(path: str) -> dict[str, str]:
        return {"path": path, "hostPath": path}
    mounts = [{"hostPath": str(p), "containerPath": str(p),
               "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}
              for p in (*libraries, *binaries)]
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [*({"name": str(i), "containerEdits": {"deviceNodes": [node(g)]}}
                      for i, g in enumerate(gpu_nodes)),
                    {"name": "all", "containerEdits": {
                        "deviceNodes": [node(g) for g in gpu_nodes]}}],
        "containerEdits": {
            "env": [f"NVIDIA_CTK_LIBCUDA_DIR={lib_dir}", "NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [node(c) for c in control_nodes],
            "mounts": mounts,
        },
    }


# -- packing what comes back ----------------------------------------------------------------


def add_text(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def add_file_tail(tar: tarfile.TarFile, name: str, path: Path, limit: int) -> None:
    """`path` as `name`, its last `limit` bytes only (logs can be large)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return
    if size > limit:
        data = f"[first {size - limit} bytes left out]\n".encode() + data
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def dump(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"
