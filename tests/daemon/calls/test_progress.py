"""calls/progress: a long phase says that it starts, then how far it is while it runs."""

from __future__ import annotations

import threading
import time

import pytest
from structlog.testing import capture_logs

from ateom.daemon.calls import progress


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "SAMPLE_EVERY", 0.01)
    monkeypatch.setattr(progress, "LOG_EVERY", 0.05)


def test_start_line_progress_lines_and_running_while_it_lasts() -> None:
    done = [0]

    def measure() -> int:
        done[0] += 100
        return done[0]

    with capture_logs() as logs:
        with progress.progress("checkpoint", "a1", measure=measure, expected_bytes=10_000,
                               containers=["app"]) as now:
            assert progress.running() == (now,)
            deadline = time.monotonic() + 5
            while not any(e["event"] == "phase_progress" for e in logs):
                assert time.monotonic() < deadline, logs
                time.sleep(0.01)
        assert progress.running() == ()
    started = logs[0]
    assert started == {"event": "phase_started", "phase": "checkpoint", "actor_uid": "a1",
                       "expected_bytes": 10_000, "containers": ["app"], "log_level": "info"}
    line = next(e for e in logs if e["event"] == "phase_progress")
    assert line["phase"] == "checkpoint" and line["actor_uid"] == "a1"
    assert line["done_bytes"] >= 100 and line["expected_bytes"] == 10_000
    assert 0 <= line["percent"] <= 100 and line["elapsed_s"] >= 0 and "mb_s" in line


def test_a_measure_that_fails_is_skipped_and_a_failing_phase_still_leaves() -> None:
    def measure() -> int:
        raise FileNotFoundError("gone between listing and stat")

    with pytest.raises(RuntimeError), progress.progress("restore", "a2", measure=measure):
        time.sleep(0.05)
        assert progress.running()[0].done_bytes == -1  # never measured: unknown
        raise RuntimeError("runsc failed")
    assert progress.running() == ()


def test_unknown_bytes_and_size_say_only_the_time() -> None:
    now = progress.Running("image.remove", "a3", expected_bytes=0)
    figures = now.figures()
    assert set(figures) == {"elapsed_s"}
    now.done_bytes, now.expected_bytes = 50, 200
    assert now.figures()["percent"] == 25


def test_phases_of_two_actors_run_side_by_side() -> None:
    gate = threading.Event()

    def long(uid: str) -> None:
        with progress.progress("restore", uid):
            gate.wait(5)

    threads = [threading.Thread(target=long, args=(u,)) for u in ("x", "y")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while len(progress.running()) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert {r.actor_uid for r in progress.running()} == {"x", "y"}
    gate.set()
    for t in threads:
        t.join(5)
    assert progress.running() == ()
