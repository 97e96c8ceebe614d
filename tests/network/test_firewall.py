"""``table inet ateom`` as JSON (pure), and how nft's failures read."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Mapping, Sequence

import pytest

from ateom.errors import AteomError, ErrorCode
from ateom.network import firewall
from ateom.network.addressing import MAX_INDEX, host_ifname
from ateom.network.firewall import Nft
from ateom.network.redirect import parse_sockaddr


def _chains(cmds: list[firewall.Command]) -> dict[str, dict[str, object]]:
    return {c["add"]["chain"]["name"]: c["add"]["chain"] for c in cmds
            if "chain" in c.get("add", {})}


def _rules(cmds: list[firewall.Command], chain: str) -> list[str]:
    return [json.dumps(c["add"]["rule"]["expr"]) for c in cmds
            if "rule" in c.get("add", {}) and c["add"]["rule"]["chain"] == chain]


def test_the_ruleset_replaces_the_table_whole() -> None:
    cmds = firewall.ruleset(15001)
    table = {"family": "inet", "name": "ateom"}
    assert cmds[:3] == [{"add": {"table": table}}, {"delete": {"table": table}},
                        {"add": {"table": table}}]
    sets = [c["add"]["set"] for c in cmds if "set" in c.get("add", {})]
    # Actors are known by their links' names; only egress needs a set.
    assert [(s["name"], s["type"]) for s in sets] == [("egress_ifaces", "ifname")]
    chains = _chains(cmds)
    assert {n: (c["type"], c["hook"], c["prio"]) for n, c in chains.items()} == {
        "prerouting": ("nat", "prerouting", -100),
        "input": ("filter", "input", 0),
        "forward": ("filter", "forward", 0),
    }
    redirect = _rules(cmds, "prerouting")
    assert len(redirect) == 2 and '"@egress_ifaces"' in redirect[0]
    assert '{"redirect": {"port": 15001}}' in redirect[0]
    # Every other actor connection is made the worker's own, so input resets it at once
    # whatever the Pod's ip_forward.
    assert '"ate*"' in redirect[1] and '{"redirect": null}' in redirect[1]


def test_input_lets_an_actor_reach_only_replies_and_the_relay() -> None:
    rules = _rules(firewall.ruleset(15001), "input")
    assert len(rules) == 5
    assert '"fib"' in rules[0] and '"drop": null' in rules[0]
    assert '["established", "related"]' in rules[1] and '"accept"' in rules[1]
    assert '"dnat"' in rules[2] and "15001" in rules[2] and "@egress_ifaces" in rules[2]
    assert '"tcp reset"' in rules[3]
    assert rules[4].endswith('{"drop": null}]') and '"ate*"' in rules[4]


def test_without_an_egress_port_nothing_is_redirected_to_a_relay_or_let_in() -> None:
    cmds = firewall.ruleset(None)
    [redirect] = _rules(cmds, "prerouting")
    assert '"ate*"' in redirect and '{"redirect": null}' in redirect
    assert not any("egress_ifaces" in r or "dnat" in r for r in _rules(cmds, "input"))
    assert len(_rules(cmds, "forward")) == 4


def test_egress_elements_are_added_and_deleted_idempotently() -> None:
    def elems(cmds: list[firewall.Command]) -> list[tuple[str, str, list[str]]]:
        return [(verb, body["element"]["name"], body["element"]["elem"])
                for c in cmds for verb, body in c.items()]

    assert elems(firewall.admit("ate0")) == [("add", "egress_ifaces", ["ate0"])]
    assert elems(firewall.expel("ate0")) == [("add", "egress_ifaces", ["ate0"]),
                                             ("delete", "egress_ifaces", ["ate0"])]


def test_every_actor_rule_matches_the_links_named_as_actors() -> None:
    # The wildcard and the address plan's names agree: what the firewall covers is
    # exactly what `links` makes and the sweep takes.
    assert firewall.ACTOR_IFNAMES == "ate*"
    assert all(host_ifname(k).startswith(firewall.ACTOR_IFNAMES[:-1]) for k in (1, MAX_INDEX))


class FakeRunner:
    def __init__(self, code: int, out: str) -> None:
        self.code, self.out = code, out
        self.calls: list[tuple[list[str], float]] = []

    def __call__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 timeout: float = 60.0) -> tuple[int, str]:
        self.calls.append((list(argv), timeout))
        return self.code, self.out


def test_nft_gets_one_json_document_and_a_timeout() -> None:
    run = FakeRunner(0, "")
    Nft(run, nft="/usr/sbin/nft", timeout=3).apply(firewall.expel("ate0"), what="x")
    [(argv, timeout)] = run.calls
    assert argv[:2] == ["/usr/sbin/nft", "-j"] and timeout == 3
    assert json.loads(argv[2]) == {"nftables": firewall.expel("ate0")}


@pytest.mark.parametrize(("code", "out", "expected"), [
    (127, "nft: No such file or directory", ErrorCode.FAILED_PRECONDITION),
    (1, "Error: Could not process rule: Operation not permitted", ErrorCode.FAILED_PRECONDITION),
    (124, "", ErrorCode.INTERNAL),
    (1, "Error: syntax error", ErrorCode.INTERNAL),
])
def test_nft_failures_say_whose_problem_they_are(code: int, out: str,
                                                 expected: ErrorCode) -> None:
    with pytest.raises(AteomError) as info:
        Nft(FakeRunner(code, out)).apply(firewall.ruleset(None), what="installing the table")
    assert info.value.code is expected
    assert info.value.message.startswith("installing the table: ")


def test_a_missing_table_is_no_error_when_removing() -> None:
    gone = FakeRunner(1, "Error: Could not process rule: No such file or directory")
    Nft(gone).apply(firewall.expel("ate0"), what="x", missing_ok=True)
    with pytest.raises(AteomError):
        Nft(gone).apply(firewall.expel("ate0"), what="x")
    assert Nft(gone).table() is None


def test_a_sockaddr_is_read_as_the_kernel_writes_it() -> None:
    raw4 = struct.pack("=H", socket.AF_INET) + struct.pack("!H4s8x", 443,
                                                           socket.inet_aton("192.0.2.1"))
    assert parse_sockaddr(raw4) == ("192.0.2.1", 443)
    raw6 = struct.pack("=H", socket.AF_INET6) + struct.pack(
        "!HI16sI", 8443, 0, socket.inet_pton(socket.AF_INET6, "2001:db8::1"), 0)
    assert parse_sockaddr(raw6) == ("2001:db8::1", 8443)
    with pytest.raises(ValueError):
        parse_sockaddr(b"\0" * 5)
