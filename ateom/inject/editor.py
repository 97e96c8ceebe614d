"""A copy-on-write editor over an OCI config. Pure.

The merge edits a config section by section (`linux.devices`, `process.env`,
...), like the CDI reference's per-section ``ContainerEdits.Apply`` helpers
over runtime-tools' generator. Unlike that generator, the config it is given
is never mutated: the first write to a section copies that section and every
object on the way to it (shallowly); everything the edits do not touch stays
shared with the input. An injected config is mostly mounts and devices that
are already in place, so a deep copy would cost more than the merge.

What `result()` returns therefore shares subtrees with the input: neither may
be mutated in place afterwards (copy a section before changing it, as this
editor does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ConfigEditor:
    """Reads see the edits made so far; writes copy a section the first time."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._root: dict[str, Any] = dict(config)
        # The containers this editor made (copies or new ones), by id: only
        # those may be written in place. Held here too, so that an id is
        # never reused while the editor lives, even for one replaced since.
        self._owned: dict[int, Any] = {id(self._root): self._root}

    def get(self, *keys: str) -> Any:
        """The value at `keys` (None when it or a parent is absent or not an object)."""
        node: Any = self._root
        for key in keys:
            if not isinstance(node, Mapping):
                return None
            node = node.get(key)
        return node

    def _own(self, parent: dict[str, Any], key: str, kind: type,
             accept: type | tuple[type, ...]) -> Any:
        value = parent.get(key)
        if value is not None and id(value) in self._owned:
            return value
        # A missing section, or one of the wrong type (the shape checker
        # refuses those in a bundle's config; the merge treats them as absent).
        copy = kind(value) if isinstance(value, accept) else kind()
        parent[key] = copy
        self._owned[id(copy)] = copy
        return copy

    def section(self, *keys: str) -> dict[str, Any]:
        """The object at `keys`, writable: it and its parents are copied (or
        made) the first time, and belong to this editor from then on."""
        node = self._root
        for key in keys:
            node = self._own(node, key, dict, Mapping)
        return node

    def array(self, *keys: str) -> list[Any]:
        """The array at `keys`, writable (copied or made the first time, with
        its parents)."""
        *parents, last = keys
        array: list[Any] = self._own(self.section(*parents), last, list, (list, tuple))
        return array

    def put(self, *keys: str, value: Any) -> None:
        """Put `value` at `keys` (parents copied or made). `value` becomes this
        editor's, written in place by later edits: pass a new one, never a
        part of the input."""
        *parents, last = keys
        self.section(*parents)[last] = value
        if isinstance(value, (dict, list)):
            self._owned[id(value)] = value

    def result(self) -> dict[str, Any]:
        """The edited config (a new top-level object, even with no edits)."""
        return self._root
