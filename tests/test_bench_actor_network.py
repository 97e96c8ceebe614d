"""benchmarks/bench_actor_network.py's pure helpers: the daemon's log read into the
network's phases, the wakeup instants and intervals, the teardown's runsc state
polls, paired differences. Nothing here starts a daemon or times anything."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_actor_network import (  # noqa: E402
    CGI,
    LogTail,
    Wakeup,
    log_time,
    network_phases,
    paired_ms,
    state_polls,
    wakeup_of,
)


def phase(uid: str, name: str, ms: float, op: str, stamp: str = "2026-12-05T01:30:48.5Z",
          **kw: Any) -> dict[str, Any]:
    return {"event": "phase", "phase": name, "duration_ms": ms, "op": op, "actor_uid": uid,
            "timestamp": stamp, **kw}


def test_log_time_reads_the_daemons_iso_utc_stamp_to_the_microsecond() -> None:
    assert log_time("1970-01-01T00:00:01.000250Z") == pytest.approx(1.00025, abs=1e-9)
    # An epoch float near 1.8e9 s holds 0.24 µs: a difference of two is good to ~1 µs.
    assert (log_time("2026-12-05T01:30:48.504905Z") - log_time("2026-12-05T01:30:48.504605Z")
            == pytest.approx(0.0003, abs=1e-6))


def test_paired_differences_are_per_round_not_of_the_medians() -> None:
    # Medians of each side differ by 0; every round's own difference is +10 ms.
    net, none = [0.11, 0.21, 0.31], [0.10, 0.20, 0.30]
    assert paired_ms(net, none) == {"n": 3, "min": 10.0, "median": 10.0, "p99": 10.0}
    with pytest.raises(ValueError):
        paired_ms([0.1], [0.1, 0.2])


def test_network_phases_are_keyed_by_the_call_they_ran_in_for_the_given_actors_only() -> None:
    events = [
        phase("net-0", "network.create", 30.0, "run"),
        phase("net-0", "runsc.create", 70.0, "run"),
        phase("net-0", "network.remove", 40.0, "checkpoint"),
        phase("net-0", "network.remove", 15.0, "release"),
        phase("net-0", "network.create", 28.0, "restore"),
        phase("net-0", "network.remove", 45.0, "terminate"),
        phase("warm-net", "network.create", 90.0, "run"),  # the warm-up: not counted
        {"event": "rpc", "actor_uid": "net-0", "duration_ms": 200.0},
    ]
    got = network_phases(events, ["net-0"])
    assert got == {"network.create in run": [0.030], "network.remove in checkpoint": [0.040],
                   "network.remove in release": [0.015],
                   "network.create in restore": [0.028],
                   "network.remove in terminate": [0.045]}


def test_wakeup_of_takes_the_runs_probe_and_rpc_not_the_terminates() -> None:
    uid = "probe-3"
    events = [
        phase(uid, "wakeup", 12.5, "run", "2026-12-05T01:30:50.326440Z"),
        {"event": "actor_awake", "attempts": 4, "actor_uid": uid, "op": "run",
         "timestamp": "2026-12-05T01:30:50.326779Z"},
        {"event": "rpc", "rpc": "Ateom.RunWorkload", "actor_uid": uid, "duration_ms": 300.0,
         "timestamp": "2026-12-05T01:30:50.327023Z"},
        {"event": "rpc", "rpc": "Ateom.TerminateWorkload", "actor_uid": uid,
         "duration_ms": 150.0, "timestamp": "2026-12-05T01:30:51.0Z"},
        phase("other", "wakeup", 99.0, "run", "2026-12-05T01:30:52.0Z"),
    ]
    done, took, rpc_end, attempts = wakeup_of(events, uid)
    assert done == log_time("2026-12-05T01:30:50.326440Z")
    assert took == pytest.approx(0.0125)
    assert rpc_end == log_time("2026-12-05T01:30:50.327023Z")
    assert attempts == 4
    with pytest.raises(ValueError, match="probe-9"):
        wakeup_of(events, "probe-9")


def test_wakeup_intervals_add_up_from_the_apps_first_200_to_the_client() -> None:
    w = Wakeup(received=100.2040, app_started=100.150, first_200=100.2000,
               probe_done=100.2025, probe_s=0.030, rpc_end=100.2032, attempts=3)
    got = w.intervals()
    assert got["first_200_to_answer"] == pytest.approx(0.0040)
    assert got["probe_saw_200"] + got["probe_to_answer"] == pytest.approx(
        got["first_200_to_answer"])
    assert got["probe_to_rpc_end"] + got["rpc_end_to_client"] == pytest.approx(
        got["probe_to_answer"])
    assert got["app_start_to_first_200"] == pytest.approx(0.050)
    assert got["wakeup_phase"] == 0.030


def test_state_polls_counts_runscs_own_args_lines_for_that_container() -> None:
    log = "\n".join([
        "I1205 01:34:30.676332    9270 cli.go:278] Args: [/r/runsc -root /s kill app TERM]",
        "I1205 01:34:30.706746    9289 cli.go:278] Args: [/r/runsc -root /s state app]",
        "I1205 01:34:30.706980    9289 cli.go:279] Git Revision: abc",
        "I1205 01:34:30.783921    9300 cli.go:278] Args: [/r/runsc -root /s state app]",
        "I1205 01:34:30.790000    9301 cli.go:278] Args: [/r/runsc -root /s state x_pause]",
        "W1205 01:34:30.800000    9302 util.go:64] FATAL ERROR: state app",
    ])
    assert state_polls(log, "app") == 2
    assert state_polls(log, "x_pause") == 1
    assert state_polls("", "app") == 0


def test_the_probes_cgi_stamps_before_it_answers_and_keeps_the_first_stamp() -> None:
    lines = CGI.splitlines()
    assert lines[0] == "#!/bin/sh"
    stamp = next(i for i, line in enumerate(lines) if "EPOCHREALTIME" in line)
    answer = next(i for i, line in enumerate(lines) if line.startswith("printf"))
    assert stamp < answer  # the interval from the stamp is never understated
    assert "\\r\\n\\r\\n" in lines[answer]  # printf writes the CGI header's blank line
    assert any(line.startswith("[ -e /www/first ] ||") for line in lines)


def test_log_tail_gives_each_whole_line_once(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    log.write_text('{"event": "a"}\nnot json\n{"event": "b"')  # "b" still being written
    tail = LogTail(log)
    assert tail.new_events() == [{"event": "a"}]
    with open(log, "a") as f:
        f.write(', "actor_uid": "x"}\n{"event": "c"}\n')
    assert tail.new_events() == [{"event": "b", "actor_uid": "x"}, {"event": "c"}]
    assert tail.new_events() == []
