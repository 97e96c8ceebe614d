"""`InjectionPlan`: everything an injection will do to one bundle, computed up front.

Made by `ateom.inject.injector.plan_injection`, carried out by its
`stage_links` / `apply_plan` (or by the daemon, which adds its own edits to
`merged` and writes once). Pure: nothing here reads or writes a file.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from ateom.inject.merge import DroppedHook
from ateom.inject.soname import SkippedLibrary, SonameLink
from ateom.oci_config import dump_config

CONFIG_NAME = "config.json"

# config.json as the caller read it: its bytes, and what
# `ateom.oci_config.parse_config` made of them.
BundleConfig = tuple[bytes, dict[str, Any]]


class _ConfigAfter:
    """`InjectionPlan.config_after`: the bytes given to the plan, else the merged
    config serialized on first read (and kept). The daemon makes its own edits
    to `merged` and serializes those once, so the plan never pays for bytes
    nobody writes; `diff()`, `apply_plan` and the CLI read them here."""

    @overload
    def __get__(self, plan: None, owner: Any = None) -> None: ...

    @overload
    def __get__(self, plan: InjectionPlan, owner: Any = None) -> bytes: ...

    def __get__(self, plan: InjectionPlan | None, owner: Any = None) -> bytes | None:
        if plan is None:
            return None  # the field's default: serialize on first read
        data: bytes | None = plan.__dict__.get("_config_after")
        if data is None:
            data = plan.config_before
            if plan.config_changed:
                data = serialize_config(plan.merged)
            plan.__dict__["_config_after"] = data
        return data

    def __set__(self, plan: InjectionPlan, value: bytes | None) -> None:
        plan.__dict__["_config_after"] = value


@dataclass(frozen=True)
class InjectionPlan:
    """Everything an injection will do to one bundle, computed up front.

    `merged` is the config with the edits made; it shares untouched
    subtrees with the config it was planned from, so copy a section before
    changing it (`ateom.inject.editor`). `config_changed` says whether it
    differs from that config. `config_after` is its bytes (serialized when
    first read), equal to `config_before` byte for byte when nothing changed
    (a second injection of the same devices); bytes given to the constructor
    (or `dataclasses.replace`) are used as they are. `symlinks` are only the
    SONAME links not already in place.
    """

    bundle_dir: str
    rootfs: str
    devices: tuple[str, ...]
    config_before: bytes
    merged: dict[str, Any] = field(compare=False, repr=False)
    symlinks: tuple[SonameLink, ...]
    dropped_hooks: tuple[DroppedHook, ...]
    skipped_libraries: tuple[SkippedLibrary, ...]
    config_changed: bool = True
    config_after: _ConfigAfter = _ConfigAfter()

    @property
    def config_path(self) -> str:
        return os.path.join(self.bundle_dir, CONFIG_NAME)

    @property
    def changed(self) -> bool:
        if self.symlinks:
            return True
        given = self.__dict__.get("_config_after")
        return self.config_changed if given is None else given != self.config_before

    def diff(self) -> str:
        """A unified diff of config.json (both sides indented), then the symlinks to stage."""
        before = _readable(self.config_before)
        after = _readable(self.config_after)
        lines = list(difflib.unified_diff(before, after, f"a/{CONFIG_NAME}", f"b/{CONFIG_NAME}"))
        text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        rootfs = os.path.relpath(self.rootfs, self.bundle_dir)
        for link in self.symlinks:
            text += f"+symlink {rootfs}{link.path} -> {link.target}\n"
        return text


def serialize_config(config: Mapping[str, Any]) -> bytes:
    """config.json bytes as ateom writes them (`ateom.oci_config.dump_config`)."""
    return dump_config(dict(config), CONFIG_NAME)


def _readable(config_bytes: bytes) -> list[str]:
    try:
        text = json.dumps(json.loads(config_bytes), indent=4) + "\n"
    except (ValueError, RecursionError):
        text = config_bytes.decode("utf-8", "replace")
    return text.splitlines(keepends=True)
