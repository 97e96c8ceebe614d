"""The data plane as the daemon drives it: its command line, its control stream
(routes, forget, ping, stats, malformed lines), and how it exits."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dataplane.support import (
    HOST,
    ROOT,
    Backend,
    Certs,
    DataPlane,
    ingress_args,
)


def run_to_exit(args: list[str]) -> tuple[int, list[dict[str, object]]]:
    parent, child = socket.socketpair()
    with parent, child:
        run = subprocess.run([sys.executable, "-m", "ateom.dataplane", "--control-fd",
                              str(child.fileno()), *args], pass_fds=[child.fileno()],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    return run.returncode, [json.loads(line) for line in run.stdout.splitlines()]


def test_a_bind_failure_exits_1_with_one_json_line_naming_the_flag(certs: Certs) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        status, lines = run_to_exit(["--ingress", f"127.0.0.1:{port}",
                                     *ingress_args(certs)[2:]])
    assert status == 1 and len(lines) == 1
    assert lines[0]["event"] == "bind failed" and lines[0]["flag"] == "--ingress"
    assert "in use" in str(lines[0]["reason"])


def test_a_privileged_port_refused_names_the_capability_and_the_sysctl(certs: Certs) -> None:
    # As a worker container without NET_BIND_SERVICE binds :443: root here runs the data
    # plane with that capability out of its bounding set (setpriv, util-linux).
    start = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    if start <= 1:
        pytest.fail(f"ip_unprivileged_port_start is {start} here: every port is unprivileged")
    parent, child = socket.socketpair()
    drop = (["setpriv", "--bounding-set=-net_bind_service", "--inh-caps=-net_bind_service",
             "--"] if os.geteuid() == 0 else [])
    with parent, child:
        run = subprocess.run([*drop, sys.executable, "-m", "ateom.dataplane", "--control-fd",
                              str(child.fileno()), "--ingress", "127.0.0.1:1",
                              *ingress_args(certs)[2:]], pass_fds=[child.fileno()],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert run.returncode == 1 and len(lines) == 1, (run.stdout, run.stderr)
    assert lines[0]["event"] == "bind failed" and lines[0]["flag"] == "--ingress"
    reason = str(lines[0]["reason"])
    assert "NET_BIND_SERVICE" in reason and "ip_unprivileged_port_start" in reason, reason


@pytest.mark.parametrize(("args", "status", "flag"), [
    (["--ingress", ":443"], 2, None),  # no bundles: a usage error
    (["--ingress", "nonsense"], 1, "--ingress"),
])
def test_a_bad_command_line_exits_non_zero_with_one_json_line(
        certs: Certs, args: list[str], status: int, flag: str | None) -> None:
    full = args if status == 2 else [*args, *ingress_args(certs)[4:]]
    got, lines = run_to_exit(full)
    assert got == status and len(lines) == 1 and lines[0]["level"] == "error"
    if flag:
        assert lines[0]["flag"] == flag


def test_an_unreadable_credential_bundle_exits_1_naming_it(certs: Certs, tmp_path: Path) -> None:
    bad = tmp_path / "credential-bundle.pem"
    bad.write_text("not a bundle")
    status, lines = run_to_exit(ingress_args(certs, credential=bad))
    assert status == 1 and lines[0]["event"] == "tls bundle unreadable"
    assert "--credential-bundle" in str(lines[0]["flag"])


def test_it_exits_0_when_the_control_stream_closes_and_its_listeners_go(
        certs: Certs, tmp_path: Path) -> None:
    dp = DataPlane(ingress_args(certs), tmp_path / "dp.log")
    address = dp.address("ingress")
    dp.control.close()  # the daemon went away
    assert dp.proc.wait(20) == 0
    assert dp.lines()[-1]["reason"] == "control stream closed"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(address, timeout=5)


def test_it_exits_0_on_sigterm(certs: Certs, tmp_path: Path) -> None:
    dp = DataPlane(ingress_args(certs), tmp_path / "dp.log")
    dp.proc.send_signal(signal.SIGTERM)
    assert dp.proc.wait(20) == 0
    assert dp.lines()[-1]["reason"] == "signal"
    dp.control.close()


def test_malformed_control_lines_are_skipped_and_counted_never_fatal(
        certs: Certs, tmp_path: Path) -> None:
    backend = Backend("alpha")
    dp = DataPlane(ingress_args(certs), tmp_path / "dp.log")
    try:
        for bad in (b"not json\n", b"[1, 2]\n", b'{"op": "dance"}\n',
                    b'{"op": "route", "uid": "u", "atespace": "s", "name": "n"}\n',
                    b'{"op": "route", "uid": "u", "atespace": "s", "name": "n", '
                    b'"ip": "10.0.0.1", "colour": "red"}\n',
                    b'{"op": "forget"}\n', b"x" * 200_000 + b"\n"):
            dp.send(bad)
        dp.route("alpha", backend.port)
        stats = dp.stats()
        assert stats["control_errors"] == 7 and stats["routes"] == 1
        conn = dp.https(certs)
        conn.request("GET", "/who", headers={"Host": HOST.format(name="alpha")})
        assert conn.getresponse().status == 200
        skipped = [x for x in dp.lines() if x.get("event") == "control line skipped"]
        assert len(skipped) == 7 and any("longer than" in x["reason"] for x in skipped)
    finally:
        assert dp.stop() == 0
        backend.stop()


def test_forget_removes_a_route_and_stats_answers_every_counter(
        certs: Certs, tmp_path: Path) -> None:
    backend = Backend("alpha")
    dp = DataPlane(ingress_args(certs), tmp_path / "dp.log")
    try:
        dp.route("alpha", backend.port)
        conn = dp.https(certs)
        conn.request("GET", "/who", headers={"Host": HOST.format(name="alpha")})
        conn.getresponse().read()
        dp.send({"op": "forget", "uid": "uid-alpha"})
        conn.request("GET", "/who", headers={"Host": HOST.format(name="alpha")})
        assert conn.getresponse().status == 404
        stats = dp.stats()
        assert stats["op"] == "stats" and stats["routes"] == 0
        assert stats["requests"] == {"1xx": 0, "2xx": 1, "3xx": 0, "4xx": 1, "5xx": 0}
        assert stats["answers"]["unknown_actor"] == 1
        assert stats["connections_open"] == 1 and stats["upstream_opened"] == 1
        assert set(stats["egress"]) >= {"relayed", "no_gateway", "gateway_unreachable"}
    finally:
        assert dp.stop() == 0
        backend.stop()
