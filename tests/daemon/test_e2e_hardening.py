"""The hardening issue's crash and concurrency items, end to end (root only).

Each test drives a real `ateom serve` subprocess (tests.support.daemon.Daemon)
over its unix socket, in front of the emulated runsc release and Debian's
real runsc underneath, and reproduces one item of the issue:

- item 5: ``kill -9`` of the daemon with actors hosted, then a restart on the
  same dirs (`test_restart_after_kill9_tears_down_and_gives_every_bundle_back`);
- item 4: Health and Inspect answer while lifecycle calls pile up behind a
  slow runsc create, and the calls that gave up do not act late
  (`test_health_and_status_answer_while_calls_wait_on_a_slow_create`);
- item 6: Terminate racing Run of an actor a crashed daemon left behind
  (`test_terminate_racing_run_after_a_crash_never_leaves_a_dead_sandbox_hosted`).

The confinement, temp-file and log items are in test_e2e_hardening_confine.py.
After each test: no runsc process left, /dev/null still root:root 0666.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2

from ateom._proto import ateom_pb2 as pb
from ateom.daemon.sandbox.teardown import kill_sandbox_processes
from tests.daemon.conftest import needs_runsc
from tests.support.daemon import (
    DEFAULT_RELEASE,
    RUNSC,
    Daemon,
    DaemonWorld,
    dev_null_ok,
    run_request,
    runsc_processes,
)

pytestmark = [needs_runsc, pytest.mark.root, pytest.mark.runtime]

NONE = pb.DeviceRequest(policy=pb.DEVICE_POLICY_NONE)
SERVING = health_pb2.HealthCheckResponse.SERVING


# -- helpers --------------------------------------------------------------------


def bundle_configs(world: DaemonWorld, uid: str) -> dict[str, bytes]:
    """Each of the actor's bundles' config.json, as bytes (reads files)."""
    bundles = world.actors_root / uid / "bundles"
    return {p.parent.name: p.read_bytes() for p in sorted(bundles.glob("*/config.json"))}


def parsed(d: Daemon, uid: str, name: str) -> dict[str, Any]:
    """The config runsc reads for the container: ateom's own copy in its run dir."""
    return d.own_config(uid, name)


def cpu_quota(d: Daemon, uid: str) -> int | None:
    """The sandbox root's CPU quota (where ateom writes `cpu_milli`), None without one."""
    cpu = ((parsed(d, uid, "_pause").get("linux") or {}).get("resources") or {}).get("cpu")
    return None if not cpu else cpu.get("quota")


def state_dir(d: Daemon, uid: str) -> Path:
    return d.run_dir / "actors" / uid


