#!/usr/bin/env python3
"""Benchmark: many intermittent GPU actors taking turns on a few GPUs, end to end.

    python benchmarks/bench_density.py [--runsc PATH] [--actors 12] [--gpus 4]
        [--size 256] [--busy 5] [--idle 15] [--duration 120] [--seed 1] [--quick]
        [--plot density.png]                                              (as root)

The question a user asks before buying fewer GPUs: with N actors sharing M GPUs, how
long does an actor with new work wait for a GPU, and what share of the GPUs' time goes
to work rather than to turns?

The workload: N GPU actors on one worker with M stand-in GPUs (exclusive placement;
nvproxy with the driver pinned, in a private mount namespace, as bench_turns.py runs
them), each holding SIZE MiB in its sandbox and counting (a tick every 50 ms). Each
alternates busy periods (it has work: it must run on a GPU) and idle ones, both drawn
from seeded exponential distributions (means --busy and --idle seconds), over
--duration seconds (--quick: 30 s).

Before the trace starts, every actor is run until it holds its memory and counts,
then checkpointed (untimed): the run starts with every actor saved and every GPU free.
The benchmark plays the node agent: when an actor has work and holds no GPU, a free
GPU is used, else the policy (`choose_victim`) names an idle holder to checkpoint;
the waiting actor is then restored on the freed GPU (any free one: ateom places it
where its checkpoint's record fits, runsc remapping the GPU). An actor that goes idle
keeps its GPU until someone needs it. Turns run one at a time.

It prints (min/median/p99 where a distribution, and one JSON line):
- the wait from "has work" to "running on a GPU": its first new tick, not the RPC's
  answer;
- the GPU-busy share (time a GPU is held by an actor that has work, over M x the
  run's time) next to the ideal share for the same trace with free, instant turns
  (the trace replayed through the same policy at zero cost), and the ideal waits;
- turns per minute, and the time in each turn's parts: the victim's
  CheckpointWorkload, the waiter's RestoreWorkload (or RunWorkload), and from that
  call's answer to the first new tick; and ateom's phases inside those calls;
- whether every actor's memory survived every turn: its count never goes back or
  restarts.
With --plot (matplotlib, the benchmarks' extra), a PNG of the wait distribution and
the GPUs' occupancy over time.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from turns_actors import runsc_to_bench, stats_ms  # this dir: puts REPO on sys.path

from ateom._proto import ateom_pb2 as pb  # noqa: E402
from tests.support import DEFAULT_DRIVER_VERSION, build_busybox_bundle  # noqa: E402
from tests.support.attribution import calls, summary  # noqa: E402
from tests.support.daemon import Daemon, DaemonWorld  # noqa: E402
from tests.support.stand_in_gpu import install_cdi_hook_stand_in, stand_in_gpu_prefix  # noqa: E402

IN_NAMESPACE = "ATEOM_BENCH_DENSITY_IN_NAMESPACE"
TICK = 0.05  # the actor's tick period, seconds


def program(size_mib: int) -> list[str]:
    return ["sh", "-c", f"head -c {size_mib}m /dev/urandom > /dev/shm/held; i=0; "
            f"while true; do i=$((i+1)); echo tick=$i; sleep {TICK}; done"]


# -- the trace ---------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    actor: str
    start: float
    end: float


def make_trace(actors: Sequence[str], duration: float, busy_mean: float, idle_mean: float,
               seed: int) -> list[Period]:
    """Each actor's busy periods within [0, duration): alternating exponential busy and
    idle periods, each actor starting busy or idle as the means' shares say (seeded)."""
    rng = random.Random(seed)
    busy: list[Period] = []
    for uid in actors:
        t = 0.0
        working = rng.random() < busy_mean / (busy_mean + idle_mean)
        while t < duration:
            length = rng.expovariate(1 / (busy_mean if working else idle_mean))
            if working:
                busy.append(Period(uid, t, min(t + length, duration)))
            t += length
            working = not working
    return sorted(busy, key=lambda p: (p.start, p.actor))


# -- the node agent's policy -------------------------------------------------------------


