"""benchmarks/bench_density.py: the trace and the policy (pure), and a --quick run with
N=3 actors on M=1 GPU that must lose no actor's memory and print every figure (not its
speed). The run needs root and gVisor's newest runsc (GPU checkpoints); without them
it says it did not run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_density import (  # noqa: E402
    Period,
    choose_victim,
    make_trace,
    replay_ideal,
    unserved,
)

from tests.support.newest_runsc import newest_runsc  # noqa: E402
from tests.support.stand_in_gpu import can_make_namespaces  # noqa: E402


def test_the_trace_is_seeded_alternating_and_within_the_run() -> None:
    trace = make_trace(["a", "b"], 60.0, 2.0, 4.0, seed=7)
    assert trace == make_trace(["a", "b"], 60.0, 2.0, 4.0, seed=7)
    assert trace != make_trace(["a", "b"], 60.0, 2.0, 4.0, seed=8)
    for uid in ("a", "b"):
        mine = [p for p in trace if p.actor == uid]
        assert mine and all(0 <= p.start < p.end <= 60.0 for p in mine)
        assert all(x.end < y.start for x, y in zip(mine, mine[1:], strict=False))  # idle between


def test_the_victim_is_the_least_recently_busy_idle_holder() -> None:
    last = {"a": 5.0, "b": 2.0, "c": 1.0}
    assert choose_victim(["a", "b", "c"], has_work={"c"}, last_busy=last) == "b"
    assert choose_victim(["a", "b"], has_work={"a", "b"}, last_busy=last) is None
    assert choose_victim(["a", "z"], has_work=set(), last_busy=last) == "z"  # never busy


def test_free_turns_serve_whoever_a_gpu_can_and_queue_the_rest() -> None:
    # One GPU: a works 0-4; b's work at 1-3 waits for a GPU until it ends (unserved);
    # c's at 5-6 takes the GPU from idle a at once.
    trace = [Period("a", 0, 4), Period("b", 1, 3), Period("c", 5, 6)]
    waits, share = replay_ideal(trace, gpus=1, duration=10)
    assert waits == [0.0, 0.0] and unserved(waits, len(trace)) == 1
    assert share == pytest.approx(5 / 10)
    # Two GPUs: b is served at once too.
    waits, share = replay_ideal(trace, gpus=2, duration=10)
    assert waits == [0.0, 0.0, 0.0] and share == pytest.approx(7 / 20)


NEWEST, WHY = newest_runsc()
CANNOT = (WHY if NEWEST is None else can_make_namespaces()
          or ("" if os.path.exists("/bin/busybox") else "needs /bin/busybox"))


@pytest.mark.skipif(bool(CANNOT), reason=f"the density run did not run: {CANNOT}")
def test_a_quick_run_loses_no_memory_and_prints_every_figure() -> None:
    assert NEWEST is not None
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_density.py"), "--quick",
         "--runsc", NEWEST.path, "--actors", "3", "--gpus", "1", "--size", "16",
         "--busy", "2", "--idle", "4", "--duration", "20", "--seed", "3"],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["memory_lost"] == {}
    assert "every actor's count went on across every turn" in done.stdout
    assert (result["actors"], result["gpus"]) == (3, 1)
    for figure in ("wait_ms", "ideal_wait_ms"):
        assert set(result[figure]) == {"n", "min", "median", "p99"}, figure
    assert 0 < result["gpu_busy_share"] <= 1 and 0 < result["ideal_gpu_busy_share"] <= 1
    assert result["turns"] > 0 and result["turns_per_minute"] > 0
    assert {"checkpoint", "to_first_tick"} <= set(result["turn_parts_ms"])
    assert {"CheckpointWorkload"} <= set(result["phases_ms"])
    assert set(result["targets"]) == {"share_of_ideal_at_least_0.9", "p99_wait_budget_ms",
                                      "p99_wait_within_budget"}
