#!/usr/bin/env python3
"""Benchmark: what an actor's own network costs Run, Checkpoint, Restore and Terminate.

    python benchmarks/bench_actor_network.py [--runsc PATH] [-n 100] [--quick]
                                             [--steps 100] [--keep]
                                             [--warm-networks N]             (as root)

Issue 38's "Measured": the network's set-up and removal inside Run, Checkpoint and
Restore (target: the network adds at most 10 ms to a Run), and how long after the
app's first 200 a Run whose container has a wakeup probe answers.

Needs gVisor's newest runsc (`tests.support.newest_runsc`, or `--runsc`): Debian's
0.0~20240729 takes every network namespace of this kernel for the host's, and
ateom runs its actors with --network=none (`ateom.network.netns_problem`). Without
one that can take a namespace over it exits 2 saying why; the first line printed
names the runsc.

Two `ateom serve` on one world (`tests.support.daemon`), same runsc, each with a
run dir and socket of its own: "net" with runsc's default network (each actor gets
its namespace, veth pair and /30, `ateom.network`, taken from the daemon's warm pool:
``--warm-networks``, its default unless given) and "none"
with ``--runsc-global-flag=--network=none``. Driven as the node agent drives ateom
(`tests.support.node_agent`): fresh dirs and bundles before a Run or Restore, the
snapshot's files moved out on a Checkpoint's answer. Each call is timed around its
gRPC round trip only (the node agent's own file work is outside), after an untimed
sync(2) so no call waits behind another's dirty pages.

Per round (n rounds, the two daemons' order alternating between rounds, after an
untimed warm-up round):
- on each daemon, a plain actor (the sandbox root and one app, busybox httpd, no
  probe): Run, Checkpoint, (settle: the checkpointed sandbox released), Restore,
  Terminate;
- on "net", an actor whose app has a wakeup probe (GET /cgi-bin/probe on :80):
  Run, then Terminate (untimed). The probe's path is a CGI that writes the
  sandbox's $EPOCHREALTIME, taken before it answers 200, when it first runs: the
  app's first 200 (the intervals from it are upper bounds, by the CGI's printf and
  httpd's relaying of it). That stamp, the daemon's log (its ``wakeup`` phase's
  end, ISO UTC, µs) and the client's time.time() when the answer arrived are on one
  clock (gVisor's CLOCK_REALTIME follows the host's); a stamp after the daemon's
  probe saw the 200 would show they are not, and is counted.

Prints, min/median/p99 (ms): each call on both daemons with the median difference
and the paired (same round) median difference; the ``network.create`` and
``network.remove`` phases by the call (or the checkpoint's release thread, after the
answer) they ran in; where each call's difference went (its phases' medians on both
daemons, `tests.support.attribution`, and for Terminate the ``runsc state`` polls of
its grace loop, from the actors' runsc logs); the wakeup figures and the probe's
attempts.
Then, with both daemons stopped, `--steps` rounds of the daemon's own
`ActorNetworks.create`/`remove` in this process, each step timed (the namespace,
the veth pair and addresses, their removal), and of a create from a full warm pool:
what dominates. Last, one
JSON line with every figure.

A round in which a call fails, or a daemon takes one of the round's actors for
exited on its own (``actor_exited``: none of them ends by itself), is not counted
and is run again under new uids, at most 10 times in all; each is printed and kept
in the JSON. On this VM (pid_max 32768, other suites running) the kernel's pids
wrap every few minutes, and ateom's reaper then reports a sandbox that got an
earlier orphan's pid as exited the moment it is watched (``Reaper.watch`` answers
from its record of the last 1024 orphans' exits, by pid), so such rounds happen.

The whole run re-executes itself in a network namespace of its own (``unshare
--net``, standing for the worker Pod's): a networked daemon's start sweeps every
``ate*`` link and the ``inet ateom`` table of its namespace, and its stop deletes
that table, so in the host's it would cut the actors of any other networked daemon
or suite running there (and they its).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turns_actors import stats_ms  # this dir: puts REPO on sys.path

from ateom.network import ActorNetworks, netns_problem  # noqa: E402
from ateom.network import links as net_links  # noqa: E402
from ateom.network import namespace as net_namespace  # noqa: E402
from ateom.process.reaper import Reaper  # noqa: E402
from ateom.process.runner import reaper_runner  # noqa: E402
from ateom.runsc.probe import probe_runsc  # noqa: E402
from tests.support.actor_net import actor_ip  # noqa: E402
from tests.support.attribution import calls, summary  # noqa: E402
from tests.support.daemon import Daemon, DaemonWorld  # noqa: E402
from tests.support.newest_runsc import newest_runsc  # noqa: E402
from tests.support.node_agent import Actor, App, NodeAgent  # noqa: E402

IN_NETNS = "ATEOM_BENCH_ACTOR_NETWORK_IN_NETNS"
CALLS = ("run", "checkpoint", "restore", "terminate")
RPCS = {"run": "Ateom.RunWorkload", "checkpoint": "Ateom.CheckpointWorkload",
        "restore": "Ateom.RestoreWorkload", "terminate": "Ateom.TerminateWorkload"}
SIDES = ("none", "net")
MAX_INCIDENTS = 10  # rounds run again before the run gives up
PROBE_PATH = "/cgi-bin/probe"
# The app: the time it starts (before httpd's exec, so httpd's start and bind count
# in "app start to its first 200"), then busybox httpd serving /www (in its image).
APP = ("sh", "-c", "echo $EPOCHREALTIME > /www/started; exec httpd -f -p 80 -h /www")
# The probe's CGI: the time it runs is taken before it answers (so "first 200 ->
# answer" is never understated) and kept by the first run only, written after the
# answer (the file's creation is not in the interval).
CGI = """#!/bin/sh
t=$EPOCHREALTIME
printf 'Content-Type: text/plain\\r\\n\\r\\nok\\n'
[ -e /www/first ] || echo "$t" > /www/first
"""


# -- pure helpers (tests/test_bench_actor_network.py) ---------------------------------

def log_time(stamp: str) -> float:
    """The daemon's ISO UTC log timestamp ("2026-12-05T01:30:48.504905Z") as epoch s."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def paired_ms(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """a[i] - b[i] (s, the same round's two sides) as min/median/p99 ms: the drift of
    the machine's load cancels out of each difference."""
    return stats_ms([x - y for x, y in zip(a, b, strict=True)])


