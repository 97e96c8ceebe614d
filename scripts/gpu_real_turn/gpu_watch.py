"""The GPU as nvidia-smi sees it from the host: the processes on it (as ateom reads
them) and the memory in use, once or sampled while a checkpoint runs."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from ateom.gpuinfo.gather import device_memory_by_pid
from ateom.process.runner import subprocess_runner
from scripts.gpu_real_turn.node import StepFailed, run

MEMORY_ARGS = ("--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits")


class GpuWatch:
    def __init__(self, nvidia_smi: str) -> None:
        self.nvidia_smi = nvidia_smi

    def use(self) -> dict[str, Any]:
        """Processes on the GPU (pid -> MiB, as ateom reads them) and its memory in use."""
        held, why = device_memory_by_pid(self.nvidia_smi, subprocess_runner)
        if held is None:
            raise StepFailed(why)
        return {"processes": {str(pid): mib for pid, mib in held.items()},
                "memory_used_mib": self.memory_used()}

    def memory_used(self) -> int:
        """MiB in use on the node's GPUs, summed (nvidia-smi's memory.used)."""
        r = run([self.nvidia_smi, *MEMORY_ARGS], 10)
        if not r.ok:
            raise StepFailed(f"nvidia-smi {MEMORY_ARGS[0]}: {r.why()}")
        rows = [line.split(",") for line in r.out.splitlines() if line.count(",") >= 2]
        return sum(int(row[1]) for row in rows if row[1].strip().isdigit())

    def sample(self, stop: threading.Event, out: list[tuple[float, int]]) -> None:
        began = time.monotonic()
        while not stop.is_set():
            with contextlib.suppress(StepFailed):
                out.append((time.monotonic() - began, self.memory_used()))
            stop.wait(0.2)
