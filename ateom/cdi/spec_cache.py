"""Reading spec files for the registry: each file's outcome as a `SpecSource`
(loaded, or failed with the reason), and the content-keyed cache that spares an
unchanged spec its validation on every load."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ateom.cdi.parse import SpecFormat, decode_document
from ateom.cdi.spec_file import LoadedSpec, format_for_path, parse_spec_text, read_spec_bytes
from ateom.errors import SpecError


@dataclass(frozen=True, slots=True)
class SpecSource:
    """The outcome of reading one spec file: loaded, or failed with `error`.

    `kind` is the failed spec's declared kind when it could still be read,
    so a request for that kind can be told the spec is broken rather than
    missing.
    """

    path: str
    priority: int
    loaded: LoadedSpec | None = None
    error: SpecError | None = None
    kind: str | None = None


class SpecCache:
    """Validated specs by file content; thread-safe.

    The daemon loads the registry for every actor it starts. With the cache,
    an unchanged spec costs reading its bytes and one comparison instead of
    decoding and validating it again (docs/performance.md, "Figures behind the
    code"). It compares
    content, not stat data: file timestamps tick per jiffy, so a same-size
    rewrite within a few milliseconds would look unchanged to stat. Entries
    are immutable, so registries share them safely.
    """

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[bytes, SpecSource]] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, path: str, priority: int) -> SpecSource | None:
        """The spec at `path` as a SpecSource of `priority`, or None for a
        directory (reads the file; validates it only when its bytes changed)."""
        if os.path.isdir(path):
            return None
        data = _read_bytes(path)
        if isinstance(data, SpecError):
            return SpecSource(path, priority, error=data)
        with self._lock:
            hit = self._entries.get(path)
            if hit is not None and hit[0] == data:
                self._entries.move_to_end(path)
                return dataclasses.replace(hit[1], priority=priority)
        source = _source_from_bytes(path, priority, data)
        with self._lock:
            self._entries[path] = (data, source)
            self._entries.move_to_end(path)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return source

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# The cache `Registry.load` uses unless told otherwise: one per process.
SHARED_SPEC_CACHE = SpecCache()


def _read_bytes(path: str) -> bytes | SpecError:
    """The file's bytes, or the SpecError saying why it cannot be read."""
    try:
        return read_spec_bytes(path)
    except SpecError as exc:
        return exc


def read_source(path: str, priority: int) -> SpecSource:
    """Load one spec file into a SpecSource, never raising (reads the file)."""
    data = _read_bytes(path)
    if isinstance(data, SpecError):
        return SpecSource(path, priority, error=data)
    return _source_from_bytes(path, priority, data)


def _source_from_bytes(path: str, priority: int, data: bytes) -> SpecSource:
    """Validate a spec file's bytes into a SpecSource, never raising; pure."""
    fmt = format_for_path(path)
    if fmt is None:
        error = SpecError(path, "not a CDI spec file name (want .json, .yaml or .yml)")
        return SpecSource(path, priority, error=error)
    try:
        return SpecSource(path, priority, loaded=parse_spec_text(data, path, fmt))
    except SpecError as exc:
        return SpecSource(path, priority, error=exc, kind=_declared_kind(data, path, fmt))


def _declared_kind(data: bytes, path: str, fmt: SpecFormat) -> str | None:
    """Best effort: the `kind` a spec that failed validation declares."""
    try:
        doc = decode_document(data, path, fmt)
    except SpecError:
        return None
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return kind if isinstance(kind, str) else None
