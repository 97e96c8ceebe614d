"""The control stream: how the daemon feeds the data plane its routes.

Newline-delimited JSON over one stream socket (the daemon's end of a
socketpair; the data plane's end is ``--control-fd``). The daemon writes::

    {"op":"route","uid":U,"atespace":A,"name":N,"ip":IP|null,"port":80,
     "state":"running","egress_gateway":"gw:443"|null}     upsert (no answer)
    {"op":"forget","uid":U}                                 drop (no answer)
    {"op":"ping","id":N}     -> {"op":"pong","id":N}
    {"op":"stats","id":N}    -> {"op":"stats","id":N, ...Counters.snapshot()}

Lines are applied in order, so a pong says every line before its ping has been
applied (the daemon pings before it answers a Run). A malformed line is logged
and skipped, never fatal: the daemon must not be able to crash the data plane by
a bug of its own. A line longer than `MAX_LINE` is dropped whole. When the
stream ends (the daemon went away), `serve_control` returns and the process
exits.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog

from ateom.dataplane.counters import Counters
from ateom.dataplane.routes import Route, RouteError, RouteTable

MAX_LINE = 64 * 1024
log = structlog.get_logger("ateom.dataplane.control")


class LineSplitter:
    """Bytes in, complete lines out; a line past `limit` bytes is dropped whole
    (everything up to its newline), and counted in `dropped`."""

    def __init__(self, limit: int = MAX_LINE) -> None:
        self._limit = limit
        self._buf = bytearray()
        self._skipping = False
        self.dropped = 0

    def feed(self, data: bytes) -> list[bytes]:
        lines: list[bytes] = []
        self._buf += data
        while True:
            end = self._buf.find(b"\n")
            if end < 0:
                break
            line = bytes(self._buf[:end])
            del self._buf[:end + 1]
            if self._skipping:
                self._skipping = False  # the tail of an overlong line: drop it too
            elif len(line) > self._limit:
                self.dropped += 1
            else:
                lines.append(line)
        if len(self._buf) > self._limit:
            # Memory stays bounded: forget what we have and skip to the newline.
            if not self._skipping:
                self.dropped += 1
            self._skipping = True
            self._buf.clear()
        return lines


class Control:
    """Applies control lines to the route table; `handle_line` returns the answer to
    send back, if the op has one."""

    def __init__(self, table: RouteTable, counters: Counters) -> None:
        self.table = table
        self.counters = counters

    def handle_line(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            msg = json.loads(line)
            if not isinstance(msg, dict):
                raise RouteError("a control line must be a JSON object")
            return self._apply(msg)
        except (ValueError, RouteError) as err:  # json's errors are ValueErrors
            self.counters.control_errors += 1
            log.warning("control line skipped", reason=str(err), line=line[:200].decode(
                "utf-8", "replace"))
            return None

    def _apply(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        op = msg.pop("op", None)
        if op == "route":
            route = Route.from_json(msg)
            self.table.upsert(route)
            log.debug("route", uid=route.uid, actor=route.label, ip=route.ip,
                      port=route.port, state=route.state, egress=route.egress_gateway)
            return None
        if op == "forget":
            uid = msg.get("uid")
            if not isinstance(uid, str):
                raise RouteError("forget needs a uid string")
            self.table.forget(uid)
            return None
        if op in ("ping", "stats"):
            ident = msg.get("id")
            if ident is not None and (type(ident) is not int and not isinstance(ident, str)):
                raise RouteError("id must be an integer or a string")
            answer: dict[str, Any] = {"op": "pong" if op == "ping" else "stats", "id": ident}
            if op == "stats":
                answer.update(self.counters.snapshot(), routes=len(self.table))
            return answer
        raise RouteError(f"unknown op {op!r}")


async def serve_control(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        control: Control) -> None:
    """Reads control lines until the stream ends, answering pings and stats."""
    splitter = LineSplitter()
    while True:
        try:
            data = await reader.read(65536)
        except ConnectionError:
            data = b""
        if not data:
            return
        for line in splitter.feed(data):
            answer = control.handle_line(line)
            if answer is not None:
                writer.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
        if splitter.dropped:
            control.counters.control_errors += splitter.dropped
            log.warning("control line skipped", reason=f"longer than {MAX_LINE} bytes",
                        count=splitter.dropped)
            splitter.dropped = 0
        try:
            await writer.drain()
        except ConnectionError:
            return
