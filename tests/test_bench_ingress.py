"""benchmarks/bench_ingress.py's pure helpers: the figures, the sides' order, the Host
the router sends. The benchmark itself (root, gVisor's newest runsc, minutes) is not
run here; no timings are asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_ingress import (  # noqa: E402
    host_for,
    mb_per_s,
    paired_median,
    ratio,
    summary,
    turn_order,
)

from ateom.dataplane.routes import parse_host  # noqa: E402


def test_summary_is_in_ms_with_a_nearest_rank_p99() -> None:
    samples = [i / 1000 for i in range(1, 101)]  # 1..100 ms, given out of order below
    s = summary(list(reversed(samples)))
    assert s == {"n": 100, "min": 1.0, "median": 50.5, "p99": 99.0, "max": 100.0}
    assert summary([0.26], scale=1.0, digits=1) == {"n": 1, "min": 0.3, "median": 0.3,
                                                    "p99": 0.3, "max": 0.3}
    assert summary([]) == {"n": 0}


def test_each_side_goes_first_in_turn() -> None:
    assert [turn_order(i, ["a", "b"]) for i in range(3)] == [["a", "b"], ["b", "a"],
                                                             ["a", "b"]]
    three = [turn_order(i, ["a", "b", "c"]) for i in range(3)]
    assert [o[0] for o in three] == ["a", "b", "c"]
    assert all(sorted(o) == ["a", "b", "c"] for o in three)


def test_rates_and_differences() -> None:
    assert mb_per_s(64 << 20, 0.5) == pytest.approx(134.2)
    assert mb_per_s(1, 0.0) == 0.0
    assert paired_median([5.0, 7.0, 9.0], [4.0, 4.0, 8.5]) == 1.0
    assert ratio(3.0, 2.0) == 1.5 and ratio(1.0, 0.0) == float("inf")


def test_the_host_names_the_actor_as_the_data_plane_parses_it() -> None:
    assert parse_host(host_for("web", "bench")) == ("web", "bench")
