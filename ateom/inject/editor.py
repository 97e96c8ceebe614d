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

Path = tuple[str, ...]


class ConfigEditor:
    """Reads see the edits made so far; writes copy a section the first time."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._root: dict[str, Any] = dict(config)
        # The containers this editor made (copies or new ones), by path: only
        # these may be written in place, and a second write to a section
        # finds it here in one lookup.
        self._made: dict[Path, Any] = {(): self._root}

    def get(self, *keys: str) -> Any:
        """The value at `keys` (None when it or a parent is absent or not an object)."""
        node: Any = self._root
        for key in keys:
            if not isinstance(node, Mapping):
                return None
            node = node.get(key)
        return node

    def _writable(self, keys: Path, kind: type, accept: type | tuple[type, ...]) -> Any:
        found = self._made.get(keys)
        if type(found) is kind:
            return found
        parent = self.section(*keys[:-1])
        value = parent.get(keys[-1])
        # A missing section, or one of the wrong type (the shape checker
        # refuses those in a bundle's config; the merge treats them as absent).
        made = kind(value) if isinstance(value, accept) else kind()
        self._replace(keys, parent, made)
        return made

    def _replace(self, keys: Path, parent: dict[str, Any], value: Any) -> None:
        parent[keys[-1]] = value
        if keys in self._made:
            # What this editor made below the old value is gone with it. (Only
            # a made container can have made ones below it: sections are
            # made parents first.)
            depth = len(keys)
            for path in [p for p in self._made if p[:depth] == keys]:
                del self._made[path]
        if isinstance(value, (dict, list)):
            self._made[keys] = value

    def section(self, *keys: str) -> dict[str, Any]:
        """The object at `keys`, writable: it and its parents are copied (or
        made) the first time, and belong to this editor from then on."""
        section: dict[str, Any] = self._writable(keys, dict, Mapping) if keys else self._root
        return section

    def array(self, *keys: str) -> list[Any]:
        """The array at `keys`, writable (copied or made the first time, with
        its parents)."""
        array: list[Any] = self._writable(keys, list, (list, tuple))
        return array

    def put(self, *keys: str, value: Any) -> None:
        """Put `value` at `keys` (parents copied or made). `value` becomes this
        editor's, written in place by later edits: pass a new one, never a
        part of the input."""
        self._replace(keys, self.section(*keys[:-1]), value)

    def result(self) -> dict[str, Any]:
        """The edited config (a new top-level object, even with no edits)."""
        return self._root
