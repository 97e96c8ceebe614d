"""ateom's one exception hierarchy.

Every error ateom raises on purpose is an `AteomError`. Each carries a `code`
named after the gRPC status it maps to, so the daemon translates errors to the
wire without a table of special cases, and the CLI can print them plainly.
The core never imports grpc: codes are plain enum members here.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    """gRPC status names (grpc.StatusCode[member.name] is the wire code)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    UNAVAILABLE = "UNAVAILABLE"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    # An actor's state was lost (a failed save took its sandbox with it).
    DATA_LOSS = "DATA_LOSS"
    INTERNAL = "INTERNAL"


class AteomError(Exception):
    """Base class: a message meant for a human, and the gRPC code that fits it."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class UsageError(AteomError):
    """The command line is wrong: an unknown flag, a missing or malformed value, on
    the command line or in its ``ATEOM_*`` twin. The CLI exits 2 for it (every
    other failure is 1); the daemon never raises it for a request."""

    code = ErrorCode.INVALID_ARGUMENT


class UnreachableError(AteomError):
    """What the command asks did not answer: no daemon on the socket, a refused
    connection, a deadline. The CLI exits 3 (``ateom health``: as grpc_health_probe
    tells a connection failure from an unhealthy server)."""

    code = ErrorCode.UNAVAILABLE


class InputError(AteomError):
    """A file or directory named on the command line is missing, unreadable or not
    what it must be (a corrupt checkpoint record, a directory that is no
    checkpoint). The CLI exits 4, apart from 1: what the command judges failed."""

    code = ErrorCode.FAILED_PRECONDITION


class SpecError(AteomError):
    """A CDI spec could not be read or is invalid.

    `path` is the spec file, `field` the JSON path inside it
    (e.g. ``devices[2].containerEdits.deviceNodes[0].majr``), `reason` the rule
    broken. str() gives ``path: field: reason``.
    """

    code = ErrorCode.INVALID_ARGUMENT

    def __init__(self, path: str, reason: str, field: str = "") -> None:
        self.path = path
        self.field = field
        self.reason = reason
        where = f"{path}: {field}: " if field else f"{path}: "
        super().__init__(where + reason)


class QualifiedNameError(AteomError):
    """A qualified CDI device name (vendor.com/class=name) is malformed."""

    code = ErrorCode.INVALID_ARGUMENT


class ResolutionError(AteomError):
    """One or more requested CDI devices cannot be resolved.

    `failures` maps each failing qualified name to why it failed.
    """

    code = ErrorCode.FAILED_PRECONDITION

    def __init__(self, failures: dict[str, str]) -> None:
        self.failures = dict(failures)
        lines = [f"  {name}: {why}" for name, why in self.failures.items()]
        noun = "device" if len(self.failures) == 1 else "devices"
        super().__init__(f"unresolvable CDI {noun}:\n" + "\n".join(lines))


class InjectionError(AteomError):
    """Devices could not be injected into a bundle; the bundle was left untouched."""

    code = ErrorCode.FAILED_PRECONDITION


# How much of an input an error message may echo: enough to recognize it,
# never so much that the message (a gRPC trailer) outgrows its limit.
QUOTE_LIMIT = 200


def bounded(value: str, limit: int = QUOTE_LIMIT, *, say_length: bool = False) -> str:
    """`value`, cut to `limit` characters with a trailing '…' when longer, and with
    `say_length` its length after that: ``abc… (1048576 chars)`` (pure)."""
    if len(value) <= limit:
        return value
    return value[:limit] + "…" + (f" ({len(value)} chars)" if say_length else "")


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """`value` as a message quotes it: repr of at most `limit` characters, then its
    length when cut, e.g. ``'abc…' (1048576 chars)`` (pure). Non-strings are
    shown by their repr, cut the same way."""
    if not isinstance(value, str):
        return bounded(repr(value), limit)
    if len(value) <= limit:
        return repr(value)
    return f"{bounded(value, limit)!r} ({len(value)} chars)"