def unserved(waits: Sequence[float], periods: int) -> int:
    """Busy periods that ended before their actor got a GPU."""
    return periods - len(waits)


def choose_victim(holders: Iterable[str], has_work: set[str],
                  last_busy: dict[str, float]) -> str | None:
    """The GPU holder to checkpoint for a waiting actor: an idle one (no work now), the
    least recently busy first; None when every holder has work (the waiter waits).
    The benchmark's policy, not ateom's: change it here to try another."""
    idle = [uid for uid in holders if uid not in has_work]
    return min(idle, key=lambda uid: (last_busy.get(uid, -1.0), uid)) if idle else None


# -- the ideal: the same trace and policy, turns free and instant --------------------------


def replay_ideal(trace: Sequence[Period], gpus: int, duration: float
                 ) -> tuple[list[float], float]:
    """(waits, GPU-busy share) of the trace when turns cost nothing: an actor with work
    gets a GPU the moment one is free or held by an idle actor (`choose_victim`). A
    busy period that ends before its actor got a GPU has no wait in the list (it is
    counted apart, as `unserved`)."""
    events: list[tuple[float, int, str]] = []  # (time, 0 end / 1 start, actor)
    for p in trace:
        heapq.heappush(events, (p.start, 1, p.actor))
        heapq.heappush(events, (p.end, 0, p.actor))
    holders: set[str] = set()
    has_work: set[str] = set()
    last_busy: dict[str, float] = {}
    waiting: list[tuple[float, str]] = []
    waits: list[float] = []
    busy_time, last_t = 0.0, 0.0
    while events:
        t, kind, uid = heapq.heappop(events)
        busy_time += len(holders & has_work) * (t - last_t)
        last_t = t
        if kind == 1:
            has_work.add(uid)
            if uid in holders:
                waits.append(0.0)
            else:
                waiting.append((t, uid))
        else:
            has_work.discard(uid)
            last_busy[uid] = t
            waiting = [(s, w) for s, w in waiting if w != uid]  # its work ended unserved
        while waiting:  # served in the order the work came
            since, uid = waiting[0]
            if len(holders) >= gpus:
                victim = choose_victim(holders, has_work, last_busy)
                if victim is None:
                    break
                holders.discard(victim)
            holders.add(uid)
            waiting.pop(0)
            waits.append(t - since)
    return waits, busy_time / (gpus * duration)


# -- the run through ateom --------------------------------------------------------------


@dataclass
class Actor:
    uid: str
    log: Path
    state: str = "new"  # new, running, saved
    ran_at: float = -1.0  # when it last got a GPU (its first tick after)
    holding: list[tuple[float, float]] = field(default_factory=list)  # (from, to) on a GPU


