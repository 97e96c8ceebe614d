#!/usr/bin/env python3
"""Benchmark: the data path's cost: requests through the worker's ingress against the
same requests made directly to the actor, egress through the relay, and the node
agent's calls while the ingress is flooded (issue 38, "Measured").

    python benchmarks/bench_ingress.py [--runsc PATH] [--quick] [-n 1000]
        [--clients 1,8,64] [--seconds 3] [--rounds 3] [--big-mib 64]
        [--egress-mib 256] [--cycles 4] [--node-rounds 4] [--no-pinned]   (as root)

`--quick` (about 2 minutes) sets its own smaller counts and sizes, whatever else is given.

Actors need a network of their own, so a runsc that can take an actor's network
namespace on this kernel: `--runsc`, else gVisor's newest release where the project's
machines have it (`tests.support.newest_runsc`), else the ``runsc`` on PATH; Debian's
0.0~20240729 refuses every namespace on this kernel. Without such a runsc (or without
root) it says why in one line and exits 2. The first line printed names the runsc.

It re-executes itself in a network namespace of its own, as a worker Pod has one: a
daemon's start deletes every actor link of its namespace and installs the nftables
table ``inet ateom`` afresh, so a daemon started meanwhile in the machine's own
namespace (a test run beside this one) would otherwise cut this run's actors off.

The set-up is the e2e suites' (tests/daemon/test_e2e_ingress.py, test_e2e_egress.py):
``ateom serve`` with its data plane (ingress on 127.0.0.1, the egress relay), the
test CA's certificates (the router's client certificate, the worker's credential
bundle), a real squid as the egress gateway, a stand-in internet (a namespace of its
own on 203.0.113.0/24 with busybox httpd in it), and the node agent's calls
(`tests.support.node_agent`). The actor under load is busybox httpd serving /small
(3 bytes) and /big (--big-mib, in the sandbox's memory). The same GET goes two ways:
"ingress" (HTTPS with the router's certificate to the data plane, Host
``web.bench.actors.resources.substrate.ate.dev``, one keep-alive connection per
client) and "direct" (plain HTTP to the actor's own address, as the worker reaches
it). busybox httpd closes every connection after its answer (and forks for each), so
a direct request is a new TCP connection to the actor each time, and so is the data
plane's request to the actor behind a kept-alive ingress connection.

Figures, each with its sides interleaved in one run (their order rotating round by
round: this machine's load drifts):
1. per-request latency, one client, small body: min/median/p99 per side, the
   difference of the medians and the median of the paired differences;
2. requests per second with N concurrent clients (--clients), each side for
   --seconds after a warm-up, --rounds times; with the CPU the data plane and the
   actor's sandbox used meanwhile;
3. MB/s (10^6 bytes/s) for GET /big, one client; with the data plane's CPU;
4. egress MB/s: the actor (egress gateway set) downloading --egress-mib from the
   stand-in internet with busybox wget inside its sandbox (``runsc exec``: the
   nftables redirect, the relay, mutual TLS and CONNECT to squid, squid to the
   server), the worker downloading the same file directly (the same busybox wget),
   and the worker through squid alone (curl, CONNECT over mutual TLS). Also each
   side's floor (a 3-byte file the same way: ``runsc exec``, connection set-up),
   MB/s net of it, and the CPU the relay and the sandbox used;
5. the node agent's RunWorkload and CheckpointWorkload of a second actor (run,
   checkpoint, its dirs reset; the release waited for, untimed), at the client and
   in the daemon's handler, on a quiet worker, during a flood of 64 clients through
   the ingress on the first actor, and (for reference: what the same load costs
   with no proxy in its path) during 64 clients straight to the actor. Then again
   with the CPUs split (unless --no-pinned; 2 CPUs or more): the data path (the
   flood's clients, the data plane, the flooded actor's sandbox) on the last CPU,
   the node agent's (the daemon, its runsc calls, this process) on the others,
   which on a small machine tells CPU contention apart from a bottleneck the
   proxy would share with the gRPC API.
Load clients run in a process of their own (spawned; threads with http.client), so
they share no GIL with this process's node-agent client; on a 2-core machine they,
the data plane, the daemon, runsc and the actors still share the CPUs. A load
client's request is bounded (`LOAD_TIMEOUT`); one that fails or times out is counted
(both sides' counts are printed) and the client goes on with a new connection.
Prints min/median/p99 tables, the issue's targets met or missed, and one JSON line
with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import json
import multiprocessing
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from turns_actors import REPO  # noqa: F401 (this dir: puts REPO, and tests/, on sys.path)

from ateom._proto import ateom_pb2 as pb
from ateom.daemon.sandbox.state_dir import unmount_under
from ateom.network import netns_problem
from ateom.runsc.probe import probe_runsc
from tests.support.actor_net import actor_ip
from tests.support.attribution import calls
from tests.support.attribution import summary as attribution
from tests.support.certs import ROUTER_ID, Certs, make_certs
from tests.support.daemon import Daemon, DaemonWorld, runsc_processes
from tests.support.internet import AddressTaken, NotUp, stand_in_internet
from tests.support.newest_runsc import newest_runsc
from tests.support.node_agent import Actor, App, NodeAgent
from tests.support.squid import free_port, running_squid

MiB = 1 << 20
NAME, ATESPACE = "web", "bench"
WEB_UID = "bench-web"
INTERNET_IP = "203.0.113.1"
FLOOD_CLIENTS = 64
IN_NETNS = "ATEOM_BENCH_INGRESS_IN_NETNS"
WARMUP = 0.5  # seconds a load runs before its count starts: connections made, forks warm
# A load client's bound on one request. Under a flood gVisor's netstack now and then
# completes a handshake to busybox httpd (listen backlog 9, a fork per connection)
# and then drops the connection without a trace: the client's request is never
# acknowledged, no reset comes, straight to the actor and through the data plane
# alike (which answers 504 after its own 60 s). Counted, and the client goes on.
LOAD_TIMEOUT = 10.0


def host_for(name: str, atespace: str) -> str:
    """The Host the router sends for an actor (`ateom.dataplane.routes.parse_host`)."""
    return f"{name}.{atespace}.actors.resources.substrate.ate.dev"


# -- figures (pure) ------------------------------------------------------------------


def summary(samples: Sequence[float], scale: float = 1000.0, digits: int = 3
            ) -> dict[str, float]:
    """n, min, median, p99 (nearest rank, as the other benchmarks) and max of
    `samples` times `scale` (seconds to ms by default)."""
    s = sorted(v * scale for v in samples)
    if not s:
        return {"n": 0}
    p99 = s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]
    return {"n": len(s), "min": round(s[0], digits),
            "median": round(statistics.median(s), digits),
            "p99": round(p99, digits), "max": round(s[-1], digits)}


def turn_order(i: int, sides: Sequence[str]) -> list[str]:
    """The sides in round `i`'s order: rotated by one each round, so every side goes
    first as often as the others (reversed each round, for two)."""
    k = i % len(sides) if sides else 0
    return [*sides[k:], *sides[:k]]


def mb_per_s(nbytes: int, seconds: float) -> float:
    """10^6 bytes per second."""
    return round(nbytes / seconds / 1e6, 1) if seconds > 0 else 0.0


def paired_median(a: Sequence[float], b: Sequence[float]) -> float:
    """The median of a[i] - b[i]: the two sides' difference, pair by pair (each pair
    measured side by side, so a drift of the machine's speed cancels out)."""
    return statistics.median(x - y for x, y in zip(a, b, strict=True))


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("inf")


