"""Helpers for tests that need CDI specs on disk (ateom's and its users').

    from ateom.cdi.testing import spec_document, write_spec

    doc = spec_document("vendor.com/gpu", {"0": {"deviceNodes": [{"path": "/dev/null"}]}})
    write_spec(tmp_path / "cdi", "gpu.json", doc)
    Registry.load([str(tmp_path / "cdi")]).resolve(["vendor.com/gpu=0"])

Documents are plain dicts in CDI's JSON shape, so a test can break them on
purpose (misspell a field, drop a device) before writing them. `dump_yaml`
writes one as YAML that reads back unchanged (`y`, `1e3` quoted).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import yaml

from ateom.cdi.go_scalars import GO_SCALAR_RESOLVERS


class _SpecYamlDumper(yaml.SafeDumper):
    """Quotes every string a spec reader would not read back as a string:
    YAML 1.1's forms and go-yaml v2's (`y`, `1e3`, `08`)."""


for _tag, _pattern, _firsts in GO_SCALAR_RESOLVERS:
    _SpecYamlDumper.add_implicit_resolver(_tag, _pattern, list(_firsts))


def dump_yaml(doc: Any) -> str:
    """`doc` as YAML text that ateom (and the CDI reference) reads back as `doc`."""
    return yaml.dump(doc, Dumper=_SpecYamlDumper, sort_keys=False)


def spec_document(
    kind: str,
    devices: Mapping[str, Mapping[str, Any]],
    *,
    version: str = "0.5.0",
    spec_edits: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A CDI spec as JSON data: `devices` maps each device name to its
    containerEdits (CDI field names); `spec_edits` are the spec-level ones."""
    doc: dict[str, Any] = {
        "cdiVersion": version,
        "kind": kind,
        "devices": [
            {"name": name, "containerEdits": dict(edits)} for name, edits in devices.items()
        ],
    }
    if spec_edits:
        doc["containerEdits"] = dict(spec_edits)
    if annotations:
        doc["annotations"] = dict(annotations)
    return doc


def write_spec(directory: str | os.PathLike[str], name: str, doc: Mapping[str, Any] | str) -> str:
    """Write `doc` as `directory/name` (creating the directory); returns the path.

    A mapping is written as JSON or YAML by the name's extension; a string is
    written as it is, for text no serializer would produce."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(os.fspath(directory), name)
    if isinstance(doc, str):
        text = doc
    elif name.endswith((".yaml", ".yml")):
        text = dump_yaml(dict(doc))
    else:
        text = json.dumps(doc, indent=2)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
