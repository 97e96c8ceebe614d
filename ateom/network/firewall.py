"""ateom's nftables table, ``table inet ateom``: the ruleset as JSON built by pure
functions, applied through the ``nft`` binary's JSON input (``nft -j``,
libnftables-json(5), nftables' documented machine interface; no iptables, no
strings spliced into a shell or into nft's own language).

An actor is known by its worker-side link's name: every link named ``ate*``
(`ateom.network.addressing.HOST_IF_PREFIX`) is an actor's, so the rules cover
a network from the moment its link exists, and making or removing one that
has no egress runs no nft at all. One named set, `EGRESS_SET`, holds the
worker-side links of the actors allowed egress: adding or removing such an
actor adds or deletes its name there; the rules never change while the
daemon runs. The chains (inet: IPv4 and IPv6 alike):

- ``prerouting`` (nat, dstnat): TCP from `EGRESS_SET` is redirected to the
  worker's egress relay port (only when one is configured); every other TCP
  connection an actor opens is redirected to the worker itself, port kept, so
  that ``input`` resets it at once whatever the Pod's ``ip_forward`` (with
  forwarding off, a connect to an outside address would otherwise be dropped
  before any filter and time out);
- ``input`` (filter): from an actor, a source address not routed back through
  the interface it came in on (``fib saddr . iif oif missing``: an actor
  spoofing another's address, or any IPv6) is dropped; replies to the worker's
  own connections (established, related) pass; a redirected connection to the
  relay port passes; any other TCP is reset at once; the rest is dropped. An
  actor reaches no listener of the worker but the relay, and that only with
  egress;
- ``forward`` (filter): from an actor: the same spoof check, TCP reset, the
  rest dropped; to an actor: dropped. Actors reach no other actor and nothing
  beyond the worker; only the worker's own sockets talk to them.

`Nft` runs the binary through a `Runner` (argv -> exit code, output; the
daemon's is its reaper's, whose ``waitpid(-1)`` must be the only one: a plain
`subprocess` there would lose nft's exit status). The JSON goes on the
command line (``nft -j '<json>'``), not on stdin: the reaper gives its children
an empty stdin. One invocation is one nftables transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ateom.errors import AteomError, ErrorCode, bounded
from ateom.network.addressing import HOST_IF_PREFIX

FAMILY = "inet"
TABLE = "ateom"
ACTOR_IFNAMES = HOST_IF_PREFIX + "*"  # nft's wildcard: every name that starts so
EGRESS_SET = "egress_ifaces"
PRIO_DSTNAT = -100
PRIO_FILTER = 0
NFT_TIMEOUT = 10.0
# What a Runner answers for a command it gave up on, and for one it could not start.
TIMED_OUT = 124
NOT_RUN = 127

Command = dict[str, Any]


class Runner(Protocol):
    """argv -> (exit code, stdout+stderr); 124 timed out, 127 not started
    (`ateom.process.runner.Runner`'s contract)."""

    def __call__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 timeout: float = 60.0) -> tuple[int, str]: ...


def _table() -> Command:
    return {"family": FAMILY, "name": TABLE}


def _match(left: Any, right: Any, op: str = "==") -> Command:
    return {"match": {"op": op, "left": left, "right": right}}


def _meta(key: str) -> Command:
    return {"meta": {"key": key}}


def _rule(chain: str, *expr: Command) -> Command:
    return {"add": {"rule": {"family": FAMILY, "table": TABLE, "chain": chain,
                             "expr": list(expr)}}}


def _chain(name: str, kind: str, hook: str, prio: int) -> Command:
    return {"add": {"chain": {"family": FAMILY, "table": TABLE, "name": name, "type": kind,
                              "hook": hook, "prio": prio, "policy": "accept"}}}


_FROM_ACTOR = _match(_meta("iifname"), ACTOR_IFNAMES)
_FROM_EGRESS = _match(_meta("iifname"), f"@{EGRESS_SET}")
_TCP = _match(_meta("l4proto"), "tcp")
_SPOOFED = _match({"fib": {"result": "oif", "flags": ["saddr", "iif"]}}, False)
_ACCEPT: Command = {"accept": None}
_DROP: Command = {"drop": None}
_RESET: Command = {"reject": {"type": "tcp reset"}}


