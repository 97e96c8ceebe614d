#!/usr/bin/env python3
"""Benchmark: a worker filling up with actors; what its reads and a turn cost as N grows.

    python benchmarks/bench_scale.py [--runsc PATH] [--steps 10,25,40] [-n 15]
                                     [--turns 5] [--quick] [--keep]              (as root)

Issue 39. One `ateom serve` (`tests.support.daemon`, the runsc the set-up installed
unless given: Debian's 0.0~20240729; actors without networks of their own) filled
as the node agent fills a worker (`tests.support.node_agent`): busybox actors, the
sandbox root and one app (``sleep``), Runs sent 4 at a time, up to each step's N.
At each step, once the daemon's stats sampler has a sample of every actor:

- reads, `-n` rounds, the sides interleaved in each round: the discovery read
  (GetActiveWorkloadStats: answered from the sampler's table), the same figures the
  way that read used to take them (GetWorkloadStats of every actor, one after
  another: runsc asked per container), ListActors and GetStatus; with, for the
  discovery read, the samples' ages at the read and how many had none yet;
- `--turns` turns of one more actor (Run, Checkpoint, Restore, Terminate), each call split
  into runsc's time (its ``runsc.*`` phases and Terminate's ``teardown``, the
  daemon's log), waits on other calls' work (``*.wait``: the previous turn's release,
  a lock) and ateom's own (the rest of the RPC; and the CPU its handler's thread
  spent, which the machine's load does not stretch), `tests.support.attribution`;
- the daemon's RSS and CPU share over the step's reads, and the sandboxes' idle CPU
  (all runsc processes over 2 quiet seconds, per actor).

Prints a table per step, min/median/p99 ms, and one JSON line with every figure. A
step that cannot be filled (no memory, a Run refused) ends the run there, said.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from turns_actors import stats_ms  # this dir: puts REPO on sys.path

from ateom._proto import ateom_pb2 as pb  # noqa: E402
from tests.support.attribution import calls  # noqa: E402
from tests.support.daemon import RUNSC, Daemon, DaemonWorld, runsc_processes  # noqa: E402
from tests.support.node_agent import Actor, App, NodeAgent  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
FILL_AT_ONCE = 4
RPCS = {"run": "Ateom.RunWorkload", "checkpoint": "Ateom.CheckpointWorkload",
        "restore": "Ateom.RestoreWorkload", "terminate": "Ateom.TerminateWorkload"}


def sleeper(uid: str) -> Actor:
    return Actor(uid, (App("app", ("sleep", "100000")),))


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


class Worker:
    def __init__(self, base: Path, runsc: str, most: int) -> None:
        self.world = DaemonWorld(base / "world")
        self.daemon = Daemon(self.world, runsc, run_dir=base / "run", max_actors=str(most + 1),
                             stats_interval="10")
        self.node = NodeAgent(f"unix:{self.daemon.socket}", self.world.actors_root,
                              base / "gcs", runsc_path=runsc)
        self.hosted: list[str] = []

    def fill(self, n: int) -> None:
        uids = [f"a{i:04d}" for i in range(len(self.hosted), n)]
        with ThreadPoolExecutor(FILL_AT_ONCE) as pool:
            for uid, _ in zip(uids, pool.map(lambda u: self.node.run(sleeper(u)), uids),
                              strict=True):
                self.hosted.append(uid)

    def all_sampled(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.daemon.stub.GetActiveWorkloadStats(pb.GetActiveWorkloadStatsRequest(),
                                                          timeout=30).samples
            if len(got) == len(self.hosted) and all(
                    s.source != pb.STATS_SOURCE_UNSPECIFIED for s in got):
                return True
            time.sleep(0.2)
        return False

    def reads(self, rounds: int) -> dict[str, Any]:
        stub, inspect = self.daemon.stub, self.daemon.inspect
        spans: dict[str, list[float]] = {k: [] for k in (
            "GetActiveWorkloadStats", "GetWorkloadStats of every actor", "ListActors",
            "GetStatus")}
        ages: list[float] = []
        unmeasured = 0
        pid = self.daemon.proc.pid
        cpu0, wall0 = cpu_seconds([pid]), time.monotonic()
        for _ in range(rounds):
            took, got = timed(lambda: stub.GetActiveWorkloadStats(
                pb.GetActiveWorkloadStatsRequest(), timeout=60))
            spans["GetActiveWorkloadStats"].append(took)
            now = time.time_ns()
            for s in got.samples:
                if s.source == pb.STATS_SOURCE_UNSPECIFIED:
                    unmeasured += 1
                else:
                    ages.append((now - s.observed_at_unix_nano) / 1e9)
            took, _ = timed(lambda: [stub.GetWorkloadStats(
                pb.GetWorkloadStatsRequest(actor_uid=u), timeout=60) for u in self.hosted])
            spans["GetWorkloadStats of every actor"].append(took)
            spans["ListActors"].append(timed(lambda: inspect.ListActors(
                pb.ListActorsRequest(), timeout=60))[0])
            spans["GetStatus"].append(timed(lambda: inspect.GetStatus(
                pb.GetStatusRequest(), timeout=60))[0])
        share = (cpu_seconds([pid]) - cpu0) / (time.monotonic() - wall0)
        out: dict[str, Any] = {k: stats_ms(v) for k, v in spans.items()}
        n = max(len(self.hosted), 1)
        out["GetActiveWorkloadStats per actor"] = {
            k: round(v / n, 2) for k, v in out["GetActiveWorkloadStats"].items() if k != "n"}
        out["sample age s"] = {k: round(v / 1000, 2) for k, v in stats_ms(ages).items()
                               if k != "n"} if ages else {}
        out["unmeasured samples"] = unmeasured
        out["daemon cpu share during reads"] = round(share, 3)
        return out

    def turns(self, step: int, count: int) -> dict[str, dict[str, dict[str, float]]]:
        """`count` turns of one more actor: per call, wall / runsc / ateom ms."""
        spans: dict[str, dict[str, list[float]]] = {
            c: {"wall": [], "runsc": [], "waits": [], "ateom": [], "ateom cpu": []}
            for c in RPCS}
        for i in range(count):
            actor = sleeper(f"turn{step}-{i}")
            log_from = len(self.daemon.log_events())
            self.node.run(actor)
            snapshot = self.node.checkpoint(actor)
            self.node.restore(actor, snapshot)
            self.node.terminate(actor)
            shutil.rmtree(snapshot.stored, ignore_errors=True)
            for call in calls(self.daemon.log_events()[log_from:]):
                names = [k for k, v in RPCS.items() if v == call.rpc]
                if not names or call.actor != actor.uid:
                    continue
                # Terminate's runsc calls (kill, state polls, delete) are its `teardown`.
                runsc = sum(v for k, v in call.phases_ms.items()
                            if k.startswith("runsc.") or k == "teardown")
                # Waits on other calls' work (the previous turn's release, a lock).
                waits = sum(v for k, v in call.phases_ms.items() if k.endswith(".wait"))
                for part, ms in (("wall", call.wall_ms), ("runsc", runsc), ("waits", waits),
                                 ("ateom", call.wall_ms - runsc - waits),
                                 ("ateom cpu", call.cpu_ms)):
                    spans[names[0]][part].append(ms / 1000)
        return {c: {part: stats_ms(v) for part, v in parts.items() if v}
                for c, parts in spans.items()}

    def idle(self, seconds: float = 2.0) -> dict[str, float]:
        pids = [p for uid in self.hosted
                for p in runsc_processes(str(self.daemon.run_dir / "actors" / uid))]
        before = cpu_seconds(pids)
        time.sleep(seconds)
        used = (cpu_seconds(pids) - before) / seconds
        return {"runsc processes": len(pids), "sandboxes cpu share": round(used, 3),
                "per actor": round(used / max(len(self.hosted), 1), 4),
                "daemon rss MiB": round(rss_mib(self.daemon.proc.pid), 1)}

    def close(self) -> None:
        for uid in self.hosted:
            try:
                self.node.terminate(sleeper(uid))
            except Exception as exc:  # said, and the daemon's stop takes the rest
                print(f"terminate {uid}: {type(exc).__name__}", file=sys.stderr)
        self.node.close()
        self.daemon.stop()


def report(step: int, got: dict[str, Any]) -> None:
    print(f"\nN = {step} actors hosted (filled in {got['fill_s']} s)")
    for name in ("GetActiveWorkloadStats", "GetWorkloadStats of every actor", "ListActors",
                 "GetStatus"):
        s = got["reads"][name]
        print(f"   {name:36s} {s['min']:9.1f} {s['median']:9.1f} {s['p99']:9.1f} ms")
    per = got["reads"]["GetActiveWorkloadStats per actor"]
    print(f"   GetActiveWorkloadStats per actor      median {per['median']:.2f} ms;"
          f" samples' age {got['reads']['sample age s']} s;"
          f" unmeasured {got['reads']['unmeasured samples']}")
    print(f"   daemon: {got['idle']['daemon rss MiB']} MiB RSS,"
          f" {got['reads']['daemon cpu share during reads']:.1%} of a CPU during the reads;"
          f" sandboxes idle {got['idle']['sandboxes cpu share']:.1%} of a CPU"
          f" ({got['idle']['per actor']:.2%} each)")
    for call, t in got["turns"].items():
        if not t:
            continue
        parts = ("wall", "runsc", "waits", "ateom", "ateom cpu")
        line = ", ".join(f"{part} {t[part]['min']:.1f} / {t[part]['median']:.1f} /"
                         f" {t[part]['p99']:.1f}" for part in parts)
        print(f"   {call:10s} (n={t['wall']['n']}) {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runsc", default=RUNSC, help="the runsc [the set-up's]")
    parser.add_argument("--steps", default="10,25,40", help="actors hosted at each step")
    parser.add_argument("-n", type=int, default=15, help="read rounds per step [15]")
    parser.add_argument("--turns", type=int, default=5, help="turns per step [5]")
    parser.add_argument("--quick", action="store_true", help="steps 2,5, 3 rounds, 2 turns")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.n, args.turns = "2,5", 3, 2
    try:
        steps = sorted({int(s) for s in args.steps.split(",")})
    except ValueError:
        parser.error(f"--steps {args.steps!r}: comma-separated actor counts")
    if os.geteuid() != 0 or not args.runsc:
        print("bench_scale: needs root and a runsc", file=sys.stderr)
        return 2
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    version = subprocess.run([args.runsc, "--version"], capture_output=True, text=True,
                             timeout=30).stdout.splitlines()[0]
    print(f"runsc: {args.runsc} ({version}); {os.cpu_count()} CPUs; steps {steps}")
    base = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    worker = Worker(base, args.runsc, steps[-1])
    results: dict[str, Any] = {"runsc": version, "steps": {}}
    try:
        for step in steps:
            took, _ = timed(lambda s=step: worker.fill(s))  # type: ignore[misc]
            if not worker.all_sampled(max(60.0, step * 1.5)):
                print(f"N = {step}: the sampler had not sampled every actor in time; "
                      "reads measured all the same")
            got = {"fill_s": round(took, 1), "idle": worker.idle(),
                   "reads": worker.reads(args.n), "turns": worker.turns(step, args.turns)}
            results["steps"][str(step)] = got
            report(step, got)
    except Exception as exc:
        print(f"stopped at {len(worker.hosted)} actors: {type(exc).__name__}: "
              f"{' '.join(str(exc).split())[:300]}")
        results["stopped"] = {"at": len(worker.hosted), "why": str(exc)[:300]}
    finally:
        worker.close()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
