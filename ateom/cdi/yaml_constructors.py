"""How each composed YAML node becomes a value, as go-yaml v2 decodes it; pure.

PyYAML's constructors build YAML 1.1 values; the CDI reference's go-yaml v2
(strict, through sigs.k8s.io/yaml) builds others. These constructors, which
`ateom.cdi.yaml_loader` installs, follow go-yaml v2:

- a mapping refuses a key set twice, whether written twice or set by a merge
  (`<<`) and written again (decode.go: `setMapIndex` in strict mode);
- keys become JSON keys as sigs.k8s.io/yaml makes them (null and uint64 keys
  are refused);
- explicitly tagged scalars resolve as resolve.go resolves them: `!!int 1:0`
  is refused, `!!timestamp` keeps its text, `!!binary` is its decoded text;
- `!!null` makes any node null. Other tags are handled before construction
  (`yaml_loader._audit`), since they change no value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from ateom.cdi.go_scalars import (
    GO_BOOLS,
    go_binary_text,
    go_key_text,
    go_resolve,
    go_type_name,
    go_yaml_number,
    is_go_timestamp,
)
from ateom.errors import quote

MERGE_TAG = "tag:yaml.org,2002:merge"

_Pairs = list[tuple[str, yaml.Node, yaml.Node]]


def _fail(problem: str, node: yaml.Node) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(None, None, problem, node.start_mark)


# -- mappings: keys, duplicates, merges ------------------------------------------


def is_merge(node: yaml.Node) -> bool:
    """A merge key (decode.go: isMerge); a quoted '<<' is an ordinary key."""
    return isinstance(node, yaml.ScalarNode) and node.tag == MERGE_TAG and node.value == "<<"


@dataclass
class _Flattened:
    """Per document: each mapping's pairs once its merges are expanded, and
    the mappings being expanded (meeting one again is a merge of itself)."""

    pairs: dict[int, _Pairs] = field(default_factory=dict)
    busy: set[int] = field(default_factory=set)


def _flattened(loader: yaml.SafeLoader) -> _Flattened:
    state: _Flattened | None = getattr(loader, "_ateom_flattened", None)
    if state is None:
        state = _Flattened()
        loader._ateom_flattened = state  # type: ignore[attr-defined]
    return state


def _merged_mappings(value: yaml.Node) -> list[yaml.MappingNode]:
    """The mappings a `<<` merges, in the order go-yaml v2 sets their keys
    (decode.go: merge walks a sequence backwards)."""
    if isinstance(value, yaml.MappingNode):
        return [value]
    if isinstance(value, yaml.SequenceNode) and all(
        isinstance(v, yaml.MappingNode) for v in value.value
    ):
        return list(reversed(value.value))
    raise _fail("map merge requires map or sequence of maps as the value", value)


def mapping_pairs(loader: yaml.SafeLoader, node: yaml.MappingNode) -> _Pairs:
    """(key text, key node, value node) of a mapping with its merges
    expanded, refusing every key set twice (go-yaml v2 strict: "already set
    in map"), by the mapping itself or by a merge, in either order.

    Each mapping is expanded once per document: an alias merged many times
    costs its size each time, not the cost of its own merges again.
    """
    state = _flattened(loader)
    done = state.pairs.get(id(node))
    if done is not None:
        return done
    if id(node) in state.busy:
        raise _fail("document refers to itself (recursive YAML alias)", node)
    state.busy.add(id(node))
    pairs: _Pairs = []
    set_by: dict[str, yaml.Node] = {}  # key -> the key node, or merge key, that set it
    for key_node, value_node in node.value:
        if is_merge(key_node):
            merged = _merged_mappings(value_node)
            added = [(k, key_node, v) for m in merged for k, _, v in mapping_pairs(loader, m)]
        else:
            added = [(_key(loader, key_node), key_node, value_node)]
        for key, by, value in added:
            if key in set_by:
                raise _set_twice(key, set_by[key], by)
            set_by[key] = by
            pairs.append((key, by, value))
    state.busy.discard(id(node))
    state.pairs[id(node)] = pairs
    return pairs


def _set_twice(key: str, earlier: yaml.Node, later: yaml.Node) -> Exception:
    merge = earlier if is_merge(earlier) else later if is_merge(later) else None
    if merge is not None:
        return _fail(
            f"key {quote(key)} already set in map (by the merge key '<<' at line "
            f"{merge.start_mark.line + 1}; a merged key cannot be set again)",
            later,
        )
    line = earlier.start_mark.line + 1
    return _fail(f"duplicate key {quote(key)} (first defined at line {line})", later)


def _key(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise _fail("non-scalar mapping key (CDI specs only have string keys)", node)
    try:
        return go_key_text(loader.construct_object(node))
    except ValueError as exc:
        raise _fail(str(exc), node) from None


def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[str, Any]:
    # One pass for the common mapping, which merges nothing; `mapping_pairs`
    # (whose bookkeeping slowed a spec's decode) only for one that does.
    # Values already built stay built: PyYAML keeps them per node.
    result: dict[str, Any] = {}
    for key_node, value_node in node.value:
        if key_node.tag == MERGE_TAG and is_merge(key_node):
            return {
                key: loader.construct_object(value, deep=True)
                for key, _, value in mapping_pairs(loader, node)
            }
        key = _key(loader, key_node)
        if key in result:
            first = next(k for k, _ in node.value if _key(loader, k) == key)
            raise _set_twice(key, first, key_node)
        result[key] = loader.construct_object(value_node, deep=True)
    return result


# -- scalars ---------------------------------------------------------------------


def construct_text(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return loader.construct_scalar(node)


def construct_go_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | float | str:
    return go_yaml_number(loader.construct_scalar(node))


def construct_go_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    text = loader.construct_scalar(node)
    if text not in GO_BOOLS:  # only for an explicit `!!bool`
        raise _cannot_decode(go_type_name(go_resolve(text)), text, "!!bool", node)
    return GO_BOOLS[text]


def construct_null(loader: yaml.SafeLoader, node: yaml.Node) -> None:
    # decode.go: prepare reads any node tagged !!null as null, even a mapping.
    return None


def construct_tagged_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    # resolve.go: resolve takes under !!int only what resolves to an integer.
    text = loader.construct_scalar(node)
    value = go_resolve(text)
    if isinstance(value, int) and not isinstance(value, bool):
        if -(2**63) <= value < 2**64:
            return value
        found = "!!float"  # beyond int64 and uint64 go-yaml has a float64
    else:
        found = go_type_name(value)
    raise _cannot_decode(found, text, "!!int", node)


def construct_tagged_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    # resolve.go: resolve takes an integer under !!float too, as a float.
    text = loader.construct_scalar(node)
    value = go_resolve(text)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _cannot_decode(go_type_name(value), text, "!!float", node)
    return float(value)


def construct_timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    # decode.go: scalar keeps a timestamp's text where any value may go.
    text = loader.construct_scalar(node)
    if not is_go_timestamp(text):
        raise _cannot_decode("!!str", text, "!!timestamp", node)
    return text


def construct_binary(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    try:
        return go_binary_text(loader.construct_scalar(node))
    except ValueError as exc:
        raise _fail(str(exc), node) from None


def _cannot_decode(found: str, text: str, tag: str, node: yaml.Node) -> Exception:
    # go-yaml v2's wording (resolve.go: resolve); repr() without its quotes
    # keeps the problem on one line.
    return _fail(f"cannot decode {found} `{repr(text[:200])[1:-1]}` as a {tag}", node)