class Density:
    def __init__(self, base: Path, runsc: str, args: argparse.Namespace) -> None:
        self.args = args
        self.world = DaemonWorld(base, gpus=args.gpus)
        install_cdi_hook_stand_in(base / "toolkit")
        self.daemon = Daemon(self.world, runsc, run_dir=base / "run",
                             max_actors=str(args.actors), gpu_placement="exclusive",
                             nvproxy_driver_version=DEFAULT_DRIVER_VERSION)
        self.actors = {f"d{i}": Actor(f"d{i}", self.daemon.run_dir / "logs" / f"d{i}" / "app.log")
                       for i in range(args.actors)}
        for uid in self.actors:
            bundles = self.world.actors_root / uid / "bundles"
            build_busybox_bundle(bundles / "_pause", ["sleep", "1000000"])
            build_busybox_bundle(bundles / "app", program(args.size))
        self.turns: list[dict[str, float]] = []
        self.waits: list[float] = []

    def request(self, uid: str) -> tuple[pb.ActorDirs, pb.WorkloadSpec]:
        return (self.world.actor_dirs(uid),
                pb.WorkloadSpec(containers=[pb.Container(name="app")]))

    def first_tick_after(self, a: Actor, mark: int, timeout: float = 300) -> float:
        """When `a`'s log shows a tick past byte `mark` (monotonic time)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(a.log, "rb") as f:
                    f.seek(mark)
                    if b"tick=" in f.read():
                        return time.monotonic()
            except FileNotFoundError:
                pass
            time.sleep(0.005)
        raise SystemExit(f"actor {a.uid}: no tick within {timeout:.0f} s of its start")

    def checkpoint(self, a: Actor) -> float:
        dirs, _ = self.request(a.uid)
        started = time.monotonic()
        self.daemon.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
            actor_uid=a.uid, actor_dirs=dirs), timeout=600)
        ended = time.monotonic()
        a.holding.append((a.ran_at, started))
        shutil.rmtree(dirs.restore_dir, ignore_errors=True)
        os.rename(dirs.checkpoint_dir, dirs.restore_dir)  # the node agent's part
        a.state = "saved"
        return ended - started

    def start(self, a: Actor) -> tuple[float, float]:
        """Run (first time) or restore `a` on a free GPU: (the call, call to first tick)."""
        dirs, spec = self.request(a.uid)
        mark = a.log.stat().st_size if a.log.exists() else 0
        started = time.monotonic()
        gpus = pb.GpuRequest(count=1)
        if a.state == "new":
            self.daemon.stub.RunWorkload(pb.RunWorkloadRequest(
                actor_uid=a.uid, actor_dirs=dirs, spec=spec, gpus=gpus), timeout=600)
        else:  # onto whichever GPU is free: its record says how many it had
            self.daemon.stub.RestoreWorkload(pb.RestoreWorkloadRequest(
                actor_uid=a.uid, actor_dirs=dirs, spec=spec), timeout=600)
        answered = time.monotonic()
        a.ran_at = self.first_tick_after(a, mark)
        a.state = "running"
        return answered - started, a.ran_at - answered

    def prepare(self) -> None:
        """Every actor run once until it holds its memory and counts, then checkpointed
        (untimed): the trace starts with all of them saved and every GPU free, so a
        turn is a restore, not an actor's own start-up (filling SIZE MiB)."""
        for a in self.actors.values():
            self.start(a)
            self.checkpoint(a)
            a.holding.clear()
        self.daemon.settle()

    def run(self, trace: Sequence[Period], duration: float) -> float:
        """Play the trace against the clock; returns the run's length (s)."""
        events: list[tuple[float, int, str]] = []
        for p in trace:
            heapq.heappush(events, (p.start, 1, p.actor))
            heapq.heappush(events, (p.end, 0, p.actor))
        has_work: set[str] = set()
        last_busy: dict[str, float] = {}
        waiting: list[tuple[float, str]] = []  # (trace time work came, uid)
        t0 = time.monotonic()
        while events or waiting:
            now = time.monotonic() - t0
            while events and events[0][0] <= now:
                t, kind, uid = heapq.heappop(events)
                if kind == 1:
                    has_work.add(uid)
                    if self.actors[uid].state == "running":
                        self.waits.append(0.0)
                    else:
                        waiting.append((t, uid))
                else:
                    has_work.discard(uid)
                    last_busy[uid] = t
                    waiting = [(s, w) for s, w in waiting if w != uid]
            if waiting:
                since, uid = waiting[0]
                holders = [u for u, a in self.actors.items() if a.state == "running"]
                turn: dict[str, float] = {}
                if len(holders) >= self.args.gpus:
                    victim = choose_victim(holders, has_work, last_busy)
                    if victim is None:
                        time.sleep(0.01)  # every holder works: wait for one to go idle
                        continue
                    turn["checkpoint"] = self.checkpoint(self.actors[victim])
                kind = "run" if self.actors[uid].state == "new" else "restore"
                turn[kind], turn["to_first_tick"] = self.start(self.actors[uid])
                waiting.pop(0)
                self.waits.append(self.actors[uid].ran_at - t0 - since)
                self.turns.append(turn)
                continue
            if events:
                time.sleep(min(0.05, max(0.0, events[0][0] - (time.monotonic() - t0))))
        end = time.monotonic()
        for a in self.actors.values():
            if a.state == "running":
                a.holding.append((a.ran_at, end))
        self.t0 = t0
        return max(duration, end - t0)

    def busy_share(self, trace: Sequence[Period], length: float) -> tuple[float, list[float]]:
        """Time a GPU was held by an actor with work, over M x length; and the GPUs'
        occupancy (held and busy) sampled every second, for the plot."""
        busy = 0.0
        by_actor: dict[str, list[Period]] = {}
        for p in trace:
            by_actor.setdefault(p.actor, []).append(p)
        for uid, a in self.actors.items():
            for held_from, held_to in a.holding:
                h0, h1 = held_from - self.t0, held_to - self.t0
                for p in by_actor.get(uid, []):
                    busy += max(0.0, min(h1, p.end) - max(h0, p.start))
        occupancy = []
        for s in range(int(length)):
            occupancy.append(sum(
                1 for uid, a in self.actors.items()
                if any(h0 - self.t0 <= s < h1 - self.t0 for h0, h1 in a.holding)
                and any(p.start <= s < p.end for p in by_actor.get(uid, []))))
        return busy / (self.args.gpus * length), occupancy

    def memory_kept(self) -> dict[str, str]:
        """Actors whose count went back or restarted (empty: every memory survived)."""
        lost = {}
        for uid, a in self.actors.items():
            if not a.log.exists():
                continue
            ticks = [int(n) for n in re.findall(rb"^tick=(\d+)$", a.log.read_bytes(), re.M)]
            if ticks != list(range(1, len(ticks) + 1)):
                wrong = next(i for i, n in enumerate(ticks) if n != i + 1)
                lost[uid] = f"tick {ticks[wrong]} where {wrong + 1} was due"
        return lost

    def stop(self) -> None:
        for uid in self.actors:
            self.daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid),
                                               timeout=120)
        self.daemon.stop()


