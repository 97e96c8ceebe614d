#!/usr/bin/env python3
"""Benchmark: runsc's checkpoint and restore options, alone, to choose ateom's.

    python benchmarks/bench_turn_options.py [--runsc PATH] [-n 5] [--size 256]   (as root)

On one runsc (the newest where the project's machines have it), a CPU actor holding
SIZE MiB (half from /dev/urandom, half zeros it wrote: committed zero pages) is
checkpointed and restored by runsc alone with ateom's command lines plus each
option; the variants interleave round by round. Printed per variant: checkpoint
ms, image MiB, restore ms (the call's return) and time to useful work (the first
new tick), min/median/p99, and one JSON line. Options the runsc lacks are skipped,
saying so.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from turns_actors import Alone, Turns, image_bytes, runsc_to_bench, stats_ms, wait_text

from ateom.runsc.commands import (  # noqa: E402
    RunscTarget,
    checkpoint_argv,
    create_argv,
    restore_argv,
    start_argv,
)
from tests.support import build_busybox_bundle  # noqa: E402

# (name, checkpoint flags, restore flags, drop restore -background)
VARIANTS = (
    ("ateom's default", (), (), False),
    ("checkpoint --direct", ("-direct",), (), False),
    ("checkpoint --exclude-committed-zero-pages", ("-exclude-committed-zero-pages",), (), False),
    ("checkpoint --compression=flate-best-speed", ("-compression=flate-best-speed",), (),
     True),  # restore -background needs an uncompressed image
    ("restore --direct", (), ("-direct",), False),
    ("restore without --background", (), (), True),
)


def program(size_mib: int) -> list[str]:
    half = max(size_mib // 2, 1)
    return ["sh", "-c", f"head -c {half}m /dev/urandom > /dev/shm/r; head -c {half}m /dev/zero "
            "> /dev/shm/z; echo held; i=0; while true; do i=$((i+1)); echo tick=$i; "
            "sleep 0.05; done"]


def supported(turns: Turns, command: str, flags: tuple[str, ...]) -> bool:
    return all(turns.info.supports(f"{command}:{f.lstrip('-').split('=')[0]}") for f in flags)


def one(turns: Turns, base: Path, bundle: Path, uid: str, ck: tuple[str, ...],
        rs: tuple[str, ...], no_background: bool) -> dict[str, float]:
    root, logs, image = base / "state", base / "logs", base / "image"
    shutil.rmtree(base, ignore_errors=True)
    for d in (root, logs, image):
        d.mkdir(parents=True, mode=0o700)
    a = Alone(RunscTarget(turns.info, str(root), ("--network=none", "--ignore-cgroups")),
              bundle.parent, [(f"{uid}_pause", bundle.name)], root, logs, image)
    name = f"{uid}_pause"
    turns.call(create_argv(a.target, name, str(bundle), str(root / f"{name}.pid"),
                           log_file=str(logs / "runsc.log")), logs / f"{bundle.name}.log")
    turns.call(start_argv(a.target, name), logs / f"{bundle.name}.log")
    wait_text(a.out, "tick=2\n")
    ckpt = turns.call([*checkpoint_argv(a.target, name, str(image))[:-1], *ck, name]
                      if ck else checkpoint_argv(a.target, name, str(image)), logs / "ckpt.log")
    turns.free(a)
    size = image_bytes(image)
    argv = restore_argv(a.target, name, str(bundle), str(image), str(root / f"{name}.pid"),
                        log_file=None)
    if no_background:
        argv = [x for x in argv if x != "-background"]
    argv = [*argv[:-2], *rs, *argv[-2:]]  # before "-detach <id>"
    mark = a.out.stat().st_size
    started = time.perf_counter()
    turns.call(argv, logs / f"{bundle.name}.log")
    restore = time.perf_counter() - started
    useful = restore + wait_text(a.out, "tick=", after=mark)
    turns.alone_teardown(a)
    return {"checkpoint": ckpt, "restore": restore, "useful": useful, "bytes": size}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runsc")
    parser.add_argument("-n", type=int, default=5)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    runsc, why = runsc_to_bench(args.runsc)
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="ateom-bench-options-") as tmp:
        turns = Turns(Path(tmp), runsc, gpu=False)
        print(f"runsc: {runsc} ({turns.info.version}){'; ' + why if why else ''}")
        try:
            bundle = Path(tmp) / "bundles" / "_pause"
            build_busybox_bundle(bundle, program(args.size))
            variants = []
            for name, ck, rs, nobg in VARIANTS:
                if supported(turns, "checkpoint", ck) and supported(turns, "restore", rs):
                    variants.append((name, ck, rs, nobg))
                else:
                    print(f"{name}: not in this runsc, skipped")
            rows: dict[str, list[dict[str, float]]] = {v[0]: [] for v in variants}
            for i in range(args.n):
                order = variants if i % 2 == 0 else list(reversed(variants))
                for name, ck, rs, nobg in order:
                    rows[name].append(one(turns, Path(tmp) / "alone" / f"v{i}", bundle, "o",
                                          ck, rs, nobg))
            for name, got in rows.items():
                row = {k: stats_ms([r[k] for r in got]) for k in ("checkpoint", "restore",
                                                                  "useful")}
                mib = sorted(r["bytes"] for r in got)[len(got) // 2] / 2**20
                row["image_mib"] = round(mib, 1)  # type: ignore[assignment]
                results[name] = row
                print(f"{name:44} checkpoint {row['checkpoint']['median']:7.1f} "
                      f"({row['checkpoint']['min']:.1f}/{row['checkpoint']['p99']:.1f}) "
                      f"image {mib:6.1f} MiB  restore {row['restore']['median']:7.1f} "
                      f"({row['restore']['min']:.1f}/{row['restore']['p99']:.1f})  useful "
                      f"{row['useful']['median']:7.1f} ({row['useful']['min']:.1f}/"
                      f"{row['useful']['p99']:.1f}) ms")
        finally:
            turns.close()
    print(json.dumps({"runsc": turns.info.version, "size_mib": args.size, **results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
