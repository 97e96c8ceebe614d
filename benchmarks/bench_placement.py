#!/usr/bin/env python3
"""Benchmark: GPU placement per RPC (ateom.gpuinfo.placement), 64 GPUs.

    python benchmarks/bench_placement.py [-n N]

Each case fills a 64-GPU placer to one actor short of full, then times, per
sample, `place` of the last actor (a Run or Restore) plus its `release` (a
Checkpoint or Terminate), the per-RPC cost placement adds:

- shared-all:     shared, 255 actors hold all 64 GPUs; the 256th asks for all
- shared-cap:     shared:4, 255 actors hold 1 GPU each; the 256th takes the last slot
- exclusive:      exclusive, 63 actors hold 1 GPU each; the 64th takes the last one
- exclusive-refused: all 64 held; place is refused (the message names 64 holders)

Prints one JSON line per case, then a last JSON line over every sample:
{"n":..., "min_us":..., "median_us":..., "p99_us":...}. Target: <= 100 us.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

from ateom.gpuinfo.placement import GpuPlacer, GpuRequest, PlacementRefused, PodGpu
from ateom.settings import parse_placement

GPUS = 64


def _pod() -> list[PodGpu]:
    return [PodGpu(f"nvidia.com/gpu={i}", i, f"GPU-{i:08x}", "10de:2330") for i in range(GPUS)]


def _filled(placement: str, actors: int, request: GpuRequest) -> GpuPlacer:
    placer = GpuPlacer(_pod(), parse_placement(placement))
    for i in range(actors):
        placer.choose(f"actor-{i:03d}-0f8c12ab34cd", request)
    return placer


def _place_release(placer: GpuPlacer, request: GpuRequest) -> Callable[[], None]:
    def op() -> None:
        placer.choose("timed-actor", request)
        placer.vacate("timed-actor")
    return op


def _refused(placer: GpuPlacer, request: GpuRequest) -> Callable[[], None]:
    def op() -> None:
        try:
            placer.choose("timed-actor", request)
        except PlacementRefused:
            pass
        else:
            raise SystemExit("exclusive-refused: a full Pod granted a GPU")
    return op


def _cases() -> dict[str, Callable[[], None]]:
    return {
        "shared-all": _place_release(_filled("shared", 255, GpuRequest()), GpuRequest()),
        "shared-cap": _place_release(_filled("shared:4", 255, GpuRequest(1)), GpuRequest(1)),
        "exclusive": _place_release(_filled("exclusive", 63, GpuRequest(1)), GpuRequest(1)),
        "exclusive-refused": _refused(_filled("exclusive", 64, GpuRequest(1)), GpuRequest(1)),
    }


def _time(op: Callable[[], None], n: int) -> list[float]:
    for _ in range(50):  # warm up: first calls pay for allocations the steady state reuses
        op()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        op()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return samples


def _figures(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(round(0.99 * (len(samples) - 1))))]
    return {"n": len(samples), "min_us": round(samples[0], 1),
            "median_us": round(statistics.median(samples), 1), "p99_us": round(p99, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="samples per case")
    a = ap.parse_args(argv)
    every: list[float] = []
    for case, op in _cases().items():
        samples = _time(op, a.n)
        every += samples
        print(json.dumps({"case": case, **_figures(samples)}))
    print(json.dumps(_figures(every)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
