#!/usr/bin/env python3
"""Benchmark: how a durable-dir volume is captured (issue 37: "choose the capture from
measurements"): ateom's tar of the host directory against runsc's own `fscheckpoint`.

    python benchmarks/bench_durable_capture.py [--runsc PATH] [-n 7] [--mib 64]
                                               [--files 2000]          (as root)

The runsc is `--runsc`, else gVisor's newest release where the project's machines
have it (`tests.support.newest_runsc`); one without `fscheckpoint` (Debian's
0.0~20240729) says so and exits 2. The first line printed names it.

The volume: --mib MiB of random bytes in one file and --files small files, laid out
as the node agent lays a durable dir out (a host directory under its
durable_dir_volume_mounts_dir), bind-mounted read-write at /data into a running
busybox sandbox. Sides, interleaved round by round (their order alternating):
- tar: what a DATA snapshot does: `runsc pause`, ``ateom.volumes.capture`` of the
  host directory into a checkpoint dir, `runsc resume`, timed together; then,
  timed apart, ``ateom.volumes.restore`` (the volume emptied and filled from the tar);
- fscheckpoint (the same bytes inside the sandbox): a second sandbox whose app wrote
  the same bytes into /data on its rootfs overlay, file-backed (``--overlay2=root:self``:
  the only layout `fscheckpoint` can save), ``runsc fscheckpoint -leave-running``.
Once, untimed: `fscheckpoint -path /data` of the first sandbox, whose /data is the
host directory: its outcome is printed (it is the question the figures answer).
Every timed call starts with the page cache's dirty pages written back (sync,
untimed). Prints min/median/p99 and one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from turns_actors import stats_ms  # this dir: puts REPO on sys.path

from ateom.volumes.durable import capture, restore  # noqa: E402
from ateom.volumes.mounts import DurableVolume  # noqa: E402
from tests.support.bundle import build_busybox_bundle  # noqa: E402
from tests.support.newest_runsc import newest_runsc  # noqa: E402

MiB = 1 << 20
READY = "/tmp/ready"  # in the sandbox: the app has written its bytes


def fill_script(mib: int, files: int, under: str) -> str:
    """The shell that writes the volume's bytes: one large random file, `files` small
    ones (the same on the host and in the sandbox)."""
    return (f"mkdir -p {under}/small && head -c {mib * MiB} /dev/urandom > {under}/big && "
            f"i=0; while [ $i -lt {files} ]; do echo $i > {under}/small/f$i; i=$((i+1)); done")


class Sandbox:
    """A detached runsc sandbox, killed and deleted on close."""

    def __init__(self, runsc: str, root: Path, name: str, flags: list[str]) -> None:
        self.argv = [runsc, "--root", str(root), "--network=none", "--ignore-cgroups", *flags]
        self.name = name

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.argv, *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=300, check=check)

    @contextlib.contextmanager
    def running(self, bundle: Path) -> Iterator[Sandbox]:
        # The sandbox keeps create's stdio as the app's: never a pipe read to its end.
        with open(bundle / "create.log", "w") as log:
            subprocess.run([*self.argv, "create", "--bundle", str(bundle), self.name],
                           stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=300,
                           check=True)
        try:
            self("start", self.name)
            deadline = time.monotonic() + 120
            while self("exec", self.name, "cat", READY, check=False).returncode != 0:
                if time.monotonic() > deadline:
                    raise SystemExit(f"bench_durable_capture: {self.name}'s app did not "
                                     "write its bytes in 120 s")
                time.sleep(0.2)
            yield self
        finally:
            self("kill", self.name, "KILL", check=False)
            self("delete", "--force", self.name, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runsc")
    parser.add_argument("-n", type=int, default=7)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_durable_capture: needs root (runsc)")
        return 2
    runsc = args.runsc
    if runsc is None:
        newest, why_not = newest_runsc()
        if newest is None:
            print(f"bench_durable_capture: {why_not}")
            return 2
        runsc = str(newest.path)
    version = subprocess.run([runsc, "--version"], capture_output=True, text=True,
                             check=False).stdout.splitlines()[:1]
    helps = subprocess.run([runsc, "help"], capture_output=True, text=True, check=False)
    if "fscheckpoint" not in helps.stdout + helps.stderr:
        print(f"bench_durable_capture: {runsc} ({version}) has no fscheckpoint")
        return 2
    print(f"runsc: {runsc} ({' '.join(version)}); {args.mib} MiB + {args.files} files, "
          f"n={args.n}")
    base = Path(tempfile.mkdtemp(prefix="ateom-bench-durable-"))
    try:
        return measure(runsc, base, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def measure(runsc: str, base: Path, args: argparse.Namespace) -> int:
    durable_root = base / "durable"  # the node agent's durable_dir_volume_mounts_dir
    host_dir = durable_root / "data"
    host_dir.mkdir(parents=True)
    subprocess.run(["sh", "-c", fill_script(args.mib, args.files, str(host_dir))], check=True)
    volume = DurableVolume("data", str(host_dir), str(durable_root), str(base))
    bind = {"destination": "/data", "type": "bind", "source": str(host_dir),
            "options": ["rbind", "rw"]}
    host_bundle = build_busybox_bundle(base / "b-host", ("sh", "-c", f"touch {READY};"
                                                         " exec sleep 100000"), mounts=[bind])
    (host_bundle / "rootfs" / "data").mkdir()
    inner_bundle = build_busybox_bundle(
        base / "b-inner", ("sh", "-c", fill_script(args.mib, args.files, "/data")
                           + f"; touch {READY}; exec sleep 100000"))
    host = Sandbox(runsc, base / "root-host", "host", [])
    inner = Sandbox(runsc, base / "root-inner", "inner", ["--overlay2=root:self"])
    times: dict[str, list[float]] = {"tar capture (paused)": [], "tar restore": [],
                                     "fscheckpoint (in-sandbox overlay)": []}
    sizes: dict[str, int] = {}
    with host.running(host_bundle), inner.running(inner_bundle):
        probe = base / "probe"
        probe.mkdir()
        said = host("fscheckpoint", "-image-path", str(probe), "-path", "/data",
                    "-leave-running", host.name, check=False)
        outcome = (said.stdout + said.stderr).strip().splitlines()[-1:] or ["(no output)"]
        print(f"fscheckpoint -path /data of the host-backed durable dir: exit "
              f"{said.returncode}: {outcome[0]}")
        for i in range(args.n):
            sides = ["tar", "fscheckpoint"] if i % 2 == 0 else ["fscheckpoint", "tar"]
            for side in sides:
                out = base / f"out-{side}-{i}"
                out.mkdir()
                os.sync()
                started = time.perf_counter()
                if side == "tar":
                    host("pause", host.name)
                    try:
                        written = capture([volume], str(out))
                    finally:
                        host("resume", host.name)
                    times["tar capture (paused)"].append(time.perf_counter() - started)
                    sizes["tar"] = sum((out / f).stat().st_size for f in written.files)
                    os.sync()
                    started = time.perf_counter()
                    restore([volume], str(out))
                    times["tar restore"].append(time.perf_counter() - started)
                else:
                    inner("fscheckpoint", "-image-path", str(out), "-leave-running",
                          inner.name)
                    times["fscheckpoint (in-sandbox overlay)"].append(
                        time.perf_counter() - started)
                    sizes["fscheckpoint"] = sum(f.stat().st_size for f in out.iterdir())
                shutil.rmtree(out)
    results = {"runsc": runsc, "mib": args.mib, "files": args.files,
               "fscheckpoint_of_host_dir": {"exit": said.returncode, "said": outcome[0]},
               "bytes": sizes, **{k: stats_ms(v) for k, v in times.items()}}
    for k, v in times.items():
        s = stats_ms(v)
        print(f"   {k:34} min {s['min']:8.1f} median {s['median']:8.1f} p99 {s['p99']:8.1f} ms"
              f" (n={s['n']})")
    print(f"   image bytes: {sizes}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
