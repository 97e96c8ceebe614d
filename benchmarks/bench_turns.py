#!/usr/bin/env python3
"""Benchmark: an actor's turn (checkpoint, restore, back to work) through ateom vs runsc alone.

    python benchmarks/bench_turns.py [--runsc PATH] [-n 10] [--sizes 64,256,1024]
                                     [--kinds cpu,gpu] [--concurrent 4]     (as root)

`--sizes ""` leaves out the per-size turns: the floor still runs, and the
concurrent restores (unless `--concurrent 0`) and, with GPU actors, the hand-over.

The runsc is `--runsc`, else gVisor's newest release where the project's machines
have it (`tests.support.newest_runsc`), else the ``runsc`` on PATH; the first line
printed says which. GPU actors need a runsc with ``--cuda-checkpoint-path``: they run
on nvproxy with the driver pinned and stand-in ``/dev/nvidia*`` nodes, so the whole
benchmark re-executes itself in a private mount namespace that has them
(`tests.support.stand_in_gpu`).

The actor holds SIZE MiB: its process writes that much from /dev/urandom into the
sandbox's /dev/shm (sentry memory, so the image is as large), then prints a tick
every 50 ms. A CPU actor is a sandbox root only; a GPU actor is a root plus an app
with the Pod's GPU, the app holding the memory.

Per size and kind, n rounds, the two sides' order alternating between rounds:
- runsc alone: the command lines ateom runs (its own argv builders, global flags,
  a per-container log), from this process through the same kind of reaper and the
  same spawn (runsc's fd table presized as ateom's Runsc does: the figure would
  otherwise depend on the fds of the shell this runs from), on the bundles ateom
  injected for the same actor: checkpoint (then kill and delete, as ateom frees
  the worker), restore of each container;
- through ateom: CheckpointWorkload, RestoreWorkload over the unix socket.
Before every timed call, on both sides, every dirty page is written back (sync,
untimed): an earlier round's image left in the page cache is otherwise flushed
by the kernel about 30 s later, into whichever side's call runs then, and a
checkpoint that lands in that writeback runs at the disk's speed (the 2026-12-02
figures before this: GPU 256 MiB checkpoint +490 ms through ateom, by chance).
Each side's images are removed once restored. Also, per round: the image's size
and MB/s, and the time from the restore call to the restored process's first new
tick (time to useful work). `--concurrent` actors
(256 MiB) restored at once through ateom vs the same restores by runsc alone, vs
one. With GPU actors, the hand-over on an exclusive worker: B refused while A holds
every GPU, then CheckpointWorkload(A) and B's RunWorkload at once: from A's
checkpoint call to B running, against A's checkpoint plus B's Run each measured
alone on a settled worker, the two interleaved round by round (medians and the
paired difference), with B's Run's phases and A's release's in each. Also the
floor of any call: a TerminateWorkload of an unknown actor.
Prints min/median/p99 tables and one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import grpc
from turns_actors import (  # this dir: puts REPO on sys.path
    Turns,
    quiesce,
    runsc_to_bench,
    stats_ms,
    wait_text,
)

from ateom._proto import ateom_pb2 as pb  # noqa: E402
from ateom.daemon.sandbox.state_dir import unmount_under  # noqa: E402
from ateom.runsc.probe import probe_runsc  # noqa: E402
from tests.support import DEFAULT_DRIVER_VERSION  # noqa: E402
from tests.support.attribution import calls, summary  # noqa: E402
from tests.support.daemon import GPUS, Daemon  # noqa: E402
from tests.support.stand_in_gpu import stand_in_gpu_prefix  # noqa: E402

IN_NAMESPACE = "ATEOM_BENCH_TURNS_IN_NAMESPACE"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runsc")
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--sizes", default="64,256,1024")
    parser.add_argument("--kinds", default="cpu,gpu")
    parser.add_argument("--concurrent", type=int, default=4)
    args = parser.parse_args()
    runsc, why = runsc_to_bench(args.runsc)
    kinds = args.kinds.split(",")
    if "gpu" in kinds and not os.environ.get(IN_NAMESPACE):
        base = Path(tempfile.mkdtemp(prefix="ateom-bench-turns-ns-"))
        os.environ[IN_NAMESPACE] = "1"
        os.execvp("unshare", [*stand_in_gpu_prefix(base, GPUS), sys.executable, *sys.argv])
    info = probe_runsc(runsc)
    print(f"runsc: {runsc} ({info.version}){'; ' + why if why else ''}")
    results: dict[str, object] = {"runsc": info.version}
    with tempfile.TemporaryDirectory(prefix="ateom-bench-turns-") as tmp:
        turns = Turns(Path(tmp), runsc, gpu="gpu" in kinds)
        try:
            for kind in kinds:
                for size in [int(s) for s in args.sizes.split(",") if s]:
                    template = turns.template(f"t{kind}{size}", size, kind)
                    sides: dict[str, list[dict[str, float]]] = {"alone": [], "ateom": []}
                    for i in range(args.n):
                        order = ("alone", "ateom") if i % 2 == 0 else ("ateom", "alone")
                        for side in order:
                            if side == "ateom":
                                sides[side].append(turns.ateom_turn(f"a{kind}{size}", size, kind))
                            else:
                                sides[side].append(turns.alone_turn(template.name, template,
                                                                    kind))
                    report(results, kind, size, sides)
                    attribute(results, turns, kind, size)
            rpc_floor(turns, results)
            if args.concurrent:
                concurrent(turns, results, args.concurrent, 256, args.n)
            if "gpu" in kinds:
                handover(turns, results, 64, args.n)
        finally:
            turns.close()
            unmount_under(tmp)  # what a failed round's runsc left mounted
    print(json.dumps(results))
    return 0


def rpc_floor(turns: Turns, results: dict[str, object], rounds: int = 50) -> None:
    """What any call through ateom costs at least, on this machine: a TerminateWorkload
    of an actor never seen (gRPC both ways, the handler, validation, admission, the
    log lines), at the client and inside the daemon's handler."""
    uid = "never-seen"
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        turns.daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid),
                                            timeout=30)
        seconds.append(time.perf_counter() - started)
    inside = [e["duration_ms"] / 1000 for e in turns.daemon.log_events()
              if e.get("event") == "rpc" and e.get("actor_uid") == uid]
    row = {"client": stats_ms(seconds), "handler": stats_ms(inside)}
    results["rpc_floor"] = row
    for k, v in row.items():
        print(f"a call that does nothing, {k:7} min {v['min']:6.2f} median {v['median']:6.2f} "
              f"p99 {v['p99']:6.2f} ms")