def network_phases(events: Iterable[Mapping[str, Any]], uids: Iterable[str]
                   ) -> dict[str, list[float]]:
    """Each ``network.*`` phase's durations (s) of `uids`' calls, keyed by phase and
    where it ran: "network.create in run", "network.remove in release" (the
    checkpoint's release thread, after its answer), ... The op is the call's."""
    wanted = set(uids)
    out: dict[str, list[float]] = defaultdict(list)
    for e in events:
        name = e.get("phase")
        if (e.get("event") == "phase" and isinstance(name, str) and name.startswith("network.")
                and e.get("actor_uid") in wanted):
            out[f"{name} in {e.get('op', '?')}"].append(float(e["duration_ms"]) / 1000)
    return dict(out)


@dataclass(frozen=True)
class Wakeup:
    """One probed Run's instants (epoch s): the client's receipt of the answer, the
    app's start and first 200 (the sandbox's clock), the daemon's probe done (the
    ``wakeup`` phase's end, its duration) and the RPC's end as the daemon logged it."""

    received: float
    app_started: float
    first_200: float
    probe_done: float
    probe_s: float
    rpc_end: float
    attempts: int

    def intervals(self) -> dict[str, float]:
        """The figures (s); "probe_saw_200" negative would mean the two clocks disagree."""
        return {"first_200_to_answer": self.received - self.first_200,
                "probe_to_answer": self.received - self.probe_done,
                "probe_to_rpc_end": self.rpc_end - self.probe_done,
                "rpc_end_to_client": self.received - self.rpc_end,
                "probe_saw_200": self.probe_done - self.first_200,
                "app_start_to_first_200": self.first_200 - self.app_started,
                "wakeup_phase": self.probe_s}