def sandbox_status(d: Daemon, uid: str) -> str:
    """What Debian's runsc says of the actor's sandbox root ("" when it has none)."""
    root = state_dir(d, uid)
    if not root.exists():
        return ""
    done = subprocess.run([RUNSC or "runsc", "--root", str(root), "state", f"{uid}_pause"],
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        return ""
    status: str = json.loads(done.stdout).get("status", "")
    return status


def hosted(d: Daemon) -> dict[str, pb.HostedActor]:
    status = d.inspect.GetStatus(pb.GetStatusRequest(), timeout=30)
    return {a.actor_uid: a for a in status.actors}


def own_bundles(d: Daemon) -> list[str]:
    """ateom's own bundle files in its run dir (what a restart must clear)."""
    records = d.run_dir / "bundles"
    return sorted(str(p.relative_to(records)) for p in records.rglob("*")) \
        if records.exists() else []


def code_of(call: Callable[..., Any], *args: Any, **kw: Any) -> grpc.StatusCode:
    try:
        call(*args, **kw)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def kill_leftovers(run_dir: Path) -> None:
    """Safety net when a test fails halfway: SIGKILL (by pid) the sandbox processes
    of every actor state dir under `run_dir` that the daemons under test left."""
    state_root = run_dir / "actors"
    for root in state_root.glob("*") if state_root.exists() else []:
        kill_sandbox_processes(str(root))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[DaemonWorld]:
    """A world of its own per test (these tests crash and restart daemons on it)."""
    w = DaemonWorld(tmp_path)
    try:
        yield w
    finally:
        kill_leftovers(w.run_dir)
    assert dev_null_ok(), "/dev/null lost root:root 0666"


def stopped(d: Daemon) -> None:
    """Stop a daemon that should exit cleanly; nothing of its actors may run after."""
    code = d.stop()
    assert code == 0, d.logs()[-3000:]
    assert not [p for root in (d.run_dir / "actors").glob("*")
                for p in runsc_processes(str(root))], "sandbox processes left"


# -- item 5: crash reconciliation -----------------------------------------------


def test_restart_after_kill9_tears_down_and_gives_every_bundle_back(world: DaemonWorld) -> None:
    """A GPU actor and a CPU actor with cpu_milli=500 hosted, the daemon killed with
    SIGKILL (its sandboxes survive), a new daemon on the same dirs: before it
    says SERVING, both sandboxes are gone and so are ateom's own bundle dirs;
    every bundle holds exactly what the node agent wrote, throughout; nothing
    counts against --max-actors; both actors run again directly, the CPU one
    without the old quota."""
    runsc = str(world.runsc(DEFAULT_RELEASE).path)
    gpu, cpu = "crash-gpu", "crash-cpu"
    world.bundles(gpu, {"app": ["sleep", "1000"]})
    world.bundles(cpu, {"web": ["sleep", "1000"]})
    written = {uid: bundle_configs(world, uid) for uid in (gpu, cpu)}

    first = Daemon(world, runsc, release=DEFAULT_RELEASE, max_actors="2")
    try:
        first.stub.RunWorkload(run_request(world, gpu, [pb.Container(name="app")]), timeout=120)
        first.stub.RunWorkload(run_request(world, cpu, [pb.Container(name="web", devices=NONE)],
                                           cpu_milli=500), timeout=120)
        # ateom's versions are in its own dir (what the restart must clear): the GPU
        # app injected, CRI annotations everywhere, the CPU sandbox's quota; the node
        # agent's bundles as it wrote them.
        assert "LD_LIBRARY_PATH" in json.dumps(parsed(first, gpu, "app")["process"]["env"])
        assert parsed(first, cpu, "web")["annotations"]["io.kubernetes.cri.container-type"]
        assert cpu_quota(first, cpu) == 50_000  # 500 milli of a 100 ms period
        assert {uid: bundle_configs(world, uid) == written[uid] for uid in (gpu, cpu)} == {
            gpu: True, cpu: True}
        assert own_bundles(first)
        first.crash()
    finally:
        first.stop()  # dead already: closes its channel and log (a live one drains)

    # The crash spared the sandboxes (a worker container's PID 1 would take them
    # along; a daemon that is not PID 1 leaves them to init).
    for uid in (gpu, cpu):
        assert runsc_processes(str(state_dir(first, uid))), f"{uid}: sandbox died with ateom"
        assert sandbox_status(first, uid) == "running"

    second = Daemon(world, runsc, release=DEFAULT_RELEASE, max_actors="1")  # waits: SERVING
    try:
        for uid in (gpu, cpu):
            assert not runsc_processes(str(state_dir(second, uid))), f"{uid}: sandbox survived"
            assert not state_dir(second, uid).exists()
            assert bundle_configs(world, uid) == written[uid], f"{uid}: bundle changed"
        assert own_bundles(second) == []
        assert not hosted(second)
        [reconciled] = [e for e in second.log_events() if e.get("event") == "reconciled"]
        assert sorted(reconciled["actors"]) == sorted([gpu, cpu])

        # --max-actors 1, and the dead daemon's actors take none of it: one actor
        # is admitted, exactly one.
        second.stub.RunWorkload(run_request(world, gpu, [pb.Container(name="app")]), timeout=120)
        assert sandbox_status(second, gpu) == "running"
        cpu_run = run_request(world, cpu, [pb.Container(name="web", devices=NONE)])
        assert code_of(second.stub.RunWorkload, cpu_run, timeout=60) \
            == grpc.StatusCode.RESOURCE_EXHAUSTED
        second.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=gpu), timeout=60)
        # The CPU actor again, without cpu_milli: the old quota is not inherited.
        second.stub.RunWorkload(cpu_run, timeout=120)
        assert sandbox_status(second, cpu) == "running"
        assert cpu_quota(second, cpu) is None
        second.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=cpu), timeout=60)
        for uid in (gpu, cpu):
            assert bundle_configs(world, uid) == written[uid]
    finally:
        stopped(second)


# -- item 4: Health never starves -----------------------------------------------

# The issue asks for Health and Inspect within 100 ms. The probes here allow
# 0.5 s: on a 2-core CI box running other suites, this test process's own
# threads (a dozen gRPC callers sharing one GIL) and the scheduler alone can
# delay an answer by a few hundred ms. What the test must tell apart is an
# answer from a free thread (well under that) from one queued behind the
# slow create (seconds: CREATE_DELAY); 0.5 s is 5x the target and 1/12 of it.
PROBE_DEADLINE = 0.5
CREATE_DELAY = 6.0
ABANDONED_DEADLINE = 1.5


