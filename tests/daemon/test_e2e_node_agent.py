"""ateom driven by a node agent that does what Substrate's does around every call, on real
runsc builds (Debian's, and gVisor's newest where the machine has it), no emulator.

`tests.support.node_agent.NodeAgent` lays out fresh dirs and bundles for every Run and
Restore, names every snapshot by its gs:// URI, moves `snapshot_files` to object storage
and resets the actor's dirs the instant a Checkpoint answers, and downloads the files
back into restore_dir. These tests hold ateom to that contract:
- after any answer, the actor's dirs are the node agent's: nothing of ateom's changes
  them afterwards (the tree right after the node agent's reaction is the tree once
  ateom is idle: no runsc delete of a rootfs filestore, no bundle written back, no
  restore image removed late);
- a Restore runs the bundles the node agent wrote for it (its env), not a Run's;
- durable-dir volumes are in FULL and DATA snapshots and come back with a restore; a
  DATA snapshot leaves the actor running; system-info and image volumes are read-only;
- the older node agent's runtime_asset_paths; bad volumes refused before anything runs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ateom._proto import ateom_pb2 as pb
from tests.daemon.conftest import _stopped, needs_runsc
from tests.support.daemon import RUNSC, Daemon, DaemonWorld, wait_for
from tests.support.newest_runsc import newest_runsc
from tests.support.node_agent import Actor, App, NodeAgent, tree

pytestmark = [needs_runsc, pytest.mark.root, pytest.mark.runtime]

NEWEST, WHY_NOT_NEWEST = newest_runsc()
BUILDS = [pytest.param("debian", id="debian-runsc"),
          pytest.param("newest", id="newest-runsc", marks=pytest.mark.skipif(
              NEWEST is None, reason=f"the newest-runsc turn did not run: {WHY_NOT_NEWEST}"))]

# Counts on from the durable history's last line, so a fresh start (a DATA restore) goes
# on from the data; says whether its system-info volume is writable, and its PHASE.
APP = ("cat /etc/podinfo/actor; (touch /etc/podinfo/x && echo SYSINFO-WRITABLE)"
       " 2>/dev/null || echo SYSINFO-READ-ONLY; cat /models/weights;"
       " i=$(tail -n 1 /data/history 2>/dev/null); i=${i:-0};"
       " while true; do i=$((i+1)); echo $i >> /data/history;"
       " echo tick $i phase=$PHASE; sleep 0.1; done")


def actor(uid: str, phase: str) -> Actor:
    return Actor(uid, (App("app", ("sh", "-c", APP), env=(f"PHASE={phase}",),
                           durable={"data": "/data"}, system_info={"podinfo": "/etc/podinfo"},
                           image_volumes={"weights": "/models"}),))


@pytest.fixture(params=BUILDS)
def agent(request: pytest.FixtureRequest, world: DaemonWorld) -> Iterator[NodeAgent]:
    runsc = RUNSC if request.param == "debian" else str(NEWEST.path)  # type: ignore[union-attr]
    assert runsc is not None
    run_dir = world.base / f"run-node-agent-{request.param}"
    daemon = Daemon(world, runsc, run_dir=run_dir)
    node = NodeAgent(f"unix:{daemon.socket}", world.actors_root, world.base / "gcs",
                     runsc_path=runsc)
    node.daemon = daemon  # type: ignore[attr-defined]
    node.build = request.param  # type: ignore[attr-defined]
    try:
        yield node
    finally:
        node.close()
        _stopped(daemon)


def daemon_of(agent: NodeAgent) -> Daemon:
    return agent.daemon  # type: ignore[attr-defined,no-any-return]


def ticks(daemon: Daemon, uid: str) -> list[tuple[int, str]]:
    log = (daemon.run_dir / "logs" / uid / "app.log").read_text(errors="replace")
    return [(int(n), p) for n, p in re.findall(r"^tick (\d+) phase=(\S*)$", log, re.M)]


def wait_ticks(daemon: Daemon, uid: str, beyond: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = ticks(daemon, uid)
        if seen and seen[-1][0] > beyond:
            return seen[-1][0]
        time.sleep(0.05)
    raise AssertionError(f"{uid}: no tick beyond {beyond} within {timeout} s")


def but_the_actors_own(found: dict[str, tuple[str, int, str]]) -> dict[str, tuple[str, int, str]]:
    """The tree less what the running actor itself writes: its durable volume's files."""
    return {k: v for k, v in found.items() if not k.startswith("durable/data/")}


