#!/usr/bin/env python3
"""Benchmark: the figures ateom's fault handling is tuned by, measured on a real runsc.

    python benchmarks/bench_faults.py [--runsc PATH] [-n 5] [--sizes 16,64,256]   (as root)

The runsc is `--runsc`, else gVisor's newest release where the project's machines
have it, else the ``runsc`` on PATH (`turns_actors.runsc_to_bench`); the first line
printed says which. The whole benchmark re-executes itself in a private mount
namespace (``unshare --mount``) so that the small disks it mounts die with it.

An actor holds SIZE MiB in its sandbox's memory (a busybox process writes that much
into /dev/shm), run with ateom's own runsc command lines. Per round, the sizes
interleaved:

- image vs memory: runsc's memory usage (``events --stats``, what ateom's check
  reads) against the size of the image a checkpoint then writes; the difference
  is what `ateom.daemon.sandbox.save.IMAGE_MARGIN_BYTES` must cover;
- the settle after a failed save: the checkpoint dir a tmpfs a quarter of SIZE, so
  the save fails once runsc has paused the sandbox (no space left); the time from
  runsc checkpoint's failed return to the sandbox process's exit (woken by a
  pidfd), what `SETTLE_AFTER_FAILED_SAVE` must exceed; and whether it exited;
- the same after runsc checkpoint is SIGKILLed once it writes the pages;
- a failed save before the pause: the dir a read-only tmpfs; whether the sandbox
  runs on (it must, for the alive verdict to be right).

Then, through `ateom serve` (a CPU actor, SIZE the smallest): TerminateWorkload of
an actor whose sandbox processes are all stopped (SIGSTOP, a wedged sentry), n
rounds, against --kill-grace (1 s here): what "Terminate always finishes within
the grace plus a few seconds" holds to.

Prints min/median/p99 tables and one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from turns_actors import REPO, runsc_to_bench, stats_ms

from ateom._proto import ateom_pb2 as pb
from ateom.process.exits import wait_exited
from ateom.runsc.commands import (
    NvproxyOptions,
    RunscTarget,
    checkpoint_argv,
    create_argv,
    delete_argv,
    events_stats_argv,
    parse_json_lines,
    start_argv,
)
from ateom.runsc.probe import probe_runsc
from tests.daemon.test_e2e_real_runsc import wait_ticks
from tests.support import build_busybox_bundle
from tests.support.daemon import Daemon, DaemonWorld

FLAGS = ("--network=none", "--ignore-cgroups")
KILL_GRACE = 1.0
_NAMESPACED = "ATEOM_BENCH_FAULTS_NAMESPACED"


def holding(mib: int) -> list[str]:
    return ["sh", "-c", f"head -c {mib}m /dev/urandom > /dev/shm/held; echo held; i=0; "
            "while true; do i=$((i+1)); echo tick=$i; sleep 0.05; done"]


class Sandbox:
    """One runsc sandbox of this process, with ateom's command lines."""

    def __init__(self, target: RunscTarget, bundle: Path, name: str, logs: Path) -> None:
        self.target, self.bundle, self.name, self.logs = target, bundle, name, logs
        self.pid = 0

    def run(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
        with open(self.logs / f"{self.name}.log", "ab") as out:
            return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                  check=False, timeout=300, **kw)  # type: ignore[call-overload]

    def start(self) -> None:
        pid_file = Path(self.target.root) / f"{self.name}.pid"
        self.run(create_argv(self.target, self.name, str(self.bundle), str(pid_file),
                             log_file=None))
        self.run(start_argv(self.target, self.name))
        self.pid = int(pid_file.read_text())
        log = self.logs / f"{self.name}.log"
        deadline = time.monotonic() + 120
        while b"held" not in log.read_bytes():
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.name}: never held its memory")
            time.sleep(0.01)

    def usage(self) -> int:
        done = subprocess.run(events_stats_argv(self.target, self.name), capture_output=True,
                              text=True, check=False, timeout=30)
        for obj in parse_json_lines(done.stdout):
            if obj.get("type") == "stats":
                data = obj["data"]
                return int(data["memory"]["usage"]["usage"])  # type: ignore[index]
        raise SystemExit(f"no stats for {self.name}: {done.stderr[-300:]}")

    def checkpoint(self, image: Path) -> tuple[int, float]:
        """runsc checkpoint's exit code and when it returned."""
        done = self.run(checkpoint_argv(self.target, self.name, str(image)))
        return done.returncode, time.monotonic()

    def checkpoint_killed(self, image: Path) -> float:
        """runsc checkpoint SIGKILLed once it is writing the pages (the sandbox
        paused); when it was killed."""
        with open(self.logs / f"{self.name}.log", "ab") as out:
            proc = subprocess.Popen(checkpoint_argv(self.target, self.name, str(image)),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        pages = image / "pages.img"
        while proc.poll() is None:
            if pages.exists() and pages.stat().st_size > (1 << 20):
                proc.kill()
                break
            time.sleep(0.001)
        killed = time.monotonic()
        proc.wait()
        return killed

    def delete(self) -> None:
        self.run(delete_argv(self.target, self.name))


def mount_tmpfs(path: Path, size: int, *, readonly: bool = False) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True)
    if readonly:
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)


def umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=False)


def round_for(target: RunscTarget, base: Path, size: int, n: int) -> dict[str, float]:
    logs = base / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    bundle = base / f"bundle-{size}"
    if not bundle.exists():
        build_busybox_bundle(bundle, holding(size))
    figures: dict[str, float] = {}

    sandbox = Sandbox(target, bundle, f"m{size}-{n}", logs)
    sandbox.start()
    figures["usage"] = sandbox.usage()
    image = base / f"image-{size}-{n}"
    code, _ = sandbox.checkpoint(image)
    figures["image"] = sum(p.stat().st_size for p in image.iterdir()) if code == 0 else -1
    sandbox.delete()
    shutil.rmtree(image, ignore_errors=True)

    sandbox = Sandbox(target, bundle, f"f{size}-{n}", logs)
    sandbox.start()
    full = base / f"full-{size}-{n}"
    mount_tmpfs(full, max(size << 18, 1 << 20))  # a quarter of the memory
    code, returned = sandbox.checkpoint(full)
    left = wait_exited([sandbox.pid], 30)
    figures["settle"] = time.monotonic() - returned
    figures["exited"] = float(code != 0 and not left)
    sandbox.delete()
    umount(full)

    sandbox = Sandbox(target, bundle, f"k{size}-{n}", logs)
    sandbox.start()
    killed = sandbox.checkpoint_killed(base / f"killed-{size}-{n}")
    left = wait_exited([sandbox.pid], 30)
    figures["settle_killed"] = time.monotonic() - killed
    figures["exited_killed"] = float(not left)
    sandbox.delete()
    shutil.rmtree(base / f"killed-{size}-{n}", ignore_errors=True)

    sandbox = Sandbox(target, bundle, f"r{size}-{n}", logs)
    sandbox.start()
    readonly = base / f"ro-{size}-{n}"
    mount_tmpfs(readonly, 64 << 20, readonly=True)
    code, _ = sandbox.checkpoint(readonly)
    figures["ro_runs_on"] = float(code != 0 and bool(wait_exited([sandbox.pid], 3)))
    sandbox.delete()
    umount(readonly)
    return figures


