"""YAML text to plain data, read the way go-yaml v2 (strict) reads it; pure.

The CDI reference reads every spec with sigs.k8s.io/yaml's UnmarshalStrict,
i.e. go-yaml v2 in strict mode. PyYAML (on libyaml when built) does the
parsing here; this module makes what it builds agree with go-yaml v2 where
they differ, and refuses what a spec must not hold:

- duplicate keys, and a key that a merge (`<<`) already set, in either order
  (decode.go: `setMapIndex` in strict mode);
- null and uint64 mapping keys (sigs.k8s.io/yaml cannot make them JSON keys);
- escapes go-yaml v2 does not know in double-quoted scalars (`"\\/"`);
- tags read as go-yaml v2 reads them: custom ones leave the text as it is,
  `!!binary` is its decoded text, a collection's tag does not change it;
- text libyaml's C composer would crash on (see `_PythonComposer`).

Values are built by `ateom.cdi.yaml_constructors`; what a composed node
cannot tell a constructor (how a scalar was written, which tags were
explicit) is settled here first, by `_audit`.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ateom.cdi import yaml_constructors as build
from ateom.cdi.go_scalars import BOOL_TAG, GO_NUMBER_TAG, GO_SCALAR_RESOLVERS, go_escape_problem
from ateom.errors import SpecError

_YAML_BASE: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CORE = "tag:yaml.org,2002:"
MAP_TAG, SEQ_TAG, STR_TAG, NULL_TAG = (_CORE + t for t in ("map", "seq", "str", "null"))
# Scalar tags with a meaning of their own in go-yaml v2 (resolve.go:
# resolvableTag, and !!binary in decode.go: scalar). Any other tag on a
# scalar leaves its text a string; on a collection, no tag changes it.
_SCALAR_TAGS = frozenset(
    {STR_TAG, NULL_TAG, BOOL_TAG, GO_NUMBER_TAG}
    | {_CORE + t for t in ("int", "float", "timestamp", "binary")}
)
# PyYAML's own implicit types that go-yaml v2 does not have (or has
# differently, in GO_SCALAR_RESOLVERS): YAML 1.1 numbers, timestamps, and
# the `=` "value" type.
_PYYAML_ONLY_TAGS = {BOOL_TAG} | {_CORE + t for t in ("int", "float", "timestamp", "value")}


# -- the loader --------------------------------------------------------------------


def _spec_resolvers(base: type[yaml.SafeLoader]) -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {
        first: [(tag, rx) for tag, rx in entries if tag not in _PYYAML_ONLY_TAGS]
        for first, entries in base.yaml_implicit_resolvers.items()
    }
    for tag, rx, firsts in GO_SCALAR_RESOLVERS:
        for first in firsts:
            resolvers.setdefault(first, []).append((tag, rx))
    return resolvers


def make_spec_loader(base: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """A safe YAML loader class on `base` whose constructors read scalars,
    keys, merges and tags as go-yaml v2 does (see the module docstring)."""
    loader: type[yaml.SafeLoader] = type("SpecYamlLoader", (base,), {})
    loader.yaml_constructors = {
        STR_TAG: build.construct_text,
        SEQ_TAG: base.yaml_constructors[SEQ_TAG],
        MAP_TAG: build.construct_mapping,
        NULL_TAG: build.construct_null,
        BOOL_TAG: build.construct_go_bool,
        GO_NUMBER_TAG: build.construct_go_number,
        _CORE + "int": build.construct_tagged_int,
        _CORE + "float": build.construct_tagged_float,
        _CORE + "timestamp": build.construct_timestamp,
        _CORE + "binary": build.construct_binary,
        # A merge key's text where a value belongs ('k: <<'); `_audit` has
        # made any other tag !!str, !!map or !!seq.
        build.MERGE_TAG: build.construct_text,
    }
    loader.yaml_implicit_resolvers = _spec_resolvers(base)
    return loader


# libyaml's parser when PyYAML was built with it (several times faster).
_SpecYamlLoader = make_spec_loader(_YAML_BASE)


class _PythonComposer(_YAML_BASE):  # type: ignore[valid-type,misc]
    """libyaml's parser with PyYAML's Python composer.

    libyaml's composer recurses in C once per nesting level and overflows the
    C stack past ~20,000 levels (`- - - ...` is 2 bytes a level), which kills
    the process instead of raising. The Python composer raises RecursionError,
    which `decode_yaml` reports; it is slower on a real spec (docs/performance.md,
    "Figures behind the code").
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        yaml.composer.Composer.__init__(self)

    get_single_node = yaml.composer.Composer.get_single_node
    compose_document = yaml.composer.Composer.compose_document
    compose_node = yaml.composer.Composer.compose_node
    compose_scalar_node = yaml.composer.Composer.compose_scalar_node
    compose_sequence_node = yaml.composer.Composer.compose_sequence_node
    compose_mapping_node = yaml.composer.Composer.compose_mapping_node