def concurrent(turns: Turns, results: dict[str, object], count: int, size: int,
               rounds: int) -> None:
    """`count` restores at once through ateom vs by runsc alone, vs one (interleaved)."""
    template = turns.template("tconc", size, "cpu")
    sides: dict[str, list[float]] = {"one_ateom": [], "one_alone": [], "ateom": [], "alone": []}
    for i in range(max(rounds // 2, 3)):
        for side in (("alone", "ateom") if i % 2 == 0 else ("ateom", "alone")):
            if side == "ateom":
                sides["ateom"].append(turns.concurrent_ateom(count, size))
                sides["one_ateom"].append(turns.ateom_turn("single", size, "cpu")["restore"])
            else:
                sides["alone"].append(turns.concurrent_alone(count, template))
                sides["one_alone"].append(turns.alone_turn("single", template, "cpu")["restore"])
    row = {k: stats_ms(v) for k, v in sides.items()}
    ratio = row["ateom"]["median"] / max(row["alone"]["median"], 1e-9)
    results[f"concurrent-{count}x{size}"] = {**row, "ateom_over_alone": round(ratio, 3)}
    for k, v in row.items():
        print(f"restore {size} MiB {k:10} min {v['min']:8.1f} median {v['median']:8.1f} "
              f"p99 {v['p99']:8.1f} ms")
    print(f"{count} restores at once: through ateom {ratio:.3f} x runsc alone (medians)")


def _run_request(turns: Turns, uid: str) -> pb.RunWorkloadRequest:
    return pb.RunWorkloadRequest(
        actor_uid=uid, actor_dirs=turns.world.actor_dirs(uid), gpus=pb.GpuRequest(count=GPUS),
        spec=pb.WorkloadSpec(containers=[pb.Container(name="app")]))


def _run_ticking(turns: Turns, excl: Daemon, uid: str) -> None:
    excl.stub.RunWorkload(_run_request(turns, uid), timeout=300)
    wait_text(excl.run_dir / "logs" / uid / "app.log", "tick=2\n")  # a fresh uid


def handover_round(turns: Turns, excl: Daemon, size: int, i: int) -> dict[str, float]:
    """A runs holding every GPU, B is refused; then CheckpointWorkload(A) and B's
    RunWorkload at once: from A's checkpoint call to B running."""
    a, b = f"ha{i}", f"hb{i}"
    for uid in (a, b):
        turns.actor(uid, size, "gpu")
    _run_ticking(turns, excl, a)
    try:
        excl.stub.RunWorkload(_run_request(turns, b), timeout=60)
        raise SystemExit("B ran while A held every GPU: not an exclusive worker")
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise
    quiesce()
    started = time.perf_counter()
    excl.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
        actor_uid=a, actor_dirs=turns.world.actor_dirs(a)), timeout=600)
    saved = time.perf_counter()
    excl.stub.RunWorkload(_run_request(turns, b), timeout=300)
    done = time.perf_counter()
    excl.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=b), timeout=120)
    excl.settle()
    return {"handover": done - started, "checkpoint_a": saved - started, "run_b": done - saved}


