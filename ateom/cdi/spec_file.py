"""One CDI spec file: read it, validate it in two passes, hand back a `Spec`.

    decode (JSON/YAML) -> JSON Schema (shape) -> build Spec -> semantic rules

`parse_spec_text` is the pure pipeline; `load_spec` only adds reading the
file. Either returns a `LoadedSpec` (the spec plus its warnings) or raises
`InvalidSpecError`, a `SpecError` carrying every problem found, so a user
fixes a spec in one round instead of one error per run.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Literal

from ateom.cdi.model import Spec
from ateom.cdi.parse import SpecFormat, decode_document, spec_from_document
from ateom.cdi.schema import schema_problems
from ateom.cdi.validate import check_spec
from ateom.errors import AteomError, SpecError

# File name endings a spec directory is scanned for, and how each is decoded.
SPEC_EXTENSIONS: dict[str, SpecFormat] = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}
# Real specs are tens of KiB (8 GPUs with MIG, ~40 libraries). The bound keeps
# a runaway file, or a spec name linked to /dev/zero, from eating the daemon.
MAX_SPEC_BYTES = 16 * 1024 * 1024


class InvalidSpecError(SpecError):
    """A spec with one or more problems; `problems` holds each one.

    `path`, `field` and `reason` are the first problem's, so code that reads
    a plain SpecError still gets a precise answer; str() lists them all,
    one ``path: field: reason`` per line.
    """

    def __init__(self, problems: tuple[SpecError, ...] | list[SpecError]) -> None:
        if not problems:
            raise ValueError("InvalidSpecError needs at least one problem")
        self.problems = tuple(problems)
        first = self.problems[0]
        self.path, self.field, self.reason = first.path, first.field, first.reason
        AteomError.__init__(self, "\n".join(str(p) for p in self.problems))


def spec_problems(error: SpecError) -> tuple[SpecError, ...]:
    """The individual problems inside a SpecError (itself, if it is a single one)."""
    return error.problems if isinstance(error, InvalidSpecError) else (error,)


@dataclass(frozen=True, slots=True)
class LoadedSpec:
    """A valid spec and what was odd but allowed about it.

    Each warning reads ``path: warning: field: reason``.
    """

    spec: Spec
    warnings: tuple[str, ...] = ()


def format_for_path(path: str | os.PathLike[str]) -> SpecFormat | None:
    """ "json" or "yaml" from the file name's ending, or None if not a spec name."""
    return SPEC_EXTENSIONS.get(os.path.splitext(os.fspath(path))[1].lower())


def parse_spec_text(text: str | bytes, path: str, fmt: Literal["json", "yaml"]) -> LoadedSpec:
    """Decode and validate a spec's text; pure. `path` only labels messages.

    Raises InvalidSpecError (a SpecError) listing every problem: the decoder's
    one, or all schema problems, or all semantic ones. Never anything else.
    """
    doc = decode_document(text, path, fmt)
    shape = schema_problems(doc, path)
    if shape:
        # The semantic pass trusts types; with a bad shape it would only
        # repeat these errors less clearly.
        raise InvalidSpecError(shape)
    spec = spec_from_document(doc, path)
    findings = check_spec(spec)
    if findings.errors:
        raise InvalidSpecError(findings.errors)
    warnings = tuple(f"{w.path}: warning: {w.field}: {w.reason}" for w in findings.warnings)
    return LoadedSpec(spec, warnings)


def read_spec_bytes(path: str) -> bytes:
    """The bytes of the spec file at `path` (reads it).

    Raises SpecError naming `path` when it cannot be read, is not a regular
    file, or is larger than MAX_SPEC_BYTES.
    """
    try:
        # Checked before opening: opening a device node can have effects of
        # its own, and a FIFO would wait for a writer.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise SpecError(path, "not a regular file")
        # O_NONBLOCK: should it become a FIFO since, still no waiting.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            info = os.fstat(fd)
            # Sized by stat, not by the limit: a buffer of MAX_SPEC_BYTES per
            # read would cost more than the read.
            data = f.read(min(info.st_size, MAX_SPEC_BYTES) + 1)
            if len(data) > info.st_size:  # it grew since, or /proc-style size 0
                data += f.read(MAX_SPEC_BYTES + 1 - len(data))
    except OSError as exc:
        raise SpecError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(path, f"file is larger than {MAX_SPEC_BYTES} bytes")
    return data


def load_spec(path: str | os.PathLike[str]) -> LoadedSpec:
    """Read the spec file at `path` and validate it (reads the file).

    The format comes from the extension (.json, .yaml, .yml). Raises
    SpecError (InvalidSpecError with every problem) naming the file.
    """
    name = os.fspath(path)
    fmt = format_for_path(name)
    if fmt is None:
        raise SpecError(name, "not a CDI spec file name (want .json, .yaml or .yml)")
    return parse_spec_text(read_spec_bytes(name), name, fmt)
