"""SERVING means able to run an actor: `ateom serve` with a runsc that is not there,
or a global flag that runsc does not know, says NOT_SERVING and why, refuses
RunWorkload before any runsc call, and turns SERVING by itself once mended.

On Debian's runsc (the set-up's; no GPU needed), driven as an operator would:
`ateom health` (the Pod's exec probe), grpcurl's GetStatus, and the log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from ateom._proto import ateom_pb2 as pb
from tests.daemon.conftest import _stopped, needs_runsc
from tests.support import grpcurl as operator
from tests.support.daemon import RUNSC, Daemon, DaemonWorld, run_request

pytestmark = [needs_runsc, pytest.mark.root, pytest.mark.runtime]

REPO = Path(__file__).resolve().parents[2]


def health(daemon: Daemon) -> int:
    """`ateom health`'s exit code against the daemon's socket."""
    return subprocess.run([sys.executable, "-m", "ateom", "health", "--socket",
                           str(daemon.socket)], cwd=REPO, capture_output=True,
                          timeout=30, check=False).returncode


def status(daemon: Daemon) -> dict[str, object]:
    if operator.GRPCURL is None:  # the same answer, from the Python stub
        reply = daemon.inspect.GetStatus(pb.GetStatusRequest(), timeout=30)
        return {"not_ready": list(reply.not_ready), "runsc": {"error": reply.runsc.error}}
    return operator.call(daemon.socket, "ateom.Inspect/GetStatus", {})


def wait_health(daemon: Daemon, code: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while health(daemon) != code:
        assert time.monotonic() < deadline, f"ateom health never exited {code}"
        time.sleep(0.2)


def test_no_runsc_is_not_serving_says_why_and_mends_without_a_restart(world: DaemonWorld) -> None:
    assert RUNSC is not None
    later = world.base / "later" / "runsc"  # not there yet
    d = Daemon(world, str(later), run_dir=world.base / "run-no-runsc", expect="NOT_SERVING")
    try:
        assert health(d) == 1
        said = status(d)
        [problem] = said["not_ready"]  # type: ignore[misc]
        assert str(later) in problem and "not found or not executable" in problem
        assert str(later) in said["runsc"]["error"]  # type: ignore[index]
        events = [e.get("event") for e in d.log_events()]
        assert "not_ready" in events and "ready" not in events
        world.bundles("nr", {})
        with pytest.raises(grpc.RpcError) as err:
            d.stub.RunWorkload(run_request(world, "nr", []), timeout=30)
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert str(later) in (err.value.details() or "")
        later.parent.mkdir(parents=True)
        os.symlink(RUNSC, later)  # the operator installs it
        wait_health(d, 0)
        assert status(d).get("not_ready") in (None, [])
        assert any(e.get("event") == "ready_again" for e in d.log_events())
    finally:
        _stopped(d)


def test_a_global_flag_runsc_does_not_know_is_not_serving(world: DaemonWorld) -> None:
    assert RUNSC is not None
    d = Daemon(world, RUNSC, run_dir=world.base / "run-typo", expect="NOT_SERVING",
               runsc_global_flag="--netwrk=none")
    try:
        assert health(d) == 1
        [problem] = status(d)["not_ready"]  # type: ignore[misc]
        assert "--netwrk=none" in problem and "no such flag" in problem
        world.bundles("typo", {})
        with pytest.raises(grpc.RpcError) as err:
            d.stub.RunWorkload(run_request(world, "typo", []), timeout=30)
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "--netwrk=none" in (err.value.details() or "")
        assert not (d.run_dir / "actors" / "typo").exists()  # no runsc call was made
    finally:
        _stopped(d)
