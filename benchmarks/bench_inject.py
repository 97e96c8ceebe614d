#!/usr/bin/env python3
"""Benchmark: parse + inject CDI devices into a bundle (ateom.inject).

    python benchmarks/bench_inject.py --bundle DIR --spec-dir DIR --device NAME [-n N] [--cold]
        [--durable] [--link-pool DIR]

Each op (timed): resolve the device names against the already loaded spec
registry (the daemon keeps it in memory), then `inject_devices`: read and
parse config.json, stat host nodes, read SONAMEs, merge, stage the SONAME
links and replace config.json atomically (temp file + rename; with --durable
also an fsync of the file before the rename and of the directory after it).
Before each op (untimed): restore DIR/config.json from DIR/config.json.orig
and remove the symlinks the previous op staged, like an actor whose bundle was
re-unpacked (directories made for the links stay, as mount points would).
With --cold the SONAME cache is
emptied before each op too. Prints one JSON line:
{"n":..., "min_us":..., "median_us":..., "p99_us":...}.

Fixture: python benchmarks/gpu_fixture.py OUT --gpus 8 --libs 40, then --bundle
OUT/bundle --spec-dir OUT/cdi --device nvidia.com/gpu=all. DIR/config.json.orig is made
from DIR/config.json on the first run when the bundle has none.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import time

import structlog

from ateom.cdi.model import Resolution
from ateom.cdi.registry import Registry
from ateom.inject import (
    InjectOptions,
    LinkPool,
    SonameCache,
    SonameLink,
    gvisor_nvidia_options,
    inject_devices,
    merge_edits,
)
from ateom.inject.injector import gather_host_facts
from ateom.inject.soname import plan_soname_links


def _created_paths(rootfs: str) -> set[str]:
    """Everything under the rootfs now (to remove what an op adds)."""
    seen = set()
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for name in dirnames + filenames:
            seen.add(os.path.join(dirpath, name))
    return seen


def _all_links(bundle: str, resolution: Resolution, options: InjectOptions,
               cache: SonameCache) -> list[SonameLink]:
    """Every SONAME link the injection stages into an empty rootfs."""
    with open(os.path.join(bundle, "config.json"), "rb") as f:
        config = json.load(f)
    merged = merge_edits(config, resolution, gather_host_facts(resolution), options)
    sonames = {src: cache.lookup(src) for _, src, _ in merged.mounts}
    return plan_soname_links(merged.mounts, sonames)[0]


def _restore(bundle: str, pristine: bytes, rootfs: str, baseline: set[str]) -> None:
    with open(os.path.join(bundle, "config.json"), "wb") as f:
        f.write(pristine)
    # The staged links go; directories made for them stay, like the mount
    # points a runtime would have made in a re-unpacked rootfs (the protocol
    # the Go reference's figures were measured with).
    for path in _created_paths(rootfs) - baseline:
        if os.path.islink(path):
            os.unlink(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--spec-dir", required=True, action="append")
    ap.add_argument("--device", required=True, action="append")
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--cold", action="store_true", help="empty the SONAME cache before each op")
    ap.add_argument("--durable", action="store_true",
                    help="fsync config.json and the bundle directory (survives power loss)")
    ap.add_argument("--link-pool", metavar="DIR",
                    help="stage links as hard links to a LinkPool in DIR (same filesystem "
                         "as the bundle); --cold empties it before each op")
    a = ap.parse_args(argv)

    # Dropped hooks are logged on every op; the benchmark measures the work, not the console.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    bundle = os.path.abspath(a.bundle)
    orig = os.path.join(bundle, "config.json.orig")
    if not os.path.exists(orig):  # a bundle as unpacked: its config.json is the pristine one
        shutil.copyfile(os.path.join(bundle, "config.json"), orig)
    with open(orig, "rb") as f:
        pristine = f.read()
    rootfs = os.path.join(bundle, json.loads(pristine).get("root", {}).get("path", "rootfs"))
    registry = Registry.load(a.spec_dir)
    options = gvisor_nvidia_options()
    cache = SonameCache()
    with open(os.path.join(bundle, "config.json"), "wb") as f:
        f.write(pristine)
    stale = [lk.path for lk in _all_links(bundle, registry.resolve(a.device), options, cache)
             if os.path.lexists(rootfs + lk.path)]
    if stale:
        # Restoring to a rootfs that already holds the links would time an op
        # that stages nothing: figures would not compare with a fresh fixture.
        raise SystemExit(f"{rootfs} already holds SONAME links from an earlier injection "
                         f"({stale[0]}, ...); rebuild the fixture (gpu_fixture.py into a new dir)")
    baseline = _created_paths(rootfs)

    pool = LinkPool(a.link_pool) if a.link_pool else None
    samples = []
    for i in range(a.n + 1):
        _restore(bundle, pristine, rootfs, baseline)
        if a.cold:
            cache.clear()
            if a.link_pool:
                shutil.rmtree(a.link_pool)
                pool = LinkPool(a.link_pool)
        t0 = time.perf_counter_ns()
        inject_devices(bundle, registry.resolve(a.device), options, soname_cache=cache,
                       link_pool=pool, durable=a.durable)
        elapsed = time.perf_counter_ns() - t0
        if i > 0 or a.cold:  # the first warm op fills the cache: not a warm sample
            samples.append(elapsed / 1000)
    _restore(bundle, pristine, rootfs, baseline)

    samples.sort()
    p99 = samples[min(len(samples) - 1, int(round(0.99 * (len(samples) - 1))))]
    print(json.dumps({
        "n": len(samples),
        "min_us": round(samples[0], 1),
        "median_us": round(statistics.median(samples), 1),
        "p99_us": round(p99, 1),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
