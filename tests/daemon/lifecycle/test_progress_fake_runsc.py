"""A long checkpoint or restore says what it works on and how far it is while it runs:
in the log, in GetStatus for the actor, and in the metrics (fake runsc: the save is
held at a gate while the test writes the image runsc would be writing)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from ateom.daemon.calls import progress
from ateom.daemon.calls.requests import (
    ActorRef,
    CheckpointRequest,
    ContainerRequest,
    RestoreRequest,
)
from ateom.daemon.rpc.inspection import Inspector, hosted_actor
from ateom.daemon.rpc.metrics import Metrics
from tests.support.world import NO_DEVICES, needs_busybox

pytestmark = needs_busybox


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "SAMPLE_EVERY", 0.01)
    monkeypatch.setattr(progress, "LOG_EVERY", 0.05)


def _until(what: str, done, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_checkpoint_and_a_restore_say_how_far_they_are(  # type: ignore[no-untyped-def]
        make_world, tmp_path: Path) -> None:
    w = make_world(fake_kw={"restore_flags": ["direct"]})  # restores app containers too
    w.service.run_workload(w.run("p1", "app"))
    # The image's expected size is the actor's memory as last sampled when the disk has
    # room for the most any sandbox here could hold (runsc is not asked at the save):
    # a bound this disk surely has room for, whatever this machine's RAM.
    w.service.checkpoints.memory_bound = 64 << 20
    sampled = w.service.workload_stats("p1").memory_current_bytes
    assert sampled > 0
    dirs = w.dirs("p1")
    gate = tmp_path / "let-the-save-finish"
    w.fake.hold("checkpoint p1_pause", gate)
    metrics = Metrics()
    metrics.track_progress(progress.running)
    inspector = Inspector.for_service(w.service)
    with capture_logs() as logs:
        saving = threading.Thread(target=w.service.checkpoint_workload, args=(
            CheckpointRequest(actor=ActorRef("p1"), dirs=dirs),))
        saving.start()
        _until("the save to start", lambda: any(r.phase == "checkpoint"
                                                 for r in progress.running()))
        # What runsc would be writing meanwhile.
        (Path(dirs.checkpoint_dir) / "partial.img").write_bytes(b"x" * 300_000)
        _until("a progress line with those bytes", lambda: any(
            e["event"] == "phase_progress" and e.get("done_bytes", 0) >= 300_000
            for e in logs))
        [actor] = [a for a in inspector.actors_now() if a.ref.actor_uid == "p1"]
        [now] = hosted_actor(actor).in_progress
        assert now.phase == "checkpoint" and now.done_bytes >= 300_000
        assert now.expected_bytes == sampled
        assert now.elapsed_seconds > 0
        scrape = metrics.scrape().decode()
        assert 'ateom_phases_running{phase="checkpoint"} 1.0' in scrape
        assert 'ateom_phase_running_bytes{phase="checkpoint"} 300000.0' in scrape
        gate.touch()
        saving.join(30)
        assert not saving.is_alive()
    started = next(e for e in logs if e["event"] == "phase_started")
    assert started["phase"] == "checkpoint" and started["actor_uid"] == "p1"
    assert started["containers"] == ["_pause", "app"] and started["expected_bytes"] == sampled
    assert progress.running() == ()
    assert 'phase="checkpoint"' not in metrics.scrape().decode()  # over: no series

    assert w.service.actors.settle(10)
    os.rename(dirs.checkpoint_dir, dirs.restore_dir)
    size = sum(f.stat().st_size for f in Path(dirs.restore_dir).rglob("*") if f.is_file())
    with capture_logs() as logs:
        w.service.restore_workload(RestoreRequest(
            actor=ActorRef("p1"), dirs=dirs,
            containers=(ContainerRequest("app", devices=NO_DEVICES),)))
        _until("the image removed after the answer", lambda: any(
            e["event"] == "phase_started" and e["phase"] == "image.remove" for e in logs))
    restore = next(e for e in logs if e["event"] == "phase_started")
    assert restore["phase"] == "restore" and restore["expected_bytes"] == size
    assert restore["containers"] == ["_pause", "app"]
    removal = next(e for e in logs if e["event"] == "phase_started"
                   and e["phase"] == "image.remove")
    assert removal["actor_uid"] == "p1" and removal["expected_bytes"] == size