# -- HTTP clients ----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where a client sends its GETs: the ingress (mutual TLS; `tls` is the trust
    bundle, the router's certificate and key) or the actor's address (plain HTTP)."""

    side: str
    address: tuple[str, int]
    host: str
    tls: tuple[str, str, str] | None = None

    def connection(self, timeout: float = 90.0) -> http.client.HTTPConnection:
        # Longer than the data plane's response timeout (60 s): its 504 says more
        # than a client's own timeout would.
        """A keep-alive connection; http.client reconnects by itself after an answer
        that closed it (busybox httpd's, every time)."""
        if self.tls is None:
            return http.client.HTTPConnection(*self.address, timeout=timeout)
        return http.client.HTTPSConnection(*self.address, context=_router_context(*self.tls),
                                           timeout=timeout)


@functools.cache
def _router_context(trust: str, cert: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=trust)
    context.load_cert_chain(cert, key)
    return context


def get(conn: http.client.HTTPConnection, target: Target, path: str, buf: memoryview) -> int:
    """GET `path`, the body read to its end into `buf` (reused: the client's own
    allocations stay out of MB/s); returns the body's size."""
    conn.request("GET", path, headers={"Host": target.host})
    answer = conn.getresponse()
    if answer.status != 200:
        raise http.client.HTTPException(f"{target.side} GET {path}: {answer.status} "
                                        f"{answer.read()[:300]!r}")
    size = 0
    while n := answer.readinto(buf):
        size += n
    return size


@dataclass(frozen=True)
class LoadResult:
    requests: int
    failed: int  # errors, timed-out ones included
    timed_out: int
    seconds: float

    @property
    def per_second(self) -> float:
        return round(self.requests / self.seconds, 1) if self.seconds else 0.0


def _load(target: Target, clients: int, cpus: set[int] | None, stop: Any, out: Any) -> None:
    """The load process: `clients` threads GET /small over their own connection
    until `stop`; what they do in the `WARMUP` after all connected is not counted.
    A request that fails is counted and the client goes on with a new connection."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    done, failed, timed_out = [0] * clients, [0] * clients, [0] * clients
    halt = threading.Event()  # set once `stop` is: no cross-process check per request
    connected = threading.Barrier(clients + 1)

    def request(k: int, conn: http.client.HTTPConnection, buf: memoryview) -> bool:
        try:
            get(conn, target, "/small", buf)
            return True
        except (OSError, http.client.HTTPException) as err:
            failed[k] += 1
            timed_out[k] += isinstance(err, TimeoutError)
            conn.close()
            return False

    def client(k: int) -> None:
        conn = target.connection(timeout=LOAD_TIMEOUT)
        buf = memoryview(bytearray(64 * 1024))
        request(k, conn, buf)  # the connection and its handshake
        connected.wait()
        while not halt.is_set():
            done[k] += request(k, conn, buf)
        conn.close()

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    connected.wait()
    if sum(failed) == clients:
        halt.set()
        out.put(f"every client's first request failed ({target.side})")
        return
    time.sleep(WARMUP)
    counted, started = sum(done), time.perf_counter()
    was_failed, was_timed_out = sum(failed), sum(timed_out)
    out.put("ready")
    stop.wait()
    result = LoadResult(sum(done) - counted, sum(failed) - was_failed,
                        sum(timed_out) - was_timed_out, time.perf_counter() - started)
    halt.set()
    for t in threads:
        t.join(LOAD_TIMEOUT + 5)
    out.put(result)


class Load:
    """`clients` clients against `target` in a process of their own, from `__enter__`
    (all connected and warm) to `finish`."""

    def __init__(self, target: Target, clients: int, cpus: set[int] | None = None) -> None:
        context = multiprocessing.get_context("spawn")  # this process holds gRPC channels
        self.stop = context.Event()
        self.out = context.Queue()
        self.proc = context.Process(target=_load, args=(target, clients, cpus, self.stop,
                                                        self.out), daemon=True)

    def __enter__(self) -> Load:
        self.proc.start()
        said = self.out.get(timeout=120)
        if said != "ready":
            raise SystemExit(f"bench_ingress: the load did not start: {said}")
        return self

    def finish(self) -> LoadResult:
        self.stop.set()
        result: LoadResult = self.out.get(timeout=120)
        return result

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.proc.join(60)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


# -- processes and CPUs ----------------------------------------------------------------


def children(parent: int, marker: bytes) -> list[int]:
    """Pids of `parent`'s children whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == parent and marker in cmdline:
            found.append(int(entry))
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time `pid` has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """The CPU cores `pids` use on average from `reset` (or the start) to `cores`."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = list(pids)
        self.reset()

    def _used(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def reset(self) -> None:
        self.used, self.started = self._used(), time.perf_counter()

    def cores(self) -> float:
        return round((self._used() - self.used) / (time.perf_counter() - self.started), 2)


def pin(pids: Sequence[int], cpus: set[int]) -> None:
    """Every thread of `pids` onto `cpus`; threads they start later inherit it."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(tid), cpus)


# -- the worker ----------------------------------------------------------------------


def capable_runsc(given: str | None) -> tuple[str | None, str]:
    """The runsc to run actors with networks on, and its version; else None and why."""
    if given:
        candidates = [given]
    else:
        newest, why_not = newest_runsc()
        candidates = [str(newest.path)] if newest else []
        if shutil.which("runsc"):
            candidates.append(str(shutil.which("runsc")))
        if not candidates:
            return None, f"no runsc (pass --runsc; {why_not})"
    problems = []
    for path in candidates:
        try:
            info = probe_runsc(path)
        except Exception as err:  # noqa: BLE001 (whatever the binary did, said in one line)
            problems.append(f"{path}: {err}")
            continue
        problem = netns_problem(info)
        if not problem:
            return path, info.version
        problems.append(problem)
    return None, "no runsc here gives actors networks: " + "; ".join(problems)


def web_app(big_mib: int) -> App:
    script = (f"mkdir -p /www; head -c {big_mib * MiB} /dev/zero > /www/big;"
              " echo ok > /www/small; exec httpd -f -p 80 -h /www")
    return App("app", ("sh", "-c", script), wakeup=("/small", 80, 20))


@contextlib.contextmanager
def internet_at(www: Path) -> Iterator[str]:
    """busybox httpd serving `www` at INTERNET_IP:80, a stand-in internet routed from
    the worker's namespace (`tests.support.internet`, as the egress suite's on another
    range); its base URL."""
    server = ["busybox", "httpd", "-f", "-p", f"{INTERNET_IP}:80", "-h", str(www)]
    try:
        with stand_in_internet(INTERNET_IP.rpartition(".")[0], server, tag="bench") as url:
            yield url
    except (AddressTaken, NotUp) as why:
        raise SystemExit(f"bench_ingress: {why}") from None


@dataclass
class Worker:
    daemon: Daemon
    node: NodeAgent
    certs: Certs
    runsc: str
    web: Actor
    ingress: Target
    direct: Target
    dataplane: int  # its pid
    sandbox: list[int]  # the web actor's runsc processes (sandbox, gofer)
    squid_port: int | None  # None: no squid here, no egress figures
    internet: str  # the stand-in internet's base URL


@contextlib.contextmanager
def worker(base: Path, runsc: str, big_mib: int, egress_mib: int) -> Iterator[Worker]:
    """``ateom serve`` with its data plane, squid, the stand-in internet and the web
    actor running (with the egress gateway when squid is here); all gone after."""
    with contextlib.ExitStack() as stack:
        (base / "certs").mkdir()
        certs = make_certs(base / "certs")
        squid_port = None
        try:
            squid_port = stack.enter_context(running_squid(certs))[0]
        except pytest.skip.Exception as why:  # squid missing or not starting, said so
            print(f"no egress figures: {why}")
        www = base / "internet"
        www.mkdir()
        with open(www / "big", "wb") as f:
            f.truncate(egress_mib * MiB)
        (www / "small").write_text("ok\n")
        internet = stack.enter_context(internet_at(www))
        world = DaemonWorld(base / "world")
        daemon = Daemon(world, runsc, run_dir=base / "run", networks=True, max_actors="4",
                        atunnel_listen_address="127.0.0.1:0",
                        atunnel_credential_bundle=str(certs.credential),
                        atunnel_trust_bundle=str(certs.trust),
                        atunnel_client_identity=ROUTER_ID,
                        atunnel_egress_listen_address=f"0.0.0.0:{free_port()}",
                        atunnel_egress_trust_bundle=str(certs.trust))
        stack.callback(daemon.stop)
        node = NodeAgent(f"unix:{daemon.socket}", world.actors_root, base / "gcs",
                         runsc_path=runsc)
        stack.callback(node.close)
        [ready] = [e for e in daemon.log_events() if e.get("event") == "dataplane ready"]
        host, _, port = ready["ingress"][0].rpartition(":")
        [dataplane] = children(daemon.proc.pid, b"ateom.dataplane")
        web = Actor(WEB_UID, (web_app(big_mib),), atespace=ATESPACE, name=NAME)
        gateway = ({"egress_gateway": pb.EgressGateway(address=f"localhost:{squid_port}")}
                   if squid_port else {})
        node.run(web, **gateway)
        stack.callback(node.terminate, web)
        ip = actor_ip(daemon, WEB_UID)
        tls = (str(certs.trust), str(certs.router[0]), str(certs.router[1]))
        sandbox = runsc_processes(str(daemon.run_dir / "actors" / WEB_UID))
        try:
            yield Worker(daemon, node, certs, runsc, web,
                         Target("ingress", (host, int(port)), host_for(NAME, ATESPACE), tls),
                         Target("direct", (ip, 80), ip), dataplane, sandbox, squid_port,
                         internet)
        except BaseException:
            # The run's dir goes with it: what the daemon and the data plane said first.
            said = [line for line in daemon.logs().splitlines()
                    if '"level": "warning"' in line or '"level": "error"' in line
                    or '"event": "answered"' in line]
            print("the daemon's and the data plane's last warnings, errors and own answers:\n"
                  + "\n".join(said[-30:]), file=sys.stderr)
            raise


# -- 1. latency --------------------------------------------------------------------


def latency(w: Worker, n: int, results: dict[str, Any]) -> None:
    targets = {t.side: t for t in (w.ingress, w.direct)}
    conns = {side: t.connection() for side, t in targets.items()}
    buf = memoryview(bytearray(64 * 1024))
    for side, t in targets.items():
        for _ in range(20):  # connections, handshakes, the actor's first forks
            get(conns[side], t, "/small", buf)
    times: dict[str, list[float]] = {side: [] for side in targets}
    for i in range(n):
        for side in turn_order(i, list(targets)):
            started = time.perf_counter()
            get(conns[side], targets[side], "/small", buf)
            times[side].append(time.perf_counter() - started)
    for conn in conns.values():
        conn.close()
    row: dict[str, Any] = {side: summary(v) for side, v in times.items()}
    row["median_diff_ms"] = round(row["ingress"]["median"] - row["direct"]["median"], 3)
    row["paired_median_diff_ms"] = round(
        paired_median(times["ingress"], times["direct"]) * 1000, 3)
    results["latency"] = row
    print(f"\n1. one request, small body, one keep-alive client ({n} each, interleaved)")
    for side in targets:
        _print_row(side, row[side], "ms")
    print(f"   ingress adds {row['median_diff_ms']:+.3f} ms at the median "
          f"({row['paired_median_diff_ms']:+.3f} ms paired)")


def _print_row(label: str, s: dict[str, float], unit: str) -> None:
    print(f"   {label:24} min {s['min']:9.3f} median {s['median']:9.3f} p99 {s['p99']:9.3f}"
          f" max {s['max']:9.3f} {unit} (n={s['n']})")


# -- 2. requests per second ------------------------------------------------------------


def throughput(w: Worker, clients: Sequence[int], seconds: float, rounds: int,
               results: dict[str, Any]) -> None:
    rows: dict[str, dict[str, list[float]]] = {}
    for r in range(rounds):
        for n in clients:
            for side in turn_order(r, ["ingress", "direct"]):
                target = w.ingress if side == "ingress" else w.direct
                with Load(target, n) as load:
                    meters = {"dataplane": CpuMeter([w.dataplane]),
                              "sandbox": CpuMeter(w.sandbox)}
                    time.sleep(seconds)
                    cores = {k: m.cores() for k, m in meters.items()}
                    done = load.finish()
                row = rows.setdefault(f"{n}", {})
                row.setdefault(side, []).append(done.per_second)
                row.setdefault(f"{side}_failed", []).append(done.failed)
                row.setdefault(f"{side}_timed_out", []).append(done.timed_out)
                for k, used in cores.items():
                    row.setdefault(f"{side}_{k}_cpu", []).append(used)
    out: dict[str, Any] = {}
    print(f"\n2. requests per second, small body, N keep-alive clients ({rounds} x {seconds:g} s"
          " each, interleaved; the CPU cores the data plane and the actor's sandbox used)")
    for key, row in rows.items():
        med = {k: round(statistics.median(v), 2) for k, v in row.items()}
        out[key] = {"ingress_rps": row["ingress"], "direct_rps": row["direct"],
                    "ingress_rps_median": med["ingress"], "direct_rps_median": med["direct"],
                    "ingress_over_direct": ratio(med["ingress"], med["direct"]),
                    "cores": {k: v for k, v in med.items() if k.endswith("_cpu")}}
        for side in ("ingress", "direct"):
            out[key][f"{side}_failed"] = int(sum(row[f"{side}_failed"]))
            out[key][f"{side}_timed_out"] = int(sum(row[f"{side}_timed_out"]))
        print(f"   N={key:>3}  ingress {med['ingress']:7.1f} req/s  direct {med['direct']:7.1f}"
              f" req/s  ratio {out[key]['ingress_over_direct']:.2f};"
              f" cores: data plane {med['ingress_dataplane_cpu']:.2f}, actor"
              f" {med['ingress_sandbox_cpu']:.2f} (ingress) / {med['direct_sandbox_cpu']:.2f}"
              f" (direct); failed {out[key]['ingress_failed']} / {out[key]['direct_failed']}"
              f" (timed out {out[key]['ingress_timed_out']} / {out[key]['direct_timed_out']})")
    results["requests_per_second"] = out


# -- 3. a large body ---------------------------------------------------------------


def large_body(w: Worker, big_mib: int, rounds: int, results: dict[str, Any]) -> None:
    targets = {t.side: t for t in (w.ingress, w.direct)}
    conns = {side: t.connection() for side, t in targets.items()}
    buf = memoryview(bytearray(MiB))
    rates: dict[str, list[float]] = {side: [] for side in targets}
    cores: list[float] = []  # the data plane's, during the ingress side's
    for side, t in targets.items():
        get(conns[side], t, "/big", buf)  # the actor's file paged in, the connection made
    for i in range(rounds):
        for side in turn_order(i, list(targets)):
            meter = CpuMeter([w.dataplane])
            started = time.perf_counter()
            size = get(conns[side], targets[side], "/big", buf)
            elapsed = time.perf_counter() - started
            if side == "ingress":
                cores.append(meter.cores())
            if size != big_mib * MiB:
                raise SystemExit(f"bench_ingress: {side} /big gave {size} bytes")
            rates[side].append(mb_per_s(size, elapsed))
    for conn in conns.values():
        conn.close()
    row: dict[str, Any] = {side: summary(v, scale=1.0, digits=1) for side, v in rates.items()}
    row["ingress_over_direct"] = ratio(row["ingress"]["median"], row["direct"]["median"])
    row["dataplane_cores"] = statistics.median(cores)
    results["large_body"] = {"mib": big_mib, **row}
    print(f"\n3. GET of {big_mib} MiB, one client ({rounds} each, interleaved)")
    for side in targets:
        _print_row(side, row[side], "MB/s")
    print(f"   ingress / direct (medians): {row['ingress_over_direct']:.2f}; the data plane "
          f"used {row['dataplane_cores']:.2f} cores meanwhile")


# -- 4. egress -----------------------------------------------------------------------


def egress(w: Worker, egress_mib: int, rounds: int, results: dict[str, Any]) -> None:
    if w.squid_port is None:
        results["egress"] = None
        return
    root = w.daemon.run_dir / "actors" / WEB_UID
    in_actor = [w.runsc, "--root", str(root), "exec", "app"]
    proxy = ["curl", "-sS", "--fail", "-o", "/dev/null", "--proxytunnel",
             "--proxy", f"https://localhost:{w.squid_port}",
             "--proxy-cacert", str(w.certs.trust), "--proxy-cert", str(w.certs.router[0]),
             "--proxy-key", str(w.certs.router[1])]
    wget = ["wget", "-q", "-O", "/dev/null"]
    commands = {"actor via relay+squid": [*in_actor, *wget],
                "worker direct": ["busybox", *wget],
                "worker via squid": proxy}
    if not shutil.which("curl"):
        del commands["worker via squid"]
    # Untimed: the whole body arrives through the relay (wget alone would not say).
    got = subprocess.run([*in_actor, "sh", "-c", f"wget -q -O - {w.internet}/big | wc -c"],
                         capture_output=True, text=True, timeout=300)
    if got.stdout.strip() != str(egress_mib * MiB):
        raise SystemExit(f"bench_ingress: the actor's download gave {got.stdout.strip()!r} "
                         f"bytes, not {egress_mib * MiB}: {got.stderr.strip()}")
    times: dict[str, list[float]] = {f"{side} {f}": [] for side in commands
                                     for f in ("big", "small")}
    # During the actor's downloads: the relay's (the data plane's) and the sandbox's.
    cores: dict[str, list[float]] = {"dataplane": [], "sandbox": []}
    for i in range(rounds):
        for side in turn_order(i, list(commands)):
            for f in ("big", "small"):
                meters = {"dataplane": CpuMeter([w.dataplane]), "sandbox": CpuMeter(w.sandbox)}
                started = time.perf_counter()
                subprocess.run([*commands[side], f"{w.internet}/{f}"], check=True,
                               capture_output=True, timeout=300)
                times[f"{side} {f}"].append(time.perf_counter() - started)
                if f == "big" and side == "actor via relay+squid":
                    for k, m in meters.items():
                        cores[k].append(m.cores())
    size = egress_mib * MiB
    out: dict[str, Any] = {"mib": size // MiB}
    print(f"\n4. egress: a download of {egress_mib} MiB from the stand-in internet "
          f"({rounds} each, interleaved); floor: a 3-byte file the same way")
    for side in commands:
        big, small = times[f"{side} big"], times[f"{side} small"]
        floor = statistics.median(small)
        gross = [mb_per_s(size, t) for t in big]
        net = [mb_per_s(size, t - floor) for t in big]
        out[side] = {"mb_s": summary(gross, 1.0, 1), "mb_s_net_of_floor": summary(net, 1.0, 1),
                     "floor_ms": summary(small)}
        print(f"   {side:24} median {statistics.median(gross):8.1f} MB/s, best {max(gross):8.1f};"
              f" net of its floor ({floor * 1000:.1f} ms) {statistics.median(net):8.1f} MB/s")
    out["cores_during_actor_download"] = {k: statistics.median(v) for k, v in cores.items()}
    print("   during the actor's downloads: the data plane (the relay) used "
          f"{out['cores_during_actor_download']['dataplane']:.2f} cores, the actor's sandbox "
          f"{out['cores_during_actor_download']['sandbox']:.2f}")
    results["egress"] = out


# -- 5. the node agent's calls, quiet and flooded ----------------------------------------


FLOODS = {"ingress flood": "ingress", "direct flood": "direct"}


def node_calls(w: Worker, cycles: int, rounds: int, split: bool, results: dict[str, Any]
               ) -> None:
    """Run and Checkpoint of a second actor: quiet rounds, rounds during a flood
    through the ingress, and, for reference, rounds during the same flood straight to
    the actor (what any such load costs the worker, with no proxy in its path)."""
    variant = "split" if split else "shared"
    all_cpus = os.sched_getaffinity(0)
    data_cpus: set[int] | None = None
    if split:
        data_cpus = {max(all_cpus)}
        pin([w.daemon.proc.pid, os.getpid()], all_cpus - data_cpus)
        pin([w.dataplane, *w.sandbox], data_cpus)
    sides = ["quiet", *FLOODS]
    times: dict[str, list[float]] = {}
    floods: dict[str, list[LoadResult]] = {side: [] for side in FLOODS}
    uids: dict[str, str] = {}
    try:
        for r in range(rounds):
            for side in turn_order(r, sides):
                target = w.ingress if FLOODS.get(side) == "ingress" else w.direct
                flood = (Load(target, FLOOD_CLIENTS, data_cpus) if side in FLOODS
                         else contextlib.nullcontext())
                with flood:
                    for c in range(cycles):
                        uid = f"cycle-{variant}-{side.split()[0]}-{r}-{c}"
                        uids[uid] = side
                        for call, seconds in cycle(w, uid).items():
                            times.setdefault(f"{side} {call}", []).append(seconds)
                    if isinstance(flood, Load):
                        floods[side].append(flood.finish())
    finally:
        if split:
            pin([w.daemon.proc.pid, os.getpid(), w.dataplane, *w.sandbox], all_cpus)
    logged = calls(w.daemon.log_events())
    # Per side and RPC: the handler's wall time and its phases (medians), from the log.
    inside = {side: {rpc.rpartition(".")[2].removesuffix("Workload").lower(): row
                     for rpc, row in attribution([t for t in logged
                                                  if uids.get(t.actor) == side]).items()}
              for side in sides}
    row: dict[str, Any] = {"cpus": (f"data path on CPU {sorted(data_cpus or ())}, node "
                                    f"agent's on {sorted(all_cpus - (data_cpus or set()))}")
                           if split else "shared"}
    print(f"\n5. the node agent's calls on a second actor: quiet, during {FLOOD_CLIENTS} "
          f"clients through the ingress, during {FLOOD_CLIENTS} straight to the actor "
          f"({'the CPUs split: ' + row['cpus'] if split else 'the CPUs shared'};"
          f" {rounds} rounds x {cycles} cycles each side)")
    for call in ("run", "checkpoint"):
        row[call] = {}
        for side in sides:
            row[call][side] = summary(times[f"{side} {call}"])
            row[call][f"{side} handler"] = inside[side][call]
            _print_row(f"{call} {side}", row[call][side], "ms")
        quiet = row[call]["quiet"]["median"]
        for side in FLOODS:
            row[call][f"{side} / quiet"] = ratio(row[call][side]["median"], quiet)
        print(f"   {call}: flood / quiet (medians) through the ingress "
              f"{row[call]['ingress flood / quiet']:.3f}, straight to the actor "
              f"{row[call]['direct flood / quiet']:.3f}")
        for side in sides:
            handler = inside[side][call]
            top = sorted(handler["phases_ms"].items(), key=lambda kv: -kv[1])[:4]
            print(f"     in the handler, {side:13} {handler['wall_ms']:7.1f} ms: "
                  + ", ".join(f"{n} {ms}" for n, ms in top)
                  + f", outside any phase {handler['unattributed_ms']}")
    for side, done in floods.items():
        rps = [x.per_second for x in done]
        row[f"{side} rps"] = rps
        row[f"{side} failed"] = sum(x.failed for x in done)
        row[f"{side} timed out"] = sum(x.timed_out for x in done)
        print(f"   the {side} meanwhile: median {statistics.median(rps):.1f} req/s, "
              f"{row[f'{side} failed']} failed ({row[f'{side} timed out']} timed out after "
              f"{LOAD_TIMEOUT:g} s)")
    results[f"node_agent_{variant}"] = row


def cycle(w: Worker, uid: str) -> dict[str, float]:
    """One actor run and checkpointed, timed at the node agent: each RPC alone (the
    node agent's own work, laying the dirs out and resetting them, is not ateom's)."""
    actor = Actor(uid, (App("app", ("sh", "-c", "mkdir -p /www; echo ok > /www/small;"
                                    " exec httpd -f -p 80 -h /www"),
                            wakeup=("/small", 80, 20)),), atespace=ATESPACE, name=uid)
    node = w.node
    common: dict[str, Any] = dict(atespace=actor.atespace, actor_name=actor.name, actor_uid=uid,
                  runsc_path=node.runsc_path, spec=actor.spec(), actor_dirs=node.dirs(uid))
    node.lay_out(actor)
    started = time.perf_counter()
    node.stub.RunWorkload(pb.RunWorkloadRequest(**common), timeout=120)
    ran = time.perf_counter()
    node.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
        **common, snapshot_uri=node.snapshot_uri(actor), scope=pb.SNAPSHOT_SCOPE_FULL),
        timeout=120)
    saved = time.perf_counter()
    shutil.rmtree(node.actors_root / uid, ignore_errors=True)  # the snapshot not kept
    w.daemon.settle()
    return {"run": ran - started, "checkpoint": saved - ran}


