"""The worker Pod's shape as plain values: the base dir's layout per pod uid, the
capacity files, the --atunnel-* flags taken (`ateom.worker`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ateom.errors import AteomError, ErrorCode
from ateom.worker.atunnel import AtunnelSettings
from ateom.worker.capacity import Capacity, memory_bound, parse_limit, read_capacity
from ateom.worker.layout import WorkerLayout, check_pod_uid

POD = "0c3b6a9e-1b1d-4f5a-9f2e-1234567890ab"


def test_the_node_agent_dials_the_pods_own_socket_under_the_base_dir() -> None:
    layout = WorkerLayout("/var/lib/ateom-gvisor", POD)
    assert layout.socket == f"/var/lib/ateom-gvisor/ateoms/{POD}/ateom.sock"
    assert layout.actors_root == "/var/lib/ateom-gvisor/actors"
    assert layout.own_dir == f"/var/lib/ateom-gvisor/ateoms/{POD}"


@pytest.mark.parametrize("uid", ["", "..", "a/b", "-x", "a\0b", "x" * 129, "a..b"])
def test_a_pod_uid_that_is_not_one_safe_component_is_refused_naming_how_it_was_given(
        uid: str) -> None:
    with pytest.raises(AteomError) as err:
        check_pod_uid(uid, "$POD_UID")
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert str(err.value).startswith("$POD_UID ")


def test_capacity_is_read_in_millicores_and_bytes(tmp_path: Path) -> None:
    (tmp_path / "cpu_milli").write_text("4000\n")
    (tmp_path / "memory_bytes").write_text("8589934592")
    got = read_capacity(str(tmp_path))
    assert (got.cpu_milli, got.memory_bytes, got.problems) == (4000, 8589934592, ())


def test_a_missing_or_odd_capacity_file_counts_as_not_known_and_says_why(
        tmp_path: Path) -> None:
    (tmp_path / "cpu_milli").write_text("4.5")  # not what the downward API writes
    got = read_capacity(str(tmp_path))
    assert (got.cpu_milli, got.memory_bytes) == (0, 0)
    cpu, memory = got.problems
    assert cpu.startswith(f"{tmp_path}/cpu_milli: not a whole number")
    assert memory.startswith(f"{tmp_path}/memory_bytes: missing")
    assert parse_limit(b" 12 \n") == 12 and parse_limit(b"-1") is None


def test_the_atunnel_flags_given_are_named_as_typed_and_only_the_broker_is_unused() -> None:
    settings = AtunnelSettings(listen_address=":443", client_identity="spiffe://x/sa/r",
                               broker_identity="spiffe://x/sa/atelet")
    assert settings.given() == {"--atunnel-listen-address": ":443",
                                "--atunnel-client-identity": "spiffe://x/sa/r",
                                "--atunnel-broker-identity": "spiffe://x/sa/atelet"}
    assert settings.unserved() == {"--atunnel-broker-identity": "spiffe://x/sa/atelet"}
    assert AtunnelSettings().given() == {} and AtunnelSettings().problems() == []


@pytest.mark.parametrize(("settings", "want"), [
    (AtunnelSettings(listen_address=":443"),
     ["--atunnel-credential-bundle: required with the listen addresses given",
      "--atunnel-trust-bundle: required with the listen addresses given"]),
    (AtunnelSettings(egress_listen_address="0.0.0.0:15001", credential_bundle="/c"),
     ["--atunnel-egress-trust-bundle: required with the listen addresses given"]),
    (AtunnelSettings(egress_listen_address="0.0.0.0:0", credential_bundle="/c",
                     egress_trust_bundle="/e"),
     ["--atunnel-egress-listen-address=0.0.0.0:0: must name its port (actors' outbound TCP"
      " is redirected to it)"]),
    (AtunnelSettings(connect_listen_address="8443", credential_bundle="/c", trust_bundle="/t"),
     ["--atunnel-connect-listen-address=8443: '8443' is not [host]:port"]),
    (AtunnelSettings(listen_address=":443", connect_listen_address="[::]:8443",
                     egress_listen_address="0.0.0.0:15001", credential_bundle="/c",
                     trust_bundle="/t", egress_trust_bundle="/e"), []),
])
def test_atunnel_flags_the_data_plane_could_not_start_with_are_named(
        settings: AtunnelSettings, want: list[str]) -> None:
    assert settings.problems() == want


def test_the_memory_bound_is_the_limit_or_the_machine_whichever_is_less_swap_on_top(
        tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384 kB\nMemFree:  100 kB\nSwapTotal:   1024 kB\n")
    assert memory_bound(Capacity(), str(meminfo)) == (16384 + 1024) * 1024
    assert memory_bound(Capacity(memory_bytes=4 << 20), str(meminfo)) == (4 << 20) + (1 << 20)
    assert memory_bound(Capacity(memory_bytes=1 << 40), str(meminfo)) == (16384 + 1024) * 1024
    assert memory_bound(Capacity(memory_bytes=4 << 20), str(tmp_path / "none")) == 4 << 20
    assert memory_bound(Capacity(), str(tmp_path / "none")) == 0  # nothing known
    real = memory_bound(Capacity())  # this machine's /proc/meminfo
    assert real >= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * 0.9
