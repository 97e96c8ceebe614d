"""The data plane as the daemon runs it: a child process of its own (`ateom.dataplane`:
ingress, CONNECT tunnels, the egress relay) and the routes the lifecycle feeds it.

Apart from the daemon's process so that a flood of requests shares neither a GIL nor a
thread pool with the node agent's calls. Started through the reaper (whose
``waitpid(-1)`` is the only one), its stdin is the daemon's end of a socketpair, the
control stream (newline JSON: `ateom.dataplane.control`), its stdout and stderr the
daemon's own (one JSON log). `Routes` keeps every actor's route, so a data plane that
dies is started again (after `RESTART_DELAY`, longer each time one dies unready:
a bad bundle path does not fill the log) and given them all back; until it is up
again the worker is NOT_SERVING, saying why (`problem`). It is up once it has
answered a first ping: it binds its listeners before it reads its control stream,
so an answer means the router can connect; one that does not answer within
`START_TIMEOUT` is killed, and so started again. `sync` waits, bounded, until
the data plane has applied every route sent so far: a Run answers only once its actor
is routed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import structlog

from ateom.daemon.calls.requests import ActorRef
from ateom.process.reaper import Reaper
from ateom.worker.atunnel import AtunnelSettings

log = structlog.get_logger("ateom.dataplane")

RESTART_DELAY = 1.0  # between a data plane's death and its successor's start,
MAX_RESTART_DELAY = 30.0  # doubled each time one dies before it answered, up to this
SYNC_TIMEOUT = 2.0  # a ping answered, or the route is said to be late
START_TIMEOUT = 20.0  # from spawn to its first answer (its listeners are bound by then)
STOP_TIMEOUT = 5.0  # after its control stream closes, before it is killed


@dataclass(frozen=True, slots=True)
class Route:
    """What the data plane knows of one actor (`ateom.dataplane.routes.Route`)."""

    uid: str
    atespace: str
    name: str
    ip: str | None  # None: no network of its own (the router is told so, 502)
    state: str
    egress_gateway: str | None = None
    port: int = 80


class RouteFeed(Protocol):
    """What the lifecycle tells whoever routes requests to actors."""

    def route(self, route: Route) -> None: ...
    def state(self, uid: str, state: str) -> None: ...
    def forget(self, uid: str) -> None: ...
    def sync(self) -> bool: ...


class NoRoutes:
    """No data plane (no --atunnel-* address): nothing is routed."""

    def route(self, route: Route) -> None:
        pass

    def state(self, uid: str, state: str) -> None:
        pass

    def forget(self, uid: str) -> None:
        pass

    def sync(self) -> bool:
        return True


def route_of(ref: ActorRef, ip: str | None, state: str, egress: str | None) -> Route:
    """An actor's route: its name as the router spells it (``<name>.<atespace>``)."""
    return Route(ref.actor_uid, ref.atespace, ref.actor_name or ref.actor_uid, ip, state,
                 egress)


def dataplane_argv(atunnel: AtunnelSettings, python: str = sys.executable) -> list[str]:
    """The data plane's command line for what the controller gave (pure); [] when it
    serves nothing (no listen address)."""
    a = atunnel
    if not (a.listen_address or a.connect_listen_address or a.egress_listen_address):
        return []
    argv = [python, "-m", "ateom.dataplane", "--control-fd", "0"]
    for flag, value in (("--ingress", a.listen_address),
                        ("--connect", a.connect_listen_address),
                        ("--credential-bundle", a.credential_bundle),
                        ("--trust-bundle", a.trust_bundle),
                        ("--client-identity", a.client_identity),
                        ("--egress", a.egress_listen_address),
                        ("--egress-trust-bundle", a.egress_trust_bundle)):
        if value:
            argv += [flag, value]
    return argv


