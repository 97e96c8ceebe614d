#!/usr/bin/env python3
"""Benchmark: where a call's time outside the daemon's handler goes, in and out.

    python benchmarks/bench_rpc_in_out.py [--runsc PATH] [-n 8]     (as root)

A CPU actor holding 64 MiB is checkpointed and restored through ateom, and a
TerminateWorkload of an unknown actor follows each restore; around each call the
client notes the wall clock, and the daemon's ``rpc`` log line (written as its
handler ends, with the handler's duration) places the handler inside it. *in*:
from the client's call to the handler's start (gRPC's client and server, the
server's thread hand-off); *out*: from the handler's end to the client having the
answer. The two clocks are the same machine's. Prints medians per call kind.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from turns_actors import Turns, quiesce, runsc_to_bench  # this dir: puts REPO on sys.path

from ateom._proto import ateom_pb2 as pb  # noqa: E402
from ateom.daemon.sandbox.state_dir import unmount_under  # noqa: E402


def _stamp(event: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runsc")
    parser.add_argument("-n", type=int, default=8)
    args = parser.parse_args()
    runsc, _ = runsc_to_bench(args.runsc)
    print(f"runsc: {runsc}")
    calls: list[tuple[str, str, float, float]] = []  # kind, uid, sent, answered
    with tempfile.TemporaryDirectory(prefix="ateom-bench-in-out-") as tmp:
        turns = Turns(Path(tmp), runsc, gpu=False)
        stub = turns.daemon.stub
        try:
            for i in range(args.n):
                uid = f"io{i}"
                dirs = turns.run(uid, 64, "cpu")
                quiesce()
                sent = time.time()
                stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
                    actor_uid=uid, actor_dirs=dirs), timeout=600)
                calls.append(("Checkpoint", uid, sent, time.time()))
                turns.daemon.settle()
                os.rename(dirs.checkpoint_dir, dirs.restore_dir)
                quiesce()
                sent = time.time()
                stub.RestoreWorkload(pb.RestoreWorkloadRequest(actor_uid=uid, actor_dirs=dirs),
                                     timeout=600)
                calls.append(("Restore", uid, sent, time.time()))
                sent = time.time()
                stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid="never-seen"),
                                       timeout=60)
                calls.append(("Terminate", "never-seen", sent, time.time()))
                stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=120)
            events = [e for e in turns.daemon.log_events() if e.get("event") == "rpc"]
        finally:
            turns.close()
            unmount_under(tmp)  # what a failed round's runsc left mounted
    split: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for kind, uid, sent, answered in calls:
        mine = [e for e in events if e.get("actor_uid") == uid and kind in str(e.get("rpc"))
                and sent <= _stamp(e) <= answered]
        if mine:
            ended = _stamp(mine[-1])
            began = ended - mine[-1]["duration_ms"] / 1000
            split[kind].append(((began - sent) * 1000, (answered - ended) * 1000))
    for kind, rows in split.items():
        print(f"{kind:10} in {statistics.median(r[0] for r in rows):5.2f} ms, "
              f"out {statistics.median(r[1] for r in rows):5.2f} ms (n={len(rows)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