def handover_parts(turns: Turns, excl: Daemon, size: int, i: int) -> dict[str, float]:
    """The same two calls, each on a worker with nothing else going on: A's checkpoint
    with no one waiting (its release done before B's), B's Run on a free worker."""
    a, b = f"sa{i}", f"sb{i}"
    for uid in (a, b):
        turns.actor(uid, size, "gpu")
    _run_ticking(turns, excl, a)
    quiesce()
    started = time.perf_counter()
    excl.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
        actor_uid=a, actor_dirs=turns.world.actor_dirs(a)), timeout=600)
    checkpoint = time.perf_counter() - started
    excl.settle()
    quiesce()
    started = time.perf_counter()
    excl.stub.RunWorkload(_run_request(turns, b), timeout=300)
    run = time.perf_counter() - started
    excl.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=b), timeout=120)
    excl.settle()
    return {"checkpoint_a_alone": checkpoint, "run_b_alone": run}


def handover(turns: Turns, results: dict[str, object], size: int, rounds: int) -> None:
    """The GPU hand-over on an exclusive worker where A and B each need every GPU,
    against A's checkpoint alone plus B's Run alone; the two interleaved, round by
    round, their order alternating. Then where B's Run spent its time in each."""
    world = turns.world
    excl = Daemon(world, turns.runsc_path, run_dir=world.base / "run-exclusive",
                  gpu_placement="exclusive", nvproxy_driver_version=DEFAULT_DRIVER_VERSION)
    figures: dict[str, list[float]] = defaultdict(list)
    try:
        for i in range(rounds):
            for side in (("handover", "parts") if i % 2 == 0 else ("parts", "handover")):
                one = (handover_round if side == "handover" else handover_parts)(
                    turns, excl, size, i)
                for k, v in one.items():
                    figures[k].append(v)
        events = excl.log_events()
    finally:
        excl.stop()
    stats = {k: stats_ms(v) for k, v in figures.items()}
    budget = stats["checkpoint_a_alone"]["median"] + stats["run_b_alone"]["median"]
    over = stats["handover"]["median"] - budget
    for k, v in stats.items():
        print(f"hand-over {k:18} min {v['min']:8.1f} median {v['median']:8.1f} "
              f"p99 {v['p99']:8.1f} ms")
    print(f"hand-over median {stats['handover']['median']} ms vs A's checkpoint + B's Run "
          f"alone {budget:.1f} ms: {over:+.1f} ms")
    # The same comparison round by round (a round's hand-over against the parts
    # measured beside it): steadier than the medians' on a VM whose speed drifts.
    paired = statistics.median(h - c - r for h, c, r in zip(
        figures["handover"], figures["checkpoint_a_alone"], figures["run_b_alone"], strict=True))
    print(f"hand-over over the parts, paired by round: median {paired * 1000:+.1f} ms")
    row: dict[str, object] = {**stats, "over_parts_ms": round(over, 1),
                              "over_parts_paired_ms": round(paired * 1000, 1)}
    times = calls(events)
    for label, prefix in (("after A", "hb"), ("alone", "sb")):
        runs = summary(t for t in times if t.actor.startswith(prefix)  # not B's refusal:
                       and "RunWorkload" in t.rpc and "runsc.start" in t.phases_ms)
        for r in runs.values():
            top = sorted(r["phases_ms"].items(), key=lambda kv: -kv[1])[:6]
            print(f"hand-over B's Run {label:7} wall {r['wall_ms']:8.1f} ms: "
                  + ", ".join(f"{n} {ms}" for n, ms in top))
            row[f"run_b_{label.replace(' ', '_')}_phases_ms"] = r["phases_ms"]
    # A's release after its answer, the part B waits for first: until A's sandbox exited.
    for label, prefix in (("after A", "ha"), ("alone", "sa")):
        spent: dict[str, list[float]] = defaultdict(list)
        for e in events:
            if (e.get("event") == "phase" and e.get("op") == "release"
                    and str(e.get("actor_uid", "")).startswith(prefix)):
                spent[str(e["phase"])].append(float(e["duration_ms"]))
        medians = {n: round(statistics.median(v), 1) for n, v in sorted(spent.items())}
        print(f"hand-over A's release ({label}): "
              + ", ".join(f"{n} {ms}" for n, ms in medians.items()))
        row[f"release_a_{label.replace(' ', '_')}_phases_ms"] = medians
    results[f"handover-{size}"] = row


