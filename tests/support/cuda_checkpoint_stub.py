"""A stand-in ``cuda-checkpoint`` to run inside a busybox sandbox.

runsc (20260608+, ``checkpoint --cuda-checkpoint-path``) runs NVIDIA's
cuda-checkpoint inside the sandbox, in each CUDA process's container. This
stand-in is a ``#!/bin/sh`` script in a host directory that a test
bind-mounts (read-write) into the container: each run appends its argv,
tab-separated and argv[0] first, to ``calls`` beside it, then behaves as the
``mode`` file beside it says, so a test can switch it between calls:

- ``ok`` (default): exit 0; ``--get-state`` prints ``running`` as the real one does;
- ``fail``: a message on stdout and exit 1;
- ``hang``: never returns (cuda-checkpoint stuck on a GPU).

A mode may name the runs it applies to: ``fail --toggle`` fails only runs
whose arguments contain ``--toggle``, ``fail --toggle --pid 2`` only that
PID's toggle; the others behave as ``ok``.

    stub = install_cuda_checkpoint_stub(tmp / "ckpt")
    build_busybox_bundle(bundle, ["sleep", "1000"], mounts=[stub.mount()])
    runsc checkpoint --cuda-checkpoint-path=<stub.path> ...
    stub.calls()  # [("/opt/cuda-checkpoint/cuda-checkpoint", "--toggle", "--pid", "1")]

When the daemon mounts the stand-in *file* read-only (as ateom mounts the
worker's cuda-checkpoint), its directory is not there to write to: give
`record_dir` (a path in the container) and mount a writable host dir there;
`read_calls(host dir)` reads what it wrote.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Mode = Literal["ok", "fail", "hang"]

# One printf per run: parallel runs (the sentry toggles CUDA processes in
# parallel) append whole lines.
_SCRIPT = """#!/bin/sh
# Stand-in for NVIDIA's cuda-checkpoint in a test sandbox (tests.support.cuda_checkpoint_stub).
here=${0%/*}
line=$0
for a in "$@"; do line="$line	$a"; done
printf '%s\\n' "$line" >> "$here/calls"
mode=ok
only=
[ -f "$here/mode" ] && read -r mode only < "$here/mode"
if [ -n "$only" ]; then
    case " $* " in *" $only "*) ;; *) mode=ok ;; esac
fi
case "$mode" in
fail) echo "cuda-checkpoint stand-in: failing as its mode file says"; exit 1 ;;
hang) while :; do sleep 3600; done ;;
esac
for a in "$@"; do [ "$a" = --get-state ] && echo running; done
exit 0
"""


@dataclass(frozen=True, slots=True)
class CudaCheckpointStub:
    """The stand-in's host directory and where the container sees it."""

    host_dir: Path
    container_dir: str

    @property
    def path(self) -> str:
        """The executable's path inside the container (``--cuda-checkpoint-path``)."""
        return f"{self.container_dir}/cuda-checkpoint"

    def mount(self) -> dict[str, Any]:
        """The OCI bind mount that puts the stand-in into a container (read-write)."""
        return {"destination": self.container_dir, "type": "bind",
                "source": str(self.host_dir), "options": ["rbind", "rw"]}

    def set_mode(self, mode: Mode, only: str = "") -> None:
        """How the next runs behave; with `only`, just the runs whose arguments
        contain those words (writes the mode file)."""
        (self.host_dir / "mode").write_text(f"{mode} {only}".strip() + "\n")

    def calls(self) -> list[tuple[str, ...]]:
        """Every run so far: argv[0] then its arguments (reads the record)."""
        try:
            text = (self.host_dir / "calls").read_text()
        except FileNotFoundError:
            return []
        return [tuple(line.split("\t")) for line in text.splitlines() if line]

    def clear_calls(self) -> None:
        (self.host_dir / "calls").write_text("")


def read_calls(record_host_dir: str | os.PathLike[str]) -> list[tuple[str, ...]]:
    """The runs a stand-in recorded into a `record_dir` mounted from this host dir."""
    return CudaCheckpointStub(Path(record_host_dir), "").calls()


def install_cuda_checkpoint_stub(host_dir: str | os.PathLike[str], *,
                                 container_dir: str = "/opt/cuda-checkpoint",
                                 mode: Mode = "ok", record_dir: str = "") -> CudaCheckpointStub:
    """Write the stand-in into `host_dir` (created); returns where it is.

    `record_dir`: where, in the container, it records its runs and reads its
    mode (default: beside itself)."""
    directory = Path(host_dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "cuda-checkpoint"
    text = _SCRIPT
    if record_dir:
        text = text.replace("here=${0%/*}", f"here={record_dir}")
    script.write_text(text)
    script.chmod(0o755)
    stub = CudaCheckpointStub(directory, container_dir.rstrip("/"))
    stub.set_mode(mode)
    stub.clear_calls()
    return stub