def wedged_terminates(runsc: str, base: Path, rounds: int) -> list[float]:
    world = DaemonWorld(base / "world")
    daemon = Daemon(world, runsc, run_dir=base / "run", kill_grace=str(KILL_GRACE))
    took = []
    try:
        for n in range(rounds):
            uid = f"wedged-{n}"
            world.bundles(uid, {}, pause_args=holding(8))
            daemon.stub.RunWorkload(pb.RunWorkloadRequest(
                actor_uid=uid, actor_dirs=world.actor_dirs(uid)), timeout=120)
            wait_ticks(daemon.run_dir / "logs" / uid / "_pause.log", 2)
            marker = f"--root={daemon.run_dir / 'actors' / uid}".encode()
            pids = [int(p) for p in os.listdir("/proc") if p.isdigit()
                    and marker in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")]
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            started = time.monotonic()
            daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid),
                                          timeout=120)
            took.append(time.monotonic() - started)
    finally:
        daemon.stop()
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runsc", help="runsc to measure [newest where present, else PATH]")
    parser.add_argument("-n", type=int, default=5, help="rounds [5]")
    parser.add_argument("--sizes", default="16,64,256", help="MiB per actor [16,64,256]")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_faults: run as root (runsc, mounts)")
    if not os.environ.get(_NAMESPACED):
        os.environ[_NAMESPACED] = "1"
        return subprocess.call(["unshare", "--mount", "--propagation", "private",
                                sys.executable, *sys.argv])
    runsc, why = runsc_to_bench(args.runsc)
    info = probe_runsc(runsc)
    print(f"runsc: {runsc} ({info.version}){'; ' + why if why else ''}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    target_root = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    figures: dict[str, dict[str, list[float]]] = {str(s): {} for s in sizes}
    try:
        for n in range(args.n):
            for size in sizes:  # interleaved: each round takes every size once
                base = target_root / "raw"
                root = base / f"state-{size}-{n}"
                root.mkdir(parents=True)
                target = RunscTarget(info=info, root=str(root), global_flags=FLAGS,
                                     nvproxy=NvproxyOptions())
                for key, value in round_for(target, base, size, n).items():
                    figures[str(size)].setdefault(key, []).append(value)
        terminate = wedged_terminates(runsc, target_root, args.n)
    finally:
        shutil.rmtree(target_root, ignore_errors=True)

    print("\nimage vs runsc's memory usage (MiB; negative: the image is smaller)")
    print("| size | usage median | image median | image - usage min/median/max |")
    print("|---|---|---|---|")
    out: dict[str, object] = {"runsc": info.version, "rounds": args.n}
    for size in sizes:
        f = figures[str(size)]
        diff = sorted((i - u) / (1 << 20) for i, u in zip(f["image"], f["usage"], strict=True))
        settle = stats_ms(f["settle"])
        print(f"| {size} MiB | {sorted(f['usage'])[len(diff) // 2] / (1 << 20):.1f} |"
              f" {sorted(f['image'])[len(diff) // 2] / (1 << 20):.1f} |"
              f" {diff[0]:.2f} / {diff[len(diff) // 2]:.2f} / {diff[-1]:.2f} |")
        out[f"size_{size}"] = {"image_minus_usage_mib": diff, "settle_ms": settle,
                               "settle_killed_ms": stats_ms(f["settle_killed"]),
                               "exited_after_failed_save": sum(f["exited"]),
                               "runs_on_after_readonly_save": sum(f["ro_runs_on"])}
    print("\nafter a save that failed past the pause: until the sandbox exited (ms)")
    print("| size | no space: min / median / p99 | exited | runsc killed: min / median / p99"
          " | exited | a read-only dir's: ran on |")
    print("|---|---|---|---|---|---|")
    for size in sizes:
        f = figures[str(size)]
        s, k = stats_ms(f["settle"]), stats_ms(f["settle_killed"])
        print(f"| {size} MiB | {s['min']} / {s['median']} / {s['p99']} |"
              f" {int(sum(f['exited']))}/{len(f['exited'])} |"
              f" {k['min']} / {k['median']} / {k['p99']} |"
              f" {int(sum(f['exited_killed']))}/{len(f['exited_killed'])} |"
              f" {int(sum(f['ro_runs_on']))}/{len(f['ro_runs_on'])} |")
    t = stats_ms(terminate)
    print(f"\nTerminate of a stopped sandbox (--kill-grace {KILL_GRACE:g} s), ms: "
          f"{t['min']} / {t['median']} / {t['p99']} (n={t['n']})")
    out["wedged_terminate_ms"] = t
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