class Routes:
    """The data plane child and its routes (see the module). Thread-safe."""

    def __init__(self, argv: list[str], reaper: Reaper) -> None:
        self.argv = argv
        self.reaper = reaper
        self._lock = threading.Lock()
        self._routes: dict[str, Route] = {}
        self._sock: socket.socket | None = None
        self._pid = 0
        self._gone = threading.Event()  # the current child has exited
        self._stopping = False
        self._delay = RESTART_DELAY
        self.last_exit: int | None = None  # the last child's exit status, once it ended
        self._ids = itertools.count(1)
        self._answers: dict[int, dict[str, Any]] = {}
        self._answered = threading.Condition(self._lock)
        self.problem = "the data plane has not started yet"

    # -- the child -------------------------------------------------------------------

    def start(self) -> None:
        """Start the data plane and give it every route (spawns a process)."""
        ours, theirs = socket.socketpair()
        try:
            pid = self.reaper.spawn(self.argv, stdin=theirs.fileno(),
                                    stdout=sys.stdout.fileno(), stderr=sys.stderr.fileno())
        finally:
            theirs.close()
        gone = threading.Event()
        with self._lock:
            self._sock, self._pid, self._gone = ours, pid, gone
            self.problem = "the data plane (ingress, egress) is starting"
            lines = [self._line({"op": "route", **asdict(r)}) for r in self._routes.values()]
        for line in lines:
            self._send(line)
        threading.Thread(target=self._read, args=(ours,), name="dataplane-control",
                         daemon=True).start()
        threading.Thread(target=self._await_exit, args=(pid, gone), name="dataplane-exit",
                         daemon=True).start()
        if self._answers_within(START_TIMEOUT, gone):
            with self._lock:
                if self._pid == pid:
                    self.problem, self._delay = "", RESTART_DELAY
            log.info("dataplane_started", pid=pid, routes=len(lines))
            return
        with self._lock:
            if self._pid != pid or self._sock is None:
                return  # it exited: `_exited` said so and starts the next one
            self.problem = (f"the data plane (ingress, egress) did not answer within "
                            f"{START_TIMEOUT:g} s of starting; starting it again")
        log.error("dataplane_start_timeout", pid=pid, timeout_s=START_TIMEOUT)
        _kill(pid, gone)  # its exit starts the next one (`_exited`)

    def _answers_within(self, seconds: float, gone: threading.Event) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not gone.is_set():
            if self.ask({"op": "ping"}) is not None:
                return True
        return False

    def _await_exit(self, pid: int, gone: threading.Event) -> None:
        code = self.reaper.wait(pid)  # the reaper's record of its spawned child
        self.last_exit = code
        gone.set()
        self._exited(pid, -1 if code is None else code)

    def _exited(self, pid: int, code: int) -> None:
        with self._lock:
            if pid != self._pid or self._stopping:
                return
            self.problem = (f"the data plane (ingress, egress) exited with status {code};"
                            " starting it again")
            self._sock = None
            delay = self._delay
            self._delay = min(delay * 2, MAX_RESTART_DELAY)
        log.error("dataplane_exited", pid=pid, exit_code=code, restart_in_s=delay)
        timer = threading.Timer(delay, self._restart)
        timer.daemon = True
        timer.start()

    def _restart(self) -> None:
        with self._lock:
            if self._stopping:
                return
        try:
            self.start()
        except OSError as exc:
            with self._lock:
                self.problem = f"the data plane (ingress, egress) cannot start: {exc}"
            log.error("dataplane_start_failed", error=str(exc))

    def stop(self) -> None:
        """Close the control stream (the data plane exits 0 on its end), wait a bounded
        while, then kill it."""
        with self._lock:
            self._stopping = True
            sock, pid, gone = self._sock, self._pid, self._gone
            self._sock = None
        if sock is not None:
            # shutdown first: close alone leaves the connection open while our reader
            # thread is in recv() on it, and the data plane would never see its end.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if pid and not gone.wait(STOP_TIMEOUT):
            log.warning("dataplane_stop_timeout", pid=pid, timeout_s=STOP_TIMEOUT)
            _kill(pid, gone)
            gone.wait(STOP_TIMEOUT)

    # -- the feed --------------------------------------------------------------------

    def route(self, route: Route) -> None:
        with self._lock:
            self._routes[route.uid] = route
        self._send(self._line({"op": "route", **asdict(route)}))

    def state(self, uid: str, state: str) -> None:
        with self._lock:
            old = self._routes.get(uid)
        if old is not None:
            self.route(Route(**{**asdict(old), "state": state}))

    def forget(self, uid: str) -> None:
        with self._lock:
            known = self._routes.pop(uid, None) is not None
        if known:
            self._send(self._line({"op": "forget", "uid": uid}))

    def sync(self) -> bool:
        """Whether the data plane applied every route sent so far (a ping answered
        within `SYNC_TIMEOUT`)."""
        return self.ask({"op": "ping"}) is not None

    def stats(self) -> dict[str, Any] | None:
        """The data plane's counters (`ateom.dataplane.counters`), None when it did not
        answer in time."""
        return self.ask({"op": "stats"})

    def ask(self, message: dict[str, Any]) -> dict[str, Any] | None:
        ident = next(self._ids)
        self._send(self._line({**message, "id": ident}))
        with self._answered:
            got = self._answered.wait_for(lambda: ident in self._answers, SYNC_TIMEOUT)
            return self._answers.pop(ident) if got else None

    @staticmethod
    def _line(message: dict[str, Any]) -> bytes:
        return (json.dumps(message, separators=(",", ":")) + "\n").encode()

    def _send(self, line: bytes) -> None:
        """One line to the data plane; lost (and said) when it is down: it gets every
        route again when it starts."""
        with self._lock:
            sock = self._sock
            if sock is None:
                return
            try:
                sock.sendall(line)
            except OSError as exc:
                log.warning("dataplane_unreachable", error=str(exc))

    def _read(self, sock: socket.socket) -> None:
        buffer = b""
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                _deliver(line, self._answers, self._answered)


def _kill(pid: int, gone: threading.Event) -> None:
    """SIGKILL, unless it has exited already (its pid may be another's by then)."""
    if not gone.is_set():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def _deliver(line: bytes, answers: dict[int, dict[str, Any]],
             answered: threading.Condition) -> None:
    try:
        message = json.loads(line)
    except ValueError:
        return
    if isinstance(message, dict) and isinstance(message.get("id"), int):
        with answered:
            answers[message["id"]] = message
            answered.notify_all()


def start_routes(atunnel: AtunnelSettings, reaper: Reaper,
                 ) -> tuple[RouteFeed, Callable[[], str], Callable[[], None]]:
    """The route feed for these settings, why the data plane is not serving ("" when it
    is), and how to stop it; a feed that routes nothing when no address is given."""
    argv = dataplane_argv(atunnel)
    if not argv:
        return NoRoutes(), lambda: "", lambda: None
    routes = Routes(argv, reaper)
    routes.start()
    return routes, lambda: routes.problem, routes.stop