def quiet(daemon: Daemon) -> None:
    """ateom idle: no actor releasing, nothing left running after an answer."""
    daemon.settle()
    time.sleep(0.3)  # whatever a late write would be, it would have been by now


def test_a_full_turn_leaves_the_node_agents_dirs_alone_and_runs_its_restore_bundles(
        agent: NodeAgent) -> None:
    daemon = daemon_of(agent)
    uid = f"turn-{agent.build}"  # type: ignore[attr-defined]
    agent.run(actor(uid, "run"))
    seen = wait_ticks(daemon, uid, 5)
    log = (daemon.run_dir / "logs" / uid / "app.log").read_text()
    assert "demo/" + uid in log and "SYSINFO-READ-ONLY" in log and "image volume" in log
    # The rootfs overlay's file is ateom's (its run dir), not in the node agent's bundle.
    assert not list((agent.actors_root / uid / "bundles").rglob(".gvisor.filestore*"))
    quiet(daemon)
    assert but_the_actors_own(tree(agent.actors_root / uid)) == but_the_actors_own(
        agent.dirs_after_answer[uid])

    snapshot = agent.checkpoint(actor(uid, "run"))
    assert snapshot.uri.startswith("gs://bucket/root/atespaces/demo/actors/")
    assert snapshot.data_files == ("durable-data.tar",)
    assert set(snapshot.files) > set(snapshot.data_files)
    quiet(daemon)  # the release after the answer is done by now
    assert tree(agent.actors_root / uid) == agent.dirs_after_answer[uid], \
        "ateom changed the actor's dirs after the Checkpoint answered"
    events = [e.get("event") for e in daemon.log_events()]
    assert not {"bundle_restore_failed", "checkpoint_release_failed",
                "checkpoint_teardown_incomplete"} & set(events)

    # The node agent's fresh bundles for the Restore say PHASE=restored; ateom runs them.
    agent.restore(actor(uid, "restored"), snapshot)
    own = daemon.own_config(uid, "app")
    assert "PHASE=restored" in own["process"]["env"]
    restored = agent.actors_root / uid / "bundles" / "app" / "config.json"
    fresh = restored.read_bytes()
    after = wait_ticks(daemon, uid, seen)
    counted = [n for n, _ in ticks(daemon, uid)]
    assert counted == list(range(1, after + 1)), "the counter did not go on from memory"
    # The durable history came back with the snapshot, before the app resumed.
    history = (agent.actors_root / uid / "durable" / "data" / "history").read_text().split()
    assert history[: seen] == [str(n) for n in range(1, seen + 1)]
    quiet(daemon)
    assert but_the_actors_own(tree(agent.actors_root / uid)) == but_the_actors_own(
        agent.dirs_after_answer[uid])
    assert restored.read_bytes() == fresh
    assert not (agent.actors_root / uid / "restore").exists()  # consumed, before the answer
    agent.terminate(actor(uid, "restored"))
    quiet(daemon)
    assert tree(agent.actors_root / uid) == agent.dirs_after_answer[uid]


