#!/usr/bin/env python3
"""Benchmark: ateom's own time in a GPU actor's CheckpointWorkload, beyond runsc.

    sudo python benchmarks/bench_gpu_checkpoint.py [-n 15] [--release 20260817]

Each op: a GPU actor (sandbox root + one app with 2 simulated GPUs) is run
(untimed), then checkpointed through `AteomService.checkpoint_workload`
(timed). runsc is the release emulator in front of Debian's runsc; it runs
the stand-in cuda-checkpoint inside the sandbox (`runsc exec`) and saves.
Every runsc command ateom starts is timed from spawn to exit (`Reaper.run`)
and subtracted: what is left is ateom's own work around the save (the
refusal checks, gathering the GPU facts, the record built and written with
fsync, the image dir diffed, bundles given back, GPUs released, logging).
Target: <= 10 ms. Prints min/median/p99 of ateom's own time and of the whole
call, and a last JSON line {"n", "min_us", "median_us", "p99_us"} (own time).
Needs root, runsc, gcc and /bin/busybox.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog

from ateom.daemon.calls.requests import (
    ActorDirs,
    ActorRef,
    CheckpointRequest,
    ContainerRequest,
    RunRequest,
)
from ateom.daemon.lifecycle.service import AteomService
from ateom.process.reaper import Reaper
from tests.support import (
    build_busybox_bundle,
    build_fake_driver_libs,
    install_cuda_checkpoint_stub,
    install_runsc,
    sim_gpus,
    write_sim_gpu_spec,
)
from tests.support.configs import daemon_config
from tests.support.gpu_node import SimGpu, write_gpu_node, write_sim_fixture

DRIVER = "580.65.06"


class TimedReaper(Reaper):
    """A reaper that adds up the wall time of every command it runs."""

    spent = 0.0

    def run(self, argv: Any, **kw: Any) -> Any:  # type: ignore[override]
        started = time.perf_counter()
        try:
            return super().run(argv, **kw)
        finally:
            self.spent += time.perf_counter() - started


def world(base: Path, release: str) -> tuple[AteomService, TimedReaper]:
    libs = build_fake_driver_libs(base / "lib64")
    write_sim_gpu_spec(base / "cdi", libs, gpus=2)
    sims = [SimGpu(index=i, minor=i, uuid=f"GPU-{i:08d}-0000-4000-8000-00000000abcd")
            for i in range(2)]
    node = write_gpu_node(base / "node", write_sim_fixture(base / "fx", sims,
                                                          driver_version=DRIVER))
    emu = install_runsc(release, base / "bin", real_runsc=shutil.which("runsc") or "runsc",
                        driver_version=DRIVER, gpus=sim_gpus(2))
    stub = install_cuda_checkpoint_stub(base / "tool", record_dir="/cuda-stub")
    reaper = TimedReaper()
    reaper.start(reap_all=False)
    config = daemon_config(
        actors_root=str(base / "actors"), runsc=str(emu.path), run_dir=str(base / "run"),
        spec_dirs=(str(base / "cdi"),), gpu_glob=node.gpu_glob, proc_root=node.proc_root,
        cuda_checkpoint=str(stub.host_dir / "cuda-checkpoint"), kill_grace=0.2,
        runsc_global_flags=("--network=none", "--ignore-cgroups"),
        env={"PATH": f"{os.path.dirname(node.nvidia_smi)}:{os.defpath}"})
    return AteomService(config, reaper=reaper), reaper


def one(service: AteomService, reaper: TimedReaper, base: Path, i: int) -> tuple[float, float]:
    uid = f"g{i}"
    root = base / "actors" / uid
    record = root / "cuda-stub"
    record.mkdir(parents=True)
    build_busybox_bundle(root / "bundles" / "_pause", ["sleep", "1000"])
    build_busybox_bundle(root / "bundles" / "app", ["sh", "-c", "while true; do sleep 1; done"],
                         mounts=[{"destination": "/cuda-stub", "type": "bind",
                                  "source": str(record), "options": ["rbind", "rw"]}])
    dirs = ActorDirs(root_dir=str(root), oci_bundle_dir=str(root / "bundles"),
                     checkpoint_dir=str(root / "ckpt"))
    service.run_workload(RunRequest(actor=ActorRef(uid), dirs=dirs,
                                    containers=(ContainerRequest("app"),)))
    reaper.spent = 0.0
    started = time.perf_counter()
    service.checkpoint_workload(CheckpointRequest(actor=ActorRef(uid), dirs=dirs))
    total = time.perf_counter() - started
    return total - reaper.spent, total


def summary(name: str, values: list[float]) -> dict[str, float]:
    us = sorted(v * 1e6 for v in values)
    p99 = us[min(len(us) - 1, round(0.99 * (len(us) - 1)))]
    out = {"n": len(us), "min_us": round(us[0], 1), "median_us": round(statistics.median(us), 1),
           "p99_us": round(p99, 1)}
    print(f"{name:28} min {out['min_us'] / 1000:8.2f} ms  median {out['median_us'] / 1000:8.2f}"
          f" ms  p99 {out['p99_us'] / 1000:8.2f} ms  (n={len(us)})")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=15)
    parser.add_argument("--release", default="20260817")
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("runsc"):
        print("needs root and runsc", file=sys.stderr)
        return 2
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    base = Path(tempfile.mkdtemp(prefix="ateom-bench-gpu-ckpt-"))
    try:
        service, reaper = world(base, args.release)
        own, whole = [], []
        for i in range(args.n):
            mine, total = one(service, reaper, base, i)
            own.append(mine)
            whole.append(total)
        summary("whole CheckpointWorkload", whole)
        result = summary("ateom's own (no runsc)", own)
        print(json.dumps(result))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