_DeepYamlLoader = make_spec_loader(_PythonComposer)
# Each nesting level needs a collection indicator ('[', '{', or '-', '?',
# ':' before whitespace), so text with at most this many of those characters
# cannot nest deeper: 8,000 levels is ~2.8 MiB of C stack, well inside a
# Linux thread's 8 MiB. An 8-GPU nvidia-ctk spec has ~2,100 of them.
MAX_C_COMPOSED_INDICATORS = 8000


def _audit(root: yaml.Node, text: str) -> None:
    """What the composed nodes cannot show the constructors: retag what
    go-yaml v2 reads by node kind (only when the text has a '!', as every
    explicit tag does), and check double-quoted escapes against go-yaml v2's
    (only when it has a backslash). Iterative, and each node once: aliases
    share nodes and may form cycles.
    """
    tags, escapes = "!" in text, "\\" in text
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if tags and node.tag not in _SCALAR_TAGS and not build.is_merge(node):
                node.tag = STR_TAG
            if escapes and node.style == '"':
                _check_escapes(node, text)
            continue
        if tags and node.tag != NULL_TAG:
            node.tag = MAP_TAG if isinstance(node, yaml.MappingNode) else SEQ_TAG
        if isinstance(node, yaml.MappingNode):
            stack.extend(n for pair in node.value for n in pair)
        else:
            stack.extend(node.value)


def _check_escapes(node: yaml.ScalarNode, text: str) -> None:
    # The node starts at its tag or anchor, if any; neither holds a '"'.
    start = text.find('"', node.start_mark.index, node.end_mark.index)
    found = go_escape_problem(text[start : node.end_mark.index]) if start != -1 else None
    if found is not None:
        offset, problem = found
        at = start + offset
        line_start = text.rfind("\n", 0, at) + 1
        mark = yaml.Mark(
            node.start_mark.name, at, text.count("\n", 0, at), at - line_start, None, 0
        )
        raise yaml.MarkedYAMLError("while parsing a quoted scalar", node.start_mark, problem, mark)


def decode_yaml(text: str, path: str) -> Any:
    """`text` (one YAML document) as plain data; SpecError naming `path` and
    the line for anything it cannot or must not hold."""
    deep = sum(map(text.count, "-:?[{")) > MAX_C_COMPOSED_INDICATORS
    try:
        loader = (_DeepYamlLoader if deep else _SpecYamlLoader)(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            if "!" in text or "\\" in text:
                _audit(node, text)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        if "maximum nesting depth" in (exc.problem or ""):
            # PyYAML >= 6.0.4 caps nesting in its parser; one message for
            # "too deep" whichever layer noticed it.
            raise SpecError(path, "document is nested too deeply") from None
        raise SpecError(path, f"invalid YAML: {_yaml_problem(exc, text)}") from None
    except yaml.reader.ReaderError as exc:
        # A character YAML forbids; PyYAML's own text spans two lines.
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        raise SpecError(
            path,
            f"invalid YAML: line {line} column {column}: "
            f"character #x{exc.character:04x}: {exc.reason}",
        ) from None
    except RecursionError:
        raise SpecError(path, "document is nested too deeply") from None
    except Exception as exc:  # noqa: BLE001
        # PyYAML's scanner lets ValueError escape for some escapes
        # (`"\U00110000"` in pure Python); any failure to decode untrusted
        # text is the spec's fault, not ateom's. Whitespace is folded so the
        # problem stays one line.
        raise SpecError(path, f"invalid YAML: {' '.join(str(exc).split())}") from None


def _yaml_problem(exc: yaml.MarkedYAMLError, text: str) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
    if mark is not None and "cannot start any token" in (exc.problem or ""):
        lines = text.splitlines()
        line = lines[mark.line] if mark.line < len(lines) else ""
        if line[mark.column:mark.column + 1] == "\t":
            # PyYAML's words for a tab where YAML wants indentation or a value.
            return where + "a tab: YAML indents with spaces, never tabs"
    what = " ".join(p for p in (exc.context, exc.problem) if p)
    return where + (what or str(exc))