def test_a_data_snapshot_keeps_the_actor_running_and_a_data_restore_starts_on_its_data(
        agent: NodeAgent) -> None:
    daemon = daemon_of(agent)
    uid = f"data-{agent.build}"  # type: ignore[attr-defined]
    agent.run(actor(uid, "run"))
    before = wait_ticks(daemon, uid, 3)
    snapshot = agent.checkpoint(actor(uid, "run"), scope=pb.SNAPSHOT_SCOPE_DATA)
    assert snapshot.files == snapshot.data_files == ("durable-data.tar",)
    status = daemon.inspect.GetStatus(pb.GetStatusRequest(), timeout=30)
    assert [(a.actor_uid, a.phase) for a in status.actors] == [(uid, "running")]
    later = wait_ticks(daemon, uid, before + 3)  # it went on counting
    agent.terminate(actor(uid, "run"))

    import tarfile

    with tarfile.open(snapshot.stored / "durable-data.tar") as tar:
        member = tar.extractfile("history")
        assert member is not None
        captured = member.read().decode().split()
    assert captured == [str(n) for n in range(1, len(captured) + 1)]
    assert before <= len(captured) <= later
    agent.restore(actor(uid, "fresh"), snapshot)
    # A fresh start on the data: the app read the history back and counts on from it.
    first = wait_for(daemon.run_dir / "logs" / uid / "app.log", "phase=fresh")
    fresh_ticks = [n for n, p in ticks(daemon, uid) if p == "fresh"]
    assert fresh_ticks and fresh_ticks[0] == len(captured) + 1, first[-500:]
    agent.terminate(actor(uid, "fresh"))


def test_the_older_node_agents_runtime_assets_are_taken_and_checked(
        world: DaemonWorld) -> None:
    assert RUNSC is not None
    daemon = Daemon(world, RUNSC, run_dir=world.base / "run-legacy")
    legacy = NodeAgent(f"unix:{daemon.socket}", world.actors_root, world.base / "gcs-legacy",
                       runsc_path=RUNSC, legacy=True)
    try:
        a = Actor("legacy", (App("app", ("sleep", "1000")),))
        legacy.run(a)
        snapshot = legacy.checkpoint(a)
        legacy.restore(a, snapshot)
        legacy.terminate(a)
        for assets, code, said in (
                ({"runsc": "/usr/bin/other-runsc"}, grpc.StatusCode.INVALID_ARGUMENT,
                 "runtime_asset_paths['runsc'] '/usr/bin/other-runsc': differs"),
                ({"cloud-hypervisor": "/x/ch"}, grpc.StatusCode.FAILED_PRECONDITION,
                 "micro-VM runtime asset")):
            legacy.lay_out(a)
            before = tree(world.actors_root / "legacy")
            with pytest.raises(grpc.RpcError) as err:
                legacy.stub.RunWorkload(pb.RunWorkloadRequest(
                    actor_uid="legacy", runsc_path=RUNSC, spec=a.spec(),
                    actor_dirs=legacy.dirs("legacy"), runtime_asset_paths=assets), timeout=60)
            assert err.value.code() == code and said in (err.value.details() or "")
            assert tree(world.actors_root / "legacy") == before
    finally:
        legacy.close()
        _stopped(daemon)


def test_a_volume_the_node_agent_did_not_prepare_is_refused_before_anything_runs(
        world: DaemonWorld, tmp_path: Path) -> None:
    assert RUNSC is not None
    daemon = Daemon(world, RUNSC, run_dir=world.base / "run-bad-volumes")
    node = NodeAgent(f"unix:{daemon.socket}", world.actors_root, world.base / "gcs-bad",
                     runsc_path=RUNSC)
    try:
        a = actor("badvol", "run")
        node.lay_out(a)
        durable = world.actors_root / "badvol" / "durable" / "data"
        durable.rmdir()
        cases = [
            (lambda: None, grpc.StatusCode.FAILED_PRECONDITION, f"{durable}: missing"),
            (lambda: durable.symlink_to(tmp_path), grpc.StatusCode.INVALID_ARGUMENT, "data"),
        ]
        for make, code, said in cases:
            make()
            before = tree(world.actors_root / "badvol")
            with pytest.raises(grpc.RpcError) as err:
                node.stub.RunWorkload(pb.RunWorkloadRequest(
                    actor_uid="badvol", spec=a.spec(), actor_dirs=node.dirs("badvol")),
                    timeout=60)
            assert err.value.code() == code and said in (err.value.details() or ""), \
                err.value.details()
            assert tree(world.actors_root / "badvol") == before
            assert not (daemon.run_dir / "actors" / "badvol").exists()  # no runsc state
            assert not list(tmp_path.iterdir())
    finally:
        node.close()
        _stopped(daemon)