def wakeup_of(events: Iterable[Mapping[str, Any]], uid: str) -> tuple[float, float, float, int]:
    """(wakeup phase end, its duration, the RunWorkload's logged end, attempts) of
    `uid`'s Run, from the daemon's events."""
    done = duration = rpc_end = None
    attempts = 0
    for e in events:
        if e.get("actor_uid") != uid or e.get("op", "run") != "run":
            continue
        if e.get("event") == "phase" and e.get("phase") == "wakeup":
            done, duration = log_time(e["timestamp"]), float(e["duration_ms"]) / 1000
        elif e.get("event") == "actor_awake":
            attempts = int(e["attempts"])
        elif e.get("event") == "rpc" and e.get("rpc") == RPCS["run"]:
            rpc_end = log_time(e["timestamp"])
    if done is None or duration is None or rpc_end is None:
        raise ValueError(f"actor {uid}: no wakeup phase or RunWorkload in the daemon's log")
    return done, duration, rpc_end, attempts


def state_polls(runsc_log: str, container: str) -> int:
    """How many ``runsc state <container>`` calls an actor's runsc log holds (one
    ``Args:`` line each): the teardown's grace loop polls so, 50 ms apart."""
    return sum(1 for line in runsc_log.splitlines()
               if "] Args: [" in line and line.rstrip("]").endswith(f" state {container}"))


def fmt(row: Mapping[str, float]) -> str:
    return f"{row['min']:8.1f} {row['median']:8.1f} {row['p99']:8.1f}"


# -- driving the daemons ----------------------------------------------------------------

@dataclass
class Timed:
    """The last call's round trip: perf_counter span and the wall clock at each end."""

    seconds: float = 0.0
    sent: float = 0.0
    received: float = 0.0


class TimedStub:
    """The node agent's stub, each call timed around the gRPC round trip alone (an
    untimed sync(2) first: an earlier call's dirty pages, the images and bundles the
    node agent wrote, are not flushed into this one)."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self.last = Timed()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._stub, name)

        def call(request: Any, **kw: Any) -> Any:
            os.sync()
            sent, started = time.time(), time.perf_counter()
            try:
                return method(request, **kw)
            finally:
                took = time.perf_counter() - started
                self.last = Timed(took, sent, time.time())

        return call


class Agent(NodeAgent):
    """The node agent, its image's app having the probe's CGI and a page to serve."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.timed = TimedStub(self.stub)
        # The node agent's calls go through the timing wrapper (it answers every
        # method the stub has, by name).
        self.stub = self.timed  # type: ignore[assignment]

    def lay_out(self, actor: Actor) -> None:
        super().lay_out(actor)
        for app in actor.apps:
            www = Path(self.dirs(actor.uid).oci_bundle_dir) / app.name / "rootfs" / "www"
            (www / "cgi-bin").mkdir(parents=True, exist_ok=True)
            (www / "ok").write_text("ok\n")
            (www / "cgi-bin" / "probe").write_text(CGI)
            (www / "cgi-bin" / "probe").chmod(0o755)