def report(results: dict[str, object], kind: str, size: int,
           sides: dict[str, list[dict[str, float]]]) -> None:
    row: dict[str, object] = {}
    for figure in ("checkpoint", "restore", "useful"):
        alone = stats_ms([r[figure] for r in sides["alone"]])
        through = stats_ms([r[figure] for r in sides["ateom"]])
        paired = [b[figure] - a[figure] for a, b in zip(sides["alone"], sides["ateom"],
                                                        strict=True)]
        added = statistics.median(paired) * 1000
        row[figure] = {"alone": alone, "ateom": through, "added_ms": round(added, 1),
                       "added_pct": round(100 * added / max(alone["median"], 1e-9), 1)}
        print(f"{kind} {size:5d} MiB {figure:10} alone {alone['min']:8.1f} "
              f"{alone['median']:8.1f} {alone['p99']:8.1f}  ateom {through['min']:8.1f} "
              f"{through['median']:8.1f} {through['p99']:8.1f}  +{added:.1f} ms "
              f"({row[figure]['added_pct']}%)")  # type: ignore[index]
    mib = statistics.median(r["bytes"] for r in sides["ateom"]) / 2**20
    secs = statistics.median(r["checkpoint"] for r in sides["ateom"])
    row["image_mib"] = round(mib, 1)
    row["checkpoint_mb_s"] = round(mib * 1.048576 / secs, 1)
    print(f"{kind} {size:5d} MiB image {mib:.1f} MiB, checkpoint {row['checkpoint_mb_s']} MB/s")
    results[f"{kind}-{size}"] = row


def attribute(results: dict[str, object], turns: Turns, kind: str, size: int) -> None:
    """Where each of this actor's RPCs spent its time, by the daemon's phases."""
    events = turns.daemon.log_events()
    uid = f"a{kind}{size}"
    rows = summary(calls(events), actor=uid)
    # After each checkpoint's answer: its sandbox reaped, the worker freed.
    released = [e["duration_ms"] / 1000 for e in events if e.get("event") == "phase"
                and e.get("phase") == "release" and e.get("actor_uid") == uid]
    if released:
        results[f"{kind}-{size}-release"] = stats_ms(released)
        r = stats_ms(released)
        print(f"{kind} {size:5d} MiB release after the answer  {r['min']:8.1f} {r['median']:8.1f}"
              f" {r['p99']:8.1f} ms (the sandbox reaped, GPUs freed; not in the RPC)")
    for rpc, row in rows.items():
        top = sorted(row["phases_ms"].items(), key=lambda kv: -kv[1])[:5]
        print(f"{kind} {size:5d} MiB {rpc.split('.')[-1]:18} wall {row['wall_ms']:8.1f} ms, "
              f"unattributed {row['unattributed_ms']:.2f} ms ({row['unattributed_pct_median']}% "
              f"median, {row['unattributed_pct_max']}% worst): "
              + ", ".join(f"{n} {ms}" for n, ms in top))
    results[f"{kind}-{size}-attribution"] = rows


if __name__ == "__main__":
    sys.exit(main())