def slow_create_runsc(directory: Path, runsc: Path, root_id: str) -> tuple[Path, Path]:
    """A runsc in `directory` that sleeps CREATE_DELAY seconds in `create` of
    `root_id` (after touching a marker), then runs `runsc`. Returns (runsc, marker)."""
    directory.mkdir(parents=True, exist_ok=True)
    script, marker = directory / "runsc", directory / "create-started"
    script.write_text(f"""#!/bin/sh
# {runsc}, its create of {root_id} {CREATE_DELAY:g} s slow (the issue's slow runsc)
for arg in "$@"; do last=$arg; done
if [ "$last" = {shlex.quote(root_id)} ]; then
    for arg in "$@"; do
        if [ "$arg" = create ]; then : > {shlex.quote(str(marker))}; sleep {CREATE_DELAY:g}; fi
    done
fi
exec {shlex.quote(str(runsc))} "$@"
""")
    script.chmod(0o755)
    return script, marker


def wait_file(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_health_and_status_answer_while_calls_wait_on_a_slow_create(world: DaemonWorld) -> None:
    """runsc create of the sandbox takes CREATE_DELAY s; meanwhile ten Terminate and
    Checkpoint calls with a short deadline and a few stats calls: Health and
    GetStatus answer within PROBE_DEADLINE every time for the whole Run; the
    abandoned calls end DEADLINE_EXCEEDED (or RESOURCE_EXHAUSTED without a free
    call slot) and do nothing when the Run lets go: its actor runs on."""
    uid = "slow-boot"
    world.bundles(uid, {"app": ["sleep", "1000"]})
    slow, marker = slow_create_runsc(world.base / "slow-runsc",
                                     world.runsc(DEFAULT_RELEASE).path, f"{uid}_pause")
    d = Daemon(world, str(slow), release=DEFAULT_RELEASE)
    try:
        run_code: list[grpc.StatusCode] = []
        runner = threading.Thread(target=lambda: run_code.append(code_of(
            d.stub.RunWorkload, run_request(world, uid, [pb.Container(name="app", devices=NONE)]),
            timeout=120)))
        runner.start()
        wait_file(marker)  # the Run holds the actor and a call slot, inside create

        abandoned: list[tuple[str, grpc.StatusCode]] = []
        stats: list[grpc.StatusCode] = []

        def give_up(i: int) -> None:
            if i % 2:
                call, what = d.stub.TerminateWorkload, "terminate"
                req: Any = pb.TerminateWorkloadRequest(actor_uid=uid)
            else:
                call, what = d.stub.CheckpointWorkload, "checkpoint"
                req = pb.CheckpointWorkloadRequest(actor_uid=uid,
                                                   actor_dirs=world.actor_dirs(uid))
            abandoned.append((what, code_of(call, req, timeout=ABANDONED_DEADLINE)))

        callers = [threading.Thread(target=give_up, args=(i,)) for i in range(10)]
        callers += [threading.Thread(target=lambda: stats.append(code_of(
            d.stub.GetWorkloadStats, pb.GetWorkloadStatsRequest(actor_uid=uid), timeout=10)))
            for _ in range(3)]
        for t in callers:
            t.start()

        probes, starved = 0, []
        while runner.is_alive() or any(t.is_alive() for t in callers):
            try:
                answer = d.health.Check(health_pb2.HealthCheckRequest(service=""),
                                        timeout=PROBE_DEADLINE)
                if answer.status != SERVING:
                    starved.append(f"health {answer.status}")
                d.inspect.GetStatus(pb.GetStatusRequest(), timeout=PROBE_DEADLINE)
            except grpc.RpcError as exc:
                starved.append(f"{exc.code().name}: {exc.details()}")
            probes += 1
            time.sleep(0.05)
        for t in [runner, *callers]:
            t.join(120)

        assert not starved, f"{len(starved)} of {probes} probes failed: {starved[:5]}"
        assert probes >= 20  # probed all along the slow create, not once
        assert run_code == [grpc.StatusCode.OK]
        codes = {code for _, code in abandoned}
        assert len(abandoned) == 10
        assert codes <= {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert grpc.StatusCode.DEADLINE_EXCEEDED in codes  # some waited on the lock
        assert set(stats) <= {grpc.StatusCode.FAILED_PRECONDITION,
                              grpc.StatusCode.RESOURCE_EXHAUSTED}, stats

        # The calls that gave up never act: not when the Run let go of the actor,
        # nor later (a late Terminate killed the new actor in the issue).
        time.sleep(2 * ABANDONED_DEADLINE)
        actors = hosted(d)
        assert list(actors) == [uid], "an abandoned call acted once the Run let go"
        assert (actors[uid].phase, actors[uid].sandbox_exited) == ("running", False)
        assert sandbox_status(d, uid) == "running"
        assert runsc_processes(str(state_dir(d, uid)))
        events = d.log_events()
        assert not [e for e in events if e.get("event") in (
            "actor_terminated", "actor_checkpointed") or e.get("phase") == "teardown"]
        server_codes = [e["code"] for e in events if e.get("event") == "rpc"
                        and e.get("rpc") in ("Ateom.TerminateWorkload", "Ateom.CheckpointWorkload")]
        assert len(server_codes) == 10
        assert set(server_codes) <= {"DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"}, server_codes
        d.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
        assert not runsc_processes(str(state_dir(d, uid)))
    finally:
        stopped(d)


# -- item 6: Terminate racing Run after a crash ---------------------------------

ROUNDS = 10


def leave_crash_state(world: DaemonWorld, serving: Daemon, uid: str, app: str, n: int) -> None:
    """What a daemon killed with `uid` hosted leaves on `serving`'s dirs: a second
    daemon on the same run dir (its own socket) runs `uid` and is killed -9.
    Its sandbox keeps running; its own bundle dirs stay."""
    crashed = Daemon(world, serving.runsc, release=serving.release, run_dir=serving.run_dir,
                     socket=world.base / f"crashed-{n}" / "ateom.sock")
    try:
        crashed.stub.RunWorkload(run_request(world, uid, [pb.Container(name=app, devices=NONE)]),
                                 timeout=120)
        crashed.crash()
    finally:
        crashed.stop()
    assert runsc_processes(str(state_dir(serving, uid))), "the crash took the sandbox along"
    assert own_bundles(serving)


def test_terminate_racing_run_after_a_crash_never_leaves_a_dead_sandbox_hosted(
        world: DaemonWorld) -> None:
    """Each round: a crashed daemon's leftovers of actor X (live sandbox, edited
    bundles), then Run(X) and Terminate(X) at once, one or the other a little
    ahead. Whichever wins, after both: X hosted with its sandbox running, or X
    not hosted, no runsc process of it, its bundles the node agent's."""
    uid, app = "raced", "app"
    world.bundles(uid, {app: ["sleep", "1000"]})
    written = bundle_configs(world, uid)
    d = Daemon(world, str(world.runsc(DEFAULT_RELEASE).path), release=DEFAULT_RELEASE)
    outcomes: list[tuple[str, str, bool]] = []
    try:
        for n in range(ROUNDS):
            leave_crash_state(world, d, uid, app, n)
            # Alternate who is ahead, by 0 to 150 ms.
            lead = (n // 2 % 4) * 0.05
            delays = {"run": lead if n % 2 else 0.0, "terminate": 0.0 if n % 2 else lead}
            barrier = threading.Barrier(2)
            codes: dict[str, grpc.StatusCode] = {}

            def call(name: str, fn: Callable[[], Any], delays: dict[str, float] = delays,
                     barrier: threading.Barrier = barrier,
                     codes: dict[str, grpc.StatusCode] = codes) -> None:
                barrier.wait()
                time.sleep(delays[name])
                codes[name] = code_of(fn)

            run = run_request(world, uid, [pb.Container(name=app, devices=NONE)])
            racers = [
                threading.Thread(target=call, args=("run", lambda run=run: d.stub.RunWorkload(
                    run, timeout=120))),
                threading.Thread(target=call, args=("terminate", lambda: d.stub.TerminateWorkload(
                    pb.TerminateWorkloadRequest(actor_uid=uid), timeout=120))),
            ]
            for t in racers:
                t.start()
            for t in racers:
                t.join(240)
            assert codes["terminate"] == grpc.StatusCode.OK, (n, codes)
            # Refused only while Terminate held the actor to clear the crash's leftovers.
            assert codes["run"] in (grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION), \
                (n, codes)
            is_hosted = uid in hosted(d)
            outcomes.append((codes["run"].name, codes["terminate"].name, is_hosted))
            check_round(d, world, uid, is_hosted, written, n)
            time.sleep(0.5)  # nothing acts late: the same again
            assert (uid in hosted(d)) == is_hosted
            check_round(d, world, uid, is_hosted, written, n)
            if is_hosted:
                d.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
                check_round(d, world, uid, False, written, n)
    finally:
        stopped(d)
    print("run/terminate/hosted per round:", outcomes)


def check_round(d: Daemon, world: DaemonWorld, uid: str, is_hosted: bool,
                written: dict[str, bytes], n: int) -> None:
    """The invariant: hosted with a running sandbox, or gone entirely."""
    if is_hosted:
        actor = hosted(d)[uid]
        assert (actor.phase, actor.sandbox_exited) == ("running", False), (n, actor)
        assert sandbox_status(d, uid) == "running", f"round {n}: hosted, sandbox dead"
        assert runsc_processes(str(state_dir(d, uid)))
    else:
        assert not runsc_processes(str(state_dir(d, uid))), f"round {n}: sandbox left"
        assert not state_dir(d, uid).exists()
        assert bundle_configs(world, uid) == written, f"round {n}: bundle changed"
        assert own_bundles(d) == []