def fetch(ip: str, path: str, wait: float = 5.0) -> str:
    """A page of the actor's httpd; a 404 retried for `wait` s (the CGI writes its
    stamp after it answered the probe)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with urllib.request.urlopen(f"http://{ip}{path}", timeout=5) as answer:
                return str(answer.read().decode()).strip()
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class LogTail:
    """The lines a daemon's log gained since the last read (whole lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_events(self) -> list[dict[str, Any]]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        data = data[:data.rfind(b"\n") + 1]
        self.offset += len(data)
        events = []
        for line in data.decode(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
        return events


@dataclass(frozen=True)
class Probed:
    uid: str
    call: Timed
    app_started: float
    first_200: float


class Bench:
    def __init__(self, base: Path, runsc: str, warm: str | None) -> None:
        self.base = base
        self.world = DaemonWorld(base)
        self.daemons: dict[str, Daemon] = {}
        self.agents: dict[str, Agent] = {}
        self.tails: dict[str, LogTail] = {}
        for side in SIDES:
            # Only the runsc global flag differs: "net" leaves runsc's default network.
            extra = {"warm_networks": warm} if side == "net" and warm is not None else {}
            self.daemons[side] = Daemon(self.world, runsc, run_dir=base / f"run-{side}",
                                        networks=side == "net", max_actors="4", **extra)
            self.agents[side] = Agent(f"unix:{self.daemons[side].socket}",
                                      self.world.actors_root, base / f"gcs-{side}",
                                      runsc_path=runsc)
            self.tails[side] = LogTail(self.daemons[side].log_path)
        self.samples: dict[str, dict[str, list[float]]] = {
            side: {c: [] for c in CALLS} for side in SIDES}
        self.uids: dict[str, list[str]] = {side: [] for side in SIDES}
        self.probed: list[Probed] = []
        self.incidents: list[dict[str, str]] = []

    def turn(self, side: str, uid: str) -> dict[str, float]:
        """Run, Checkpoint, Restore, Terminate of a plain actor on `side`'s daemon."""
        agent, daemon = self.agents[side], self.daemons[side]
        actor = Actor(uid, (App("app", APP),))
        took: dict[str, float] = {}
        agent.run(actor)
        took["run"] = agent.timed.last.seconds
        snapshot = agent.checkpoint(actor)
        took["checkpoint"] = agent.timed.last.seconds
        # The checkpointed sandbox is released after the answer (its second
        # network.remove among it): the Restore is timed on a settled worker.
        daemon.settle()
        agent.restore(actor, snapshot)
        took["restore"] = agent.timed.last.seconds
        agent.terminate(actor)
        took["terminate"] = agent.timed.last.seconds
        self.forget(uid, snapshot.stored)
        return took

    def forget(self, uid: str, *more: Path) -> None:
        """The actor's dirs (its bundles: a busybox copy per container) and its
        snapshot, once terminated (untimed): a run leaves no gigabyte of them."""
        for path in (self.world.actors_root / uid, *more):
            shutil.rmtree(path, ignore_errors=True)

    def probed_turn(self, uid: str) -> Probed:
        """Run of an actor with a wakeup probe on "net"; its stamps read over HTTP."""
        agent = self.agents["net"]
        actor = Actor(uid, (App("app", APP, wakeup=(PROBE_PATH, 80, 20)),))
        agent.run(actor)
        call = agent.timed.last
        ip = actor_ip(self.daemons["net"], uid)
        started, first = float(fetch(ip, "/started")), float(fetch(ip, "/first"))
        agent.terminate(actor)
        self.forget(uid)
        return Probed(uid, call, started, first)

    def warm_up(self) -> None:
        """One turn of each kind, not recorded: the first actor of each daemon pays
        one-time costs. One that fails (as a round may) is said, and left to Terminate."""
        try:
            for side in SIDES:
                self.turn(side, f"warm-{side}")
            self.probed_turn("warm-probe")
        except Exception as exc:  # a warm-up only: the rounds check their own
            print(f"warm-up: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
                  file=sys.stderr)
            for side in SIDES:
                for uid in (f"warm-{side}", "warm-probe"):
                    try:
                        self.agents[side].terminate(Actor(uid, ()))
                    except Exception:  # not hosted on this daemon, or already gone
                        pass
                    self.forget(uid)

    def round(self, i: int, order: Sequence[str], suffix: str = "") -> bool:
        """One round, recorded only if every call in it went as asked and no actor of
        it was taken for exited on its own (`actor_exited` in a daemon's log: none of
        these actors ends by itself; see the module on ateom's reaper and reused
        pids). Otherwise the incident is kept, the round's actors are terminated,
        and False."""
        uids = {side: f"{side}-{i}{suffix}" for side in SIDES}
        probe_uid = f"probe-{i}{suffix}"
        took: dict[str, dict[str, float]] = {}
        error = ""
        try:
            for side in order:
                took[side] = self.turn(side, uids[side])
            probed = self.probed_turn(probe_uid)
        except Exception as exc:  # kept and said; the round is run again
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        ours = {*uids.values(), probe_uid}
        exited = [f"{e['actor_uid']} ({side})" for side in SIDES
                  for e in self.tails[side].new_events()
                  if e.get("event") == "actor_exited" and e.get("actor_uid") in ours]
        if error or exited:
            self.incidents.append({"round": f"{i}{suffix}", "error": error,
                                   "taken_for_exited": ", ".join(exited)})
            for side in SIDES:
                for uid in (uids[side], probe_uid) if side == "net" else (uids[side],):
                    try:
                        self.agents[side].terminate(Actor(uid, ()))
                    except Exception as exc:  # best effort: kept with the incident
                        self.incidents[-1]["cleanup"] = f"{uid}: {type(exc).__name__}"
                    self.forget(uid)
            return False
        for side in SIDES:
            self.uids[side].append(uids[side])
            for call, seconds in took[side].items():
                self.samples[side][call].append(seconds)
        self.probed.append(probed)
        return True

    def close(self) -> dict[str, int]:
        codes = {}
        for side in SIDES:
            self.agents[side].close()
            codes[side] = self.daemons[side].stop()
        return codes


# -- network.create / remove, step by step ------------------------------------------------

def steps(base: Path, rounds: int) -> dict[str, dict[str, float]]:
    """`rounds` create+remove of one actor's network by the daemon's own
    `ActorNetworks` (nft over a reaper, as the daemon runs it), each step timed by
    wrapping the module functions it calls. Only with no daemon running: `start`
    sweeps this namespace's actor links and the table, `stop` deletes the table."""
    spans: dict[str, list[float]] = defaultdict(list)

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                spans[name].append(time.perf_counter() - started)
        return wrapper

    # Per pid: this process is no subreaper (its daemons were subprocess.Popen children).
    reaper = Reaper().start(reap_all=False)
    run_nft = reaper_runner(reaper)
    nets = ActorNetworks(str(base / "run-steps"), egress_port=None, runner=run_nft)
    patched = [(net_namespace, "create", "namespace create (unshare, bind mount)"),
               (net_links, "build", "veth pair, addresses, routes (netlink)"),
               (net_links, "delete", "veth pair delete (netlink)"),
               (net_namespace, "remove", "namespace remove (umount, unlink)")]
    originals = [(module, attr, getattr(module, attr)) for module, attr, _ in patched]
    nets.start()
    spans.clear()  # the table's install and the sweep are the daemon's start, not a call's
    try:
        for module, attr, name in patched:
            setattr(module, attr, timed(name, getattr(module, attr)))
        for i in range(rounds):
            uid = f"steps-{i}"
            started = time.perf_counter()
            nets.create(uid, egress=False)
            spans["create (total)"].append(time.perf_counter() - started)
            started = time.perf_counter()
            nets.remove(uid)
            spans["remove (total)"].append(time.perf_counter() - started)
        # No nft run: an actor without egress is the firewall's by its link's name.
    finally:
        for module, attr, original in originals:
            setattr(module, attr, original)
        nets.stop()
    # The same, the network taken from a full warm pool (as a daemon's Run takes it).
    warm = ActorNetworks(str(base / "run-steps"), egress_port=None, runner=run_nft, warm=1)
    warm.start()
    try:
        for i in range(rounds):
            if not warm.warm.wait_full(10):
                raise RuntimeError("the warm pool did not fill within 10 s")
            uid = f"warm-{i}"
            started = time.perf_counter()
            warm.create(uid, egress=False)
            spans["create from the warm pool (total)"].append(time.perf_counter() - started)
            warm.remove(uid)
    finally:
        warm.stop()
    return {name: stats_ms(values) for name, values in spans.items()}


# -- main ----------------------------------------------------------------------------

def runsc_with_networks(given: str | None) -> tuple[str, str]:
    """(the runsc to bench, its version): `given`, else gVisor's newest where the
    project's machines have it; ("", why) when there is none or it cannot take an
    actor's namespace over on this kernel (its actors would run without networks)."""
    if given:
        runsc = given
    else:
        newest, why = newest_runsc()
        if newest is None:
            return "", f"{why}; or pass --runsc PATH"
        runsc = str(newest.path)
    try:
        info = probe_runsc(runsc)
    except Exception as exc:  # a path that is no runsc: said in one line, as the rest
        return "", f"{runsc}: not a usable runsc: {' '.join(str(exc).split())[:200]}"
    why_not = netns_problem(info)
    if why_not:
        return "", f"{runsc}: its actors get no network here: {why_not}"
    return runsc, info.version


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runsc", help="a runsc that takes network namespaces over here"
                        " [gVisor's newest, ../shared/runsc-bin/runsc]")
    parser.add_argument("-n", type=int, default=100, help="rounds [100]")
    parser.add_argument("--steps", type=int, default=100,
                        help="in-process create+remove rounds, step by step [100]; 0: none")
    parser.add_argument("--quick", action="store_true", help="5 rounds, 5 steps")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (daemon logs)")
    parser.add_argument("--warm-networks", metavar="N",
                        help="the net daemon's --warm-networks [its default]; 0: each"
                             " network made by its call")
    args = parser.parse_args()
    if args.n < 1 or args.steps < 0:
        parser.error("-n must be at least 1, --steps at least 0")
    if args.quick:
        args.n, args.steps = min(args.n, 5), min(args.steps, 5)
    if os.geteuid() != 0 or not shutil.which("nft", path="/usr/sbin:/sbin:" + os.environ.get(
            "PATH", "")) or not os.path.exists("/bin/busybox"):
        print("bench_actor_network: needs root, nft and /bin/busybox", file=sys.stderr)
        return 2
    runsc, version = runsc_with_networks(args.runsc)
    if not runsc:
        print(f"bench_actor_network: {version}", file=sys.stderr)
        return 2
    if not os.environ.get(IN_NETNS):
        # The worker Pod's stand-in: a network namespace of this run's own, so the
        # daemons' start-up sweep (every ate* link, the whole table inet ateom) and
        # their stop never meet the host's, nor another suite's actors there.
        if shutil.which("unshare") is None:
            print("bench_actor_network: needs unshare (util-linux)", file=sys.stderr)
            return 2
        os.environ[IN_NETNS] = "1"
        os.execvp("unshare", ["unshare", "--net", sys.executable, *sys.argv])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)
    print(f"runsc: {runsc} ({version})")
    base = Path(tempfile.mkdtemp(prefix="ateom-bench-net-"))
    bench = Bench(base, runsc, args.warm_networks)
    try:
        bench.warm_up()
        started = time.perf_counter()
        for i in range(args.n):
            order = SIDES if i % 2 == 0 else SIDES[::-1]
            retry = 0
            while not bench.round(i, order, f"r{retry}" if retry else ""):
                print(f"round {i} run again: {bench.incidents[-1]}", file=sys.stderr)
                if len(bench.incidents) >= MAX_INCIDENTS:
                    raise SystemExit(f"bench_actor_network: {len(bench.incidents)} rounds"
                                     f" failed, giving up: see {base}")
                retry += 1
        loop_s = time.perf_counter() - started
        events = {side: bench.daemons[side].log_events() for side in SIDES}
    finally:
        codes = bench.close()
    if any(codes.values()):
        print(f"a daemon stopped with {codes}: see {base}", file=sys.stderr)
    results = report(bench, events, args.n, loop_s)
    if args.steps:
        results["steps_ms"] = step_report(base, args.steps)
    print(json.dumps(results))
    if args.keep:
        print(f"work dir kept: {base}", file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def report(bench: Bench, events: dict[str, list[dict[str, Any]]], n: int,
           loop_s: float) -> dict[str, Any]:
    results: dict[str, Any] = {"rounds": n, "rounds_s": round(loop_s, 1),
                               "rounds_run_again": bench.incidents}
    print(f"{n} rounds in {loop_s:.0f} s ({len(bench.incidents)} run again, not counted:"
          " a call failed or an actor was taken for exited); each call's gRPC round trip"
          " at the client, min/median/p99 ms")
    print(f"{'call':11} {'no network':>26}   {'own network':>26}   {'+median':>8} "
          f"{'paired median (min..p99)':>26}")
    calls_out: dict[str, Any] = {}
    for call in CALLS:
        none, net = bench.samples["none"][call], bench.samples["net"][call]
        a, b, d = stats_ms(none), stats_ms(net), paired_ms(net, none)
        calls_out[call] = {"none": a, "net": b, "added_median": round(b["median"] - a["median"], 1),
                           "added_paired": d}
        print(f"{call:11} {fmt(a)}   {fmt(b)}   {b['median'] - a['median']:+8.1f} "
              f"{d['median']:+11.1f} ({d['min']:+.1f}..{d['p99']:+.1f})")
    results["calls_ms"] = calls_out

    phases = network_phases(events["net"], bench.uids["net"])
    print("\nthe network's own phases on the 'net' daemon (its log), min/median/p99 ms:")
    results["network_phases_ms"] = {}
    for key in sorted(phases):
        row = stats_ms(phases[key])
        results["network_phases_ms"][key] = row
        where = (" (the checkpoint's release thread, after the answer)"
                 if key.endswith(" in release") else " (before the answer)")
        print(f"  {key:30} n={row['n']:<3} {fmt(row)}{where}")

    print("\nwhere each call's time went, median ms (the op's phases, the daemon's log;"
          " unattributed: the RPC's rest):")
    results["phases_ms"] = {}
    for call in CALLS:
        sides = {side: summary(t for t in calls(events[side])
                               if t.rpc == RPCS[call] and t.actor in set(bench.uids[side]))
                 .get(RPCS[call], {}) for side in SIDES}
        results["phases_ms"][call] = sides
        names = sorted({k for s in sides.values() for k in s.get("phases_ms", {})})
        parts = []
        for name in [*names, "unattributed"]:
            if name == "unattributed":
                v = {s: sides[s].get("unattributed_ms", 0.0) for s in SIDES}
            else:
                v = {s: sides[s].get("phases_ms", {}).get(name, 0.0) for s in SIDES}
            if max(v.values()) >= 0.5:
                parts.append(f"{name} {v['none']:.1f}->{v['net']:.1f}")
        print(f"  {call:10} (none->net) " + ", ".join(parts))
    # Terminate's teardown TERMs the containers, then polls `runsc state` 50 ms apart
    # until they stopped (ateom/daemon/sandbox/teardown.py `_stop`): one poll more is
    # 50 ms more.
    polls = {side: [state_polls(bench.daemons[side].run_dir.joinpath(
        "logs", uid, "runsc.log").read_text(errors="replace"), "app")
        for uid in bench.uids[side]] for side in SIDES}
    results["terminate_state_polls"] = {side: {"median": statistics.median(v), "max": max(v)}
                                        for side, v in polls.items()}
    print("  terminate: runsc state polls of the app per actor (50 ms apart): " + ", ".join(
        f"{side} median {statistics.median(v):g} max {max(v)}" for side, v in polls.items()))

    rows: dict[str, list[float]] = defaultdict(list)
    attempts: list[int] = []
    skewed = 0
    for p in bench.probed:
        done, took, rpc_end, tries = wakeup_of(events["net"], p.uid)
        w = Wakeup(p.call.received, p.app_started, p.first_200, done, took, rpc_end, tries)
        for key, value in w.intervals().items():
            rows[key].append(value)
        attempts.append(tries)
        skewed += int(done < p.first_200)
    wake = {key: stats_ms(values) for key, values in rows.items()}
    probed_run = [p.call.seconds for p in bench.probed]
    wake["run_with_probe"] = stats_ms(probed_run)
    wake["probe_added_to_run_paired"] = paired_ms(probed_run, bench.samples["net"]["run"])
    results["wakeup_ms"] = wake
    results["wakeup_attempts"] = {"min": min(attempts), "median": statistics.median(attempts),
                                  "max": max(attempts)}
    results["wakeup_clock_disagreements"] = skewed
    print("\nwakeup probe (a Run on 'net' whose app has GET /cgi-bin/probe), min/median/p99 ms:")
    labels = {
        "first_200_to_answer": "app's first 200 -> the Run's answer at the client",
        "probe_to_answer": "the daemon's probe has its 200 -> answer at the client",
        "probe_to_rpc_end": "  of which: probe's 200 -> the RPC's end (daemon)",
        "rpc_end_to_client": "  of which: RPC's end -> the client has it (gRPC)",
        "probe_saw_200": "app's first 200 -> the probe has it",
        "app_start_to_first_200": "app start (before httpd) -> its first 200",
        "wakeup_phase": "the wakeup phase (boot done -> every probe 200)",
        "run_with_probe": "Run with the probe (client)",
        "probe_added_to_run_paired": "Run with probe - Run without (same round, paired)",
    }
    for key, label in labels.items():
        print(f"  {label:56} {fmt(wake[key])}")
    a = results["wakeup_attempts"]
    print(f"  probe attempts: min {a['min']} median {a['median']} max {a['max']};"
          f" stamps later than the probe's 200 (clocks disagree): {skewed}")
    return results


def step_report(base: Path, rounds: int) -> dict[str, dict[str, float]]:
    out = steps(base, rounds)
    print(f"\nnetwork.create / network.remove step by step ({rounds} rounds of the daemon's"
          " ActorNetworks in this process, no daemon running), min/median/p99 ms:")
    for name, row in out.items():
        print(f"  {name:44} n={row['n']:<3} {fmt(row)}")
    return out


if __name__ == "__main__":
    sys.exit(main())
