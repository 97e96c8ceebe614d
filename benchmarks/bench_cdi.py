#!/usr/bin/env python3
"""How fast the CDI layer reads an 8-GPU spec and resolves devices from it.

    python benchmarks/bench_cdi.py [FIXTURE_DIR] [--repeat N]

FIXTURE_DIR is the output of ``benchmarks/gpu_fixture.py OUT --gpus 8 --libs 40``
(or of the shared builder of the same shape, ``../shared/bench/make_gpu_fixture.py``,
which the recorded figures used); omitted, one is built into a temporary directory
(with the shared builder where it sits beside the clone, so figures compare across
the project's history, else with gpu_fixture.py). Prints min/median/p99 for:

- load+validate: `load_spec` on cdi/nvidia.json (read, decode, JSON Schema,
  build, semantic rules);
- resolve: `Registry.resolve` of one GPU, and of every GPU by index, from an
  already-loaded registry;
- Registry.load of the fixture's spec directory, reading every file, and
  with the spec cache when the file has not changed (what the daemon pays
  per actor).

Targets on the 2-core reference box: load+validate <= 5 ms median,
resolve <= 0.2 ms.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ateom.cdi.registry import Registry, SpecCache
from ateom.cdi.spec_file import load_spec

REPO = Path(__file__).resolve().parents[1]
MAKE_FIXTURE = REPO.parent / "shared" / "bench" / "make_gpu_fixture.py"


def measure(fn: Callable[[], object], repeat: int, warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def report(label: str, times: list[float]) -> None:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(
        f"{label:<34} min {ordered[0] * 1e3:7.3f} ms   median "
        f"{statistics.median(ordered) * 1e3:7.3f} ms   p99 {p99 * 1e3:7.3f} ms   (n={len(ordered)})"
    )


def run(fixture: Path, repeat: int) -> None:
    spec_path = fixture / "cdi" / "nvidia.json"
    loaded = load_spec(spec_path)
    spec = loaded.spec
    print(
        f"fixture: {spec_path} ({spec_path.stat().st_size} bytes, {len(spec.devices)} devices, "
        f"{len(spec.container_edits.mounts)} spec-level mounts)"
    )
    report("load+validate (8-GPU spec)", measure(lambda: load_spec(spec_path), repeat))
    registry = Registry.load([str(spec_path.parent)])
    one = [f"{spec.kind}=0"]
    every = [f"{spec.kind}={d.name}" for d in spec.devices if d.name.isdigit()]
    report("resolve 1 GPU", measure(lambda: registry.resolve(one), repeat * 10))
    report(f"resolve {len(every)} GPUs", measure(lambda: registry.resolve(every), repeat * 10))
    spec_dir = str(spec_path.parent)
    report(
        "Registry.load, uncached",
        measure(lambda: Registry.load([spec_dir], cache=None), repeat),
    )
    cache = SpecCache()
    report(
        "Registry.load, spec unchanged",
        measure(lambda: Registry.load([spec_dir], cache=cache), repeat * 10),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture", nargs="?", type=Path, help="gpu_fixture.py output dir")
    parser.add_argument("--repeat", type=int, default=500)
    args = parser.parse_args()
    if args.fixture is not None:
        run(args.fixture, args.repeat)
        return 0
    with tempfile.TemporaryDirectory(prefix="ateom-bench-cdi-") as tmp:
        out = Path(tmp) / "fixture"
        if MAKE_FIXTURE.is_file():  # the project's shared fixture, comparable across history
            subprocess.run(
                [sys.executable, str(MAKE_FIXTURE), str(out), "--gpus", "8", "--libs", "40"],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        else:  # a clone on its own: an 8-GPU spec of the same shape (gpu_fixture.py)
            from gpu_fixture import build_fixture

            build_fixture(out, gpus=8, libs=40)
            print("fixture: benchmarks/gpu_fixture.py (no ../shared/bench beside this clone)")
        run(out, args.repeat)
    return 0

if __name__ == "__main__":
    sys.exit(main())
