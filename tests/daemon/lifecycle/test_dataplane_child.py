"""The data plane as the daemon runs it (`ateom.daemon.lifecycle.dataplane`): the
command line from the controller's flags, and a real `python -m ateom.dataplane`
child that is killed -9, restarted and given its routes back, or that cannot start
and says why, all through the daemon's reaper."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ateom.daemon.lifecycle import dataplane
from ateom.daemon.lifecycle.dataplane import Route, Routes, dataplane_argv
from ateom.process.reaper import Reaper
from ateom.worker.atunnel import AtunnelSettings
from tests.support.certs import ROUTER_ID, make_certs


def until(what: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_no_listen_address_means_no_data_plane() -> None:
    assert dataplane_argv(AtunnelSettings(credential_bundle="/c", trust_bundle="/t")) == []


def test_the_controllers_flags_become_the_data_planes() -> None:
    settings = AtunnelSettings(listen_address=":443", connect_listen_address=":8443",
                               credential_bundle="/c.pem", trust_bundle="/t.pem",
                               client_identity=ROUTER_ID, egress_listen_address="0.0.0.0:15001",
                               egress_trust_bundle="/e.pem", broker_identity="spiffe://x")
    assert dataplane_argv(settings, python="/py") == [
        "/py", "-m", "ateom.dataplane", "--control-fd", "0", "--ingress", ":443",
        "--connect", ":8443", "--credential-bundle", "/c.pem", "--trust-bundle", "/t.pem",
        "--client-identity", ROUTER_ID, "--egress", "0.0.0.0:15001",
        "--egress-trust-bundle", "/e.pem"]


@pytest.fixture
def reaper() -> Reaper:
    return Reaper().start(reap_all=False)


@pytest.fixture
def fast_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dataplane, "RESTART_DELAY", 0.1)


@pytest.fixture
def routes(tmp_path: Path, reaper: Reaper, fast_restarts: None) -> Iterator[Routes]:
    certs = make_certs(tmp_path)
    argv = dataplane_argv(AtunnelSettings(
        listen_address="127.0.0.1:0", credential_bundle=str(certs.credential),
        trust_bundle=str(certs.trust)), python=sys.executable)
    routes = Routes(argv, reaper)
    routes.start()
    yield routes
    routes.stop()


def test_a_data_plane_killed_is_started_again_with_every_route(routes: Routes) -> None:
    assert routes.problem == ""  # it answered: its listeners are bound
    routes.route(Route("u1", "space", "app", "169.254.0.2", "running"))
    routes.route(Route("u2", "space", "other", "169.254.0.6", "booting"))
    routes.forget("u2")
    assert routes.sync()
    first = routes._pid
    os.kill(first, 9)
    until(lambda: routes.problem != "")
    assert "exited with status -9" in routes.problem
    until(lambda: routes.problem == "" and routes._pid != first)
    stats = routes.stats()
    assert stats is not None and stats["routes"] == 1


def test_stop_ends_the_data_plane_and_no_restart_follows(routes: Routes,
                                                          reaper: Reaper) -> None:
    pid = routes._pid
    routes.stop()
    assert routes.last_exit == 0  # it saw its control stream end and exited, not killed
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    time.sleep(0.5)  # past the restart delay: nothing was started
    assert routes._pid == pid


def test_a_data_plane_that_cannot_start_is_said_and_retried_ever_later(
        tmp_path: Path, reaper: Reaper, fast_restarts: None) -> None:
    argv = dataplane_argv(AtunnelSettings(
        listen_address="127.0.0.1:0", credential_bundle=str(tmp_path / "missing.pem"),
        trust_bundle=str(tmp_path / "missing-ca.pem")), python=sys.executable)
    routes = Routes(argv, reaper)
    try:
        routes.start()  # returns, bounded: the child said why on its stdout and exited 1
        until(lambda: "exited with status 1" in routes.problem)
        until(lambda: routes._delay >= 0.4)  # doubled at each failed start
    finally:
        routes.stop()
