#!/usr/bin/env python3
"""A fake-GPU fixture for the benchmarks, built from this clone alone.

    python benchmarks/gpu_fixture.py OUT [--gpus 8] [--libs 40]

Writes, under OUT (runs gcc):

    driver/lib64/   LIBS real ELF libraries with NVIDIA's SONAMEs (libcuda first)
    cdi/nvidia.json an nvidia-ctk-shaped ``nvidia.com/gpu`` spec: GPUS devices and
                    "all", one read-only mount per library, hooks, stand-in nodes
    bundle/         a busybox OCI bundle to inject into (bench_inject.py)

`bench_cdi.py`, `bench_daemon.py --fixture OUT` and `bench_inject.py --bundle
OUT/bundle --spec-dir OUT/cdi` read it. The project's recorded figures were taken on
the shared fixture builder's output of the same shape (``../shared/bench/``), which
`bench_cdi.py` still prefers where it sits beside the clone, so figures compare
across history; a clone on its own uses this one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from turns_actors import REPO  # noqa: F401 (this dir: puts REPO, and tests/, on sys.path)

from tests.support import (
    DEFAULT_DRIVER_VERSION,
    build_busybox_bundle,
    build_fake_driver_libs,
    write_sim_gpu_spec,
)

ALWAYS_BUILT = 2  # libcuda and libnvidia-ml: build_fake_driver_libs' own


def build_fixture(out: Path, *, gpus: int = 8, libs: int = 40) -> Path:
    """The fixture at `out` (see the module docstring); returns its spec dir."""
    if libs < ALWAYS_BUILT:
        raise ValueError(f"--libs {libs}: at least {ALWAYS_BUILT} (libcuda, libnvidia-ml)")
    extra = [(f"libnvidia-bench{i}.so.{DEFAULT_DRIVER_VERSION}", f"libnvidia-bench{i}.so.1")
             for i in range(libs - ALWAYS_BUILT)]
    built = build_fake_driver_libs(out / "driver" / "lib64", extra=extra)
    write_sim_gpu_spec(out / "cdi", built, gpus=gpus)
    build_busybox_bundle(out / "bundle", ["true"])
    return out / "cdi"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, metavar="OUT", help="directory to write (made)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs in the spec [8]")
    parser.add_argument("--libs", type=int, default=40, help="driver libraries [40]")
    args = parser.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out}: exists and is not empty")
    try:
        spec_dir = build_fixture(args.out, gpus=args.gpus, libs=args.libs)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"{args.out}: {args.gpus} GPUs, {args.libs} libraries; spec {spec_dir / 'nvidia.json'},"
          f" bundle {args.out / 'bundle'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
