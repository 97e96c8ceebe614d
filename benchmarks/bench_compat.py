#!/usr/bin/env python3
"""Benchmark: the GPU restore check on an 8-GPU checkpoint (ateom.gpuinfo.compat).

    python benchmarks/bench_compat.py [-n N]

Each op (timed) is one `check_restore` of an 8 x H200 record (the recorded
h200-8gpu node's facts) against a worker, in the three shapes a restore
meets:

- same: the worker the checkpoint was taken on (identity mapping);
- remap: another 8-GPU worker with other cards in shuffled minors, runsc
  remaps (plan of 8 pairs);
- refused: a worker with another driver, another runsc and 4 H100s (every
  refusal built);

plus `place_restore` of a 2-GPU record among 8 free GPUs. Prints
min/median/p99 per shape, then a last JSON line for the remap shape:
{"n":..., "min_us":..., "median_us":..., "p99_us":...}. Target: <= 1 ms;
expected: tens of microseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

from ateom.gpuinfo.compat import check_restore, place_restore
from ateom.gpuinfo.inventory import GpuFacts, WorkerGpus
from ateom.gpuinfo.record import (
    ContainerDevices,
    RunscBuild,
    build_record,
    parse_record,
    record_json,
)

RUNSC = RunscBuild("release-20260706.0")


def _gpu(minor: int, node: str, device: int = 0x2335, memory: int = 143771) -> GpuFacts:
    return GpuFacts(minor, minor, f"GPU-{node}0000000-0000-4000-8000-{minor:012x}",
                    "NVIDIA H200", f"0000:{0x59 + minor:02x}:00.0", 0x10DE, device, memory)


def _measure(fn: Callable[[], object], n: int) -> list[float]:
    for _ in range(50):  # warm up
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    samples.sort()
    return samples


def _figures(samples: list[float]) -> dict[str, float]:
    p99 = samples[min(len(samples) - 1, int(round(0.99 * (len(samples) - 1))))]
    return {"n": len(samples), "min_us": round(samples[0], 1),
            "median_us": round(statistics.median(samples), 1), "p99_us": round(p99, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=5000)
    a = ap.parse_args(argv)

    saved = [_gpu(i, "a") for i in range(8)]
    containers = [ContainerDevices("trainer", ("nvidia.com/gpu=all",), "sha256:" + "0" * 64)]
    # Through JSON and back, as a restore reads it from the checkpoint.
    record = parse_record(record_json(build_record(
        runsc=RUNSC, driver_version="580.95.05", gpus=saved, containers=containers))).record
    same = WorkerGpus("580.95.05", tuple(saved))
    other = WorkerGpus("580.95.05", tuple(_gpu(i, "b") for i in (7, 1, 4, 0, 3, 6, 2, 5)))
    refusing = WorkerGpus("580.105.08", tuple(_gpu(i, "c", 0x2330, 81559) for i in range(4)))
    small = build_record(runsc=RUNSC, driver_version="580.95.05", gpus=saved[2:4],
                         containers=containers)
    free = other.gpus

    shapes: dict[str, Callable[[], object]] = {
        "same": lambda: check_restore(record, same, runsc_version=RUNSC,
                                      runsc_supports_remap=True),
        "remap": lambda: check_restore(record, other, runsc_version=RUNSC,
                                       runsc_supports_remap=True),
        "refused": lambda: check_restore(record, refusing, runsc_version="release-20260817.0",
                                         runsc_supports_remap=True),
        "place 2 of 8": lambda: place_restore(small, free, runsc_supports_remap=True),
    }
    assert check_restore(record, other, runsc_version=RUNSC, runsc_supports_remap=True).remap
    assert len(check_restore(record, refusing, runsc_version="x",
                             runsc_supports_remap=True).refusals) == 3
    figures = {}
    for name, fn in shapes.items():
        figures[name] = _figures(_measure(fn, a.n))
        f = figures[name]
        print(f"{name:>13}: min {f['min_us']:7.1f} us  median {f['median_us']:7.1f} us  "
              f"p99 {f['p99_us']:7.1f} us  (n={f['n']})")
    print(json.dumps(figures["remap"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