# -- the run -------------------------------------------------------------------------


def targets(results: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, met or not."""
    out: dict[str, Any] = {}
    if "latency" in results:
        out["ingress_adds_at_most_1ms_at_median"] = results["latency"]["median_diff_ms"] <= 1.0
    for variant in ("shared", "split"):
        row = results.get(f"node_agent_{variant}")
        if row:
            out[f"flood_within_10pct_{variant}"] = all(
                row[call]["ingress flood / quiet"] <= 1.10 for call in ("run", "checkpoint"))
    print("\ntargets (issue 38):")
    for name, met in out.items():
        print(f"   {name}: {'met' if met else 'MISSED'}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runsc")
    parser.add_argument("--quick", action="store_true", help="a short run (about 2 min)")
    parser.add_argument("-n", type=int, default=1000, help="requests per side, figure 1")
    parser.add_argument("--clients", default="1,8,64", help="N concurrent clients, figure 2")
    parser.add_argument("--seconds", type=float, default=3.0, help="per load, figure 2")
    parser.add_argument("--rounds", type=int, default=3, help="figures 2, 3 and 4")
    parser.add_argument("--big-mib", type=int, default=64, help="the large body, figure 3")
    parser.add_argument("--egress-mib", type=int, default=256, help="the download, figure 4")
    parser.add_argument("--cycles", type=int, default=4, help="per round, figure 5")
    parser.add_argument("--node-rounds", type=int, default=4,
                        help="quiet and flood rounds each, figure 5")
    parser.add_argument("--pinned", action=argparse.BooleanOptionalAction, default=True,
                        help="figure 5 again with the CPUs split")
    parser.add_argument("--only", default="1,2,3,4,5", help="the figures to measure")
    args = parser.parse_args()
    only = set(args.only.split(","))
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress, live
    if args.quick:
        args.n, args.seconds, args.rounds, args.big_mib = 200, 1.5, 2, 16
        args.egress_mib, args.cycles, args.node_rounds = 32, 2, 2
    if os.geteuid() != 0:
        print("bench_ingress: needs root (network namespaces, nftables, runsc)")
        return 2
    if not os.environ.get(IN_NETNS):
        # A network namespace of its own, as a worker Pod has: a daemon's start deletes
        # every actor link (ate + 12 hex digits) of its namespace and installs the nftables
        # table inet ateom afresh, so another daemon started on this machine's own
        # namespace meanwhile (a test run) would cut this run's actors off.
        os.environ[IN_NETNS] = "1"
        os.execvp("unshare", ["unshare", "--net", "--", sys.executable, *sys.argv])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    runsc, version = capable_runsc(args.runsc)
    if runsc is None:
        print(f"bench_ingress: {version}")
        return 2
    cpus = len(os.sched_getaffinity(0))
    print(f"runsc: {runsc} ({version}); {cpus} CPUs, shared by the clients, the data plane,"
          " the daemon, runsc and the actors")
    results: dict[str, Any] = {"runsc": version, "cpus": cpus}
    base = Path(tempfile.mkdtemp(prefix="ateom-bench-ingress-"))
    try:
        with worker(base, runsc, args.big_mib, args.egress_mib) as w:
            if "1" in only:
                latency(w, args.n, results)
            if "2" in only:
                throughput(w, [int(n) for n in args.clients.split(",") if n], args.seconds,
                           args.rounds, results)
            if "3" in only:
                large_body(w, args.big_mib, args.rounds, results)
            if "4" in only:
                egress(w, args.egress_mib, args.rounds, results)
            if "5" in only:
                node_calls(w, args.cycles, args.node_rounds, False, results)
                if args.pinned and cpus >= 2:
                    node_calls(w, args.cycles, args.node_rounds, True, results)
        results["targets"] = targets(results)
    finally:
        unmount_under(str(base))  # what a failed run's runsc left mounted
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