def plot(path: Path, waits: Sequence[float], ideal: Sequence[float],
         occupancy: Sequence[int], gpus: int) -> str:
    """The wait distribution and the GPUs' busy occupancy over time, as a PNG; "" when
    written, else why not (matplotlib is the benchmarks' extra, not the daemon's)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]')"
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.hist([list(waits), list(ideal)], bins=30, label=["through ateom", "free turns"])
    left.set_xlabel("wait for a GPU (s)")
    left.set_ylabel("busy periods")
    left.legend()
    right.step(range(len(occupancy)), occupancy, where="post")
    right.axhline(gpus, linestyle="--", color="grey")
    right.set_xlabel("time (s)")
    right.set_ylabel("GPUs held by an actor with work")
    fig.tight_layout()
    fig.savefig(path)
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runsc")
    parser.add_argument("--actors", type=int, default=12, help="N actors [12]")
    parser.add_argument("--gpus", type=int, default=4, help="M GPUs [4]")
    parser.add_argument("--size", type=int, default=256, help="MiB each actor holds [256]")
    parser.add_argument("--busy", type=float, default=5.0, help="mean busy period, s [5]")
    parser.add_argument("--idle", type=float, default=15.0, help="mean idle period, s [15]")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds [120]")
    parser.add_argument("--quick", action="store_true", help="a 30 s run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", type=Path, help="write the figures as a PNG here")
    args = parser.parse_args()
    if args.quick:
        args.duration = min(args.duration, 30.0)
    runsc, why = runsc_to_bench(args.runsc)
    if not os.environ.get(IN_NAMESPACE):
        base = Path(tempfile.mkdtemp(prefix="ateom-bench-density-ns-"))
        os.environ[IN_NAMESPACE] = "1"
        os.execvp("unshare", [*stand_in_gpu_prefix(base, args.gpus), sys.executable, *sys.argv])
    print(f"runsc: {runsc}{'; ' + why if why else ''}")
    uids = [f"d{i}" for i in range(args.actors)]
    trace = make_trace(uids, args.duration, args.busy, args.idle, args.seed)
    ideal_waits, ideal_share = replay_ideal(trace, args.gpus, args.duration)
    with tempfile.TemporaryDirectory(prefix="ateom-bench-density-") as tmp:
        bench = Density(Path(tmp), runsc, args)
        try:
            bench.prepare()
            length = bench.run(trace, args.duration)
            share, occupancy = bench.busy_share(trace, length)
            lost = bench.memory_kept()
            events = bench.daemon.log_events()
        finally:
            bench.stop()
    turns = bench.turns
    parts = {k: stats_ms([t[k] for t in turns if k in t])
             for k in ("checkpoint", "restore", "run", "to_first_tick")
             if any(k in t for t in turns)}
    phases = {rpc.removeprefix("Ateom."): row["phases_ms"] for rpc, row in summary(
        t for t in calls(events) if t.rpc in ("Ateom.CheckpointWorkload",
                                             "Ateom.RestoreWorkload")).items()}
    result = {
        "actors": args.actors, "gpus": args.gpus, "size_mib": args.size,
        "busy_mean_s": args.busy, "idle_mean_s": args.idle, "duration_s": round(length, 1),
        "seed": args.seed, "busy_periods": len(trace),
        "wait_ms": stats_ms(bench.waits) if bench.waits else {},
        "ideal_wait_ms": stats_ms(ideal_waits) if ideal_waits else {},
        "unserved": unserved(bench.waits, len(trace)),
        "ideal_unserved": unserved(ideal_waits, len(trace)),
        "gpu_busy_share": round(share, 4), "ideal_gpu_busy_share": round(ideal_share, 4),
        "share_of_ideal": round(share / ideal_share, 4) if ideal_share else None,
        "turns": len(turns), "turns_per_minute": round(60 * len(turns) / length, 1),
        "turn_parts_ms": parts, "phases_ms": phases,
        "memory_lost": lost,
    }
    w, iw = result["wait_ms"], result["ideal_wait_ms"]
    print(f"{args.actors} actors on {args.gpus} GPUs, {args.size} MiB each, busy {args.busy} s"
          f" / idle {args.idle} s (means), {length:.0f} s, {len(trace)} busy periods")
    print(f"wait for a GPU (min/median/p99 ms): {w.get('min')}/{w.get('median')}/{w.get('p99')}"
          f"  (free turns: {iw.get('min')}/{iw.get('median')}/{iw.get('p99')})")
    print(f"GPU-busy share {share:.1%} (free turns: {ideal_share:.1%}), "
          f"{result['turns_per_minute']} turns/min; busy periods that ended waiting:"
          f" {result['unserved']} (free turns: {result['ideal_unserved']})")
    for k, v in parts.items():
        print(f"turn part {k:14} {v['min']:8.1f} {v['median']:8.1f} {v['p99']:8.1f} ms")
    for rpc, row in phases.items():
        top = sorted(row.items(), key=lambda kv: -kv[1])[:5]
        print(f"{rpc} phases (median ms): " + ", ".join(f"{n} {ms}" for n, ms in top))
    # The targets, from this run's own figures: the busy share at least 90 % of
    # the ideal's; the p99 wait at most one checkpoint plus one restore (medians) plus
    # what the trace itself queues an actor (the ideal replay's p99 wait).
    if ideal_share and w and "checkpoint" in parts and "restore" in parts:
        budget = parts["checkpoint"]["median"] + parts["restore"]["median"] + iw.get("p99", 0)
        result["targets"] = {"share_of_ideal_at_least_0.9": share >= 0.9 * ideal_share,
                             "p99_wait_budget_ms": round(budget, 1),
                             "p99_wait_within_budget": w["p99"] <= budget}
        print(f"targets: busy share {share / ideal_share:.1%} of the ideal (>= 90 %:"
              f" {'met' if share >= 0.9 * ideal_share else 'missed'}); p99 wait {w['p99']} ms"
              f" vs checkpoint + restore + queueing {budget:.1f} ms"
              f" ({'met' if w['p99'] <= budget else 'missed'})")
    print("memory: every actor's count went on across every turn" if not lost else
          f"memory LOST: {lost}")
    if args.plot is not None:
        why_not = plot(args.plot, bench.waits, ideal_waits, occupancy, args.gpus)
        print(f"plot: {args.plot}" if not why_not else f"plot not written: {why_not}")
    print(json.dumps(result))
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