def rules(egress_port: int | None) -> list[Command]:
    """The chains and their rules (without the table and sets)."""
    cmds = [
        _chain("prerouting", "nat", "prerouting", PRIO_DSTNAT),
        _chain("input", "filter", "input", PRIO_FILTER),
        _chain("forward", "filter", "forward", PRIO_FILTER),
        _rule("input", _FROM_ACTOR, _SPOOFED, _DROP),
        _rule("input", _FROM_ACTOR,
              _match({"ct": {"key": "state"}}, ["established", "related"], "in"), _ACCEPT),
    ]
    if egress_port is not None:
        cmds.insert(3, _rule("prerouting", _FROM_EGRESS, _TCP,
                             {"redirect": {"port": egress_port}}))
        cmds.append(_rule("input", _FROM_EGRESS, _match({"ct": {"key": "status"}}, "dnat", "in"),
                          _match({"payload": {"protocol": "tcp", "field": "dport"}},
                                 egress_port), _ACCEPT))
    cmds += [
        _rule("prerouting", _FROM_ACTOR, _TCP, {"redirect": None}),
        _rule("input", _FROM_ACTOR, _TCP, _RESET),
        _rule("input", _FROM_ACTOR, _DROP),
        _rule("forward", _FROM_ACTOR, _SPOOFED, _DROP),
        _rule("forward", _FROM_ACTOR, _TCP, _RESET),
        _rule("forward", _FROM_ACTOR, _DROP),
        _rule("forward", _match(_meta("oifname"), ACTOR_IFNAMES), _DROP),
    ]
    return cmds


def drop_table() -> list[Command]:
    """Delete the table, whether or not it exists (add then delete: one transaction)."""
    return [{"add": {"table": _table()}}, {"delete": {"table": _table()}}]


def ruleset(egress_port: int | None) -> list[Command]:
    """The whole table installed afresh: whatever was there is replaced atomically."""
    egress_set = {"add": {"set": {"family": FAMILY, "table": TABLE, "name": EGRESS_SET,
                                  "type": "ifname"}}}
    return [*drop_table(), {"add": {"table": _table()}}, egress_set, *rules(egress_port)]


def _element(verb: str, set_name: str, ifname: str) -> Command:
    return {verb: {"element": {"family": FAMILY, "table": TABLE, "name": set_name,
                               "elem": [ifname]}}}


def _absent(set_name: str, ifname: str) -> list[Command]:
    # nft 1.0.6 has no "destroy": adding first makes the delete never fail.
    return [_element("add", set_name, ifname), _element("delete", set_name, ifname)]


def admit(ifname: str) -> list[Command]:
    """`ifname` into `EGRESS_SET` (its actor's TCP goes to the relay)."""
    return [_element("add", EGRESS_SET, ifname)]


def expel(ifname: str) -> list[Command]:
    """`ifname` out of `EGRESS_SET`, whether or not it was in it."""
    return _absent(EGRESS_SET, ifname)


def document(commands: list[Command]) -> str:
    return json.dumps({"nftables": commands}, separators=(",", ":"))


class Nft:
    """The nft binary, each call bounded by `timeout`."""

    def __init__(self, runner: Runner, *, nft: str = "nft", timeout: float = NFT_TIMEOUT) -> None:
        self._run = runner
        self.nft = nft
        self.timeout = timeout

    def apply(self, commands: list[Command], *, what: str, missing_ok: bool = False) -> None:
        """Run `commands` as one transaction; `what` opens the message of its error.
        `missing_ok`: no table (or set) to change is no error."""
        code, out = self._run([self.nft, "-j", document(commands)], timeout=self.timeout)
        if code != 0 and not (missing_ok and code not in (NOT_RUN, TIMED_OUT)
                              and "No such file or directory" in out):
            raise self._error(what, code, out)

    def table(self) -> dict[str, frozenset[str]] | None:
        """Each set of the table and its elements; None when there is no table."""
        code, out = self._run([self.nft, "-j", "list", "table", FAMILY, TABLE],
                              timeout=self.timeout)
        if code != 0:
            if "No such file or directory" in out:
                return None
            raise self._error(f"listing table {FAMILY} {TABLE}", code, out)
        sets: dict[str, frozenset[str]] = {}
        for item in json.loads(out[out.index("{"):])["nftables"]:
            if "set" in item:
                elems = item["set"].get("elem", [])
                sets[item["set"]["name"]] = frozenset(e for e in elems if isinstance(e, str))
        return sets

    def _error(self, what: str, code: int, out: str) -> AteomError:
        detail = bounded(" ".join(out.split()), 400)
        if code == NOT_RUN:
            return AteomError(f"{what}: cannot run {self.nft}: {detail}",
                              code=ErrorCode.FAILED_PRECONDITION)
        if code == TIMED_OUT:
            return AteomError(f"{what}: {self.nft} timed out after {self.timeout:g}s",
                              code=ErrorCode.INTERNAL)
        if "Operation not permitted" in out or "Protocol not supported" in out:
            return AteomError(f"{what}: nftables refused (needs CAP_NET_ADMIN and nf_tables):"
                              f" {detail}", code=ErrorCode.FAILED_PRECONDITION)
        return AteomError(f"{what}: {self.nft} exited {code}: {detail}", code=ErrorCode.INTERNAL)
