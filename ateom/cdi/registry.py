"""The CDI devices a node offers: every spec in the spec directories, indexed.

`Registry.load` is the imperative edge (it lists directories and reads
files); everything after is a pure, immutable snapshot. `Registry.resolve`
turns requested qualified names into the ordered `EditStep`s an injector
applies.

Directory semantics (the CDI reference's, with its sharp edges filed off):

- Directories are searched in order; the N-th has priority N, so a later
  directory (by default /var/run/cdi, written at runtime) overrides an
  earlier one (/etc/cdi) for the same device.
- Two specs in the *same* directory defining the same device make that
  device unresolvable, naming both files: picking one by file name would be
  a silent guess. Unlike the reference, a higher-priority directory that
  defines the device too settles the question.
- A spec that fails to load hides nothing of other specs; its error is kept
  and shown when someone asks for one of its devices.
- A directory that does not exist is simply empty.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ateom.cdi.model import Device, EditStep, Resolution, Spec
from ateom.cdi.names import parse_qualified_name
from ateom.cdi.spec_cache import SHARED_SPEC_CACHE, SpecCache, SpecSource, read_source
from ateom.cdi.spec_file import LoadedSpec, format_for_path, spec_problems
from ateom.errors import QualifiedNameError, ResolutionError, SpecError
from ateom.settings import NodeSettings

# How many device names an "it has these devices" reason lists before eliding.
_MAX_LISTED_DEVICES = 24


def default_spec_dirs(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """Spec directories, lowest priority first: $ATEOM_CDI_SPEC_DIRS
    (colon-separated; empty entries ignored) or /etc/cdi then /var/run/cdi."""
    return NodeSettings.from_env(environ).spec_dirs


@dataclass(frozen=True, slots=True)
class RegisteredDevice:
    """A device as the registry offers it: its name, and where it came from."""

    qualified_name: str
    spec_path: str
    priority: int
    device: Device
    spec: Spec


def _device_order(name: str) -> tuple[Any, ...]:
    # Index-like names ("2", "10", "0:1") in numeric order first, the way an
    # operator counts GPUs; everything else (UUIDs, "all") alphabetically.
    if re.fullmatch(r"\d+(?::\d+)*", name):
        return (0, tuple(int(p) for p in name.split(":")))
    return (1, name)


def _one_line(error: SpecError, limit: int = 3) -> str:
    problems = spec_problems(error)
    shown = "; ".join(f"{p.field}: {p.reason}" if p.field else p.reason for p in problems[:limit])
    more = len(problems) - limit
    return shown + (f" (and {more} more)" if more > 0 else "")


@dataclass(frozen=True)
class Registry:
    """An immutable snapshot of the devices in a set of spec directories.

    Build it with `Registry.load(dirs)` (reads files) or, from sources already
    read, `Registry.from_sources(dirs, sources)` (pure).
    """

    spec_dirs: tuple[str, ...]
    sources: tuple[SpecSource, ...]
    # Each failed spec file's error, by path (a directory that could not be
    # listed appears here too).
    spec_errors: Mapping[str, SpecError]
    # Every loaded spec's warnings, ``path: warning: field: reason``.
    warnings: tuple[str, ...]
    # Qualified names defined by two or more specs in one directory -> those files.
    conflicts: Mapping[str, tuple[str, ...]]
    _devices: Mapping[str, RegisteredDevice] = field(repr=False)
    # kind -> loaded specs of that kind, highest priority first.
    _specs_by_kind: Mapping[str, tuple[SpecSource, ...]] = field(repr=False)
    # kind -> failed specs that declared it.
    _broken_by_kind: Mapping[str, tuple[SpecSource, ...]] = field(repr=False)

    # -- building -----------------------------------------------------------

    @classmethod
    def load(
        cls, spec_dirs: Sequence[str], *, cache: SpecCache | None = SHARED_SPEC_CACHE
    ) -> Registry:
        """Read every spec in `spec_dirs` (lowest priority first); reads files.

        Never raises for a bad spec or directory: those land in `spec_errors`.
        Files whose bytes are unchanged since an earlier load come from
        `cache` without being validated again; ``cache=None`` validates all.
        """
        dirs = tuple(spec_dirs)
        sources: list[SpecSource] = []
        dir_errors: dict[str, SpecError] = {}
        for priority, directory in enumerate(dirs):
            try:
                names = sorted(os.listdir(directory))
            except FileNotFoundError:
                continue  # a missing directory is an empty one
            except OSError as exc:
                dir_errors[directory] = SpecError(
                    directory, f"cannot list spec directory: {exc.strerror or exc}"
                )
                continue
            for name in names:
                if format_for_path(name) is None:
                    continue
                path = os.path.join(directory, name)
                if cache is None:
                    if not os.path.isdir(path):
                        sources.append(read_source(path, priority))
                    continue
                source = cache.read(path, priority)
                if source is not None:
                    sources.append(source)
        return cls.from_sources(dirs, sources, dir_errors)

    @classmethod
    def from_sources(
        cls,
        spec_dirs: Sequence[str],
        sources: Iterable[SpecSource],
        dir_errors: Mapping[str, SpecError] | None = None,
    ) -> Registry:
        """Index already-read specs; pure. Later priority wins per device."""
        all_sources = tuple(sources)
        errors: dict[str, SpecError] = dict(dir_errors or {})
        warnings: list[str] = []
        by_kind: dict[str, list[SpecSource]] = {}
        broken: dict[str, list[SpecSource]] = {}
        # qualified name -> every (priority, source, device) defining it
        offers: dict[str, list[tuple[int, SpecSource, Device]]] = {}
        for source in all_sources:
            if source.loaded is None:
                if source.error is not None:
                    errors[source.path] = source.error
                if source.kind:
                    broken.setdefault(source.kind, []).append(source)
                continue
            spec = source.loaded.spec
            warnings.extend(source.loaded.warnings)
            by_kind.setdefault(spec.kind, []).append(source)
            for device in spec.devices:
                offers.setdefault(f"{spec.kind}={device.name}", []).append(
                    (source.priority, source, device)
                )
        devices: dict[str, RegisteredDevice] = {}
        conflicts: dict[str, tuple[str, ...]] = {}
        for qualified, offered in offers.items():
            top = max(priority for priority, _, _ in offered)
            winners = [(s, d) for p, s, d in offered if p == top]
            if len(winners) > 1:
                conflicts[qualified] = tuple(sorted(s.path for s, _ in winners))
                continue
            source, device = winners[0]
            assert source.loaded is not None
            devices[qualified] = RegisteredDevice(
                qualified, source.path, source.priority, device, source.loaded.spec
            )
        return cls(
            spec_dirs=tuple(spec_dirs),
            sources=all_sources,
            spec_errors=MappingProxyType(errors),
            warnings=tuple(warnings),
            conflicts=MappingProxyType(conflicts),
            _devices=MappingProxyType(dict(sorted(devices.items()))),
            _specs_by_kind=MappingProxyType(
                {k: tuple(sorted(v, key=lambda s: -s.priority)) for k, v in by_kind.items()}
            ),
            _broken_by_kind=MappingProxyType({k: tuple(v) for k, v in broken.items()}),
        )

    # -- questions ----------------------------------------------------------

    def devices(self) -> list[RegisteredDevice]:
        """Every resolvable device, sorted by qualified name."""
        return list(self._devices.values())

    def device(self, qualified_name: str) -> RegisteredDevice | None:
        return self._devices.get(qualified_name)

    def specs(self) -> list[LoadedSpec]:
        """Every loaded spec, in load order (directory, then file name)."""
        return [s.loaded for s in self.sources if s.loaded is not None]

    def kinds(self) -> set[str]:
        """Kinds (vendor/class) with at least one loaded spec."""
        return set(self._specs_by_kind)

    def has_kind(self, kind: str) -> bool:
        return kind in self._specs_by_kind

    # -- resolution -----------------------------------------------------------

    def resolve(self, names: Sequence[str]) -> Resolution:
        """The edits for `names`, in order; pure over this snapshot.

        Each spec's spec-level edits come once, just before its first
        requested device; then each device's edits. A name asked for twice
        is applied once. Raises ResolutionError listing every name that
        cannot be resolved, each with why.
        """
        if isinstance(names, str):
            names = [names]  # a lone name is a list of one, not of characters
        failures: dict[str, str] = {}
        wanted: list[RegisteredDevice] = []
        seen: set[str] = set()
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            found = self._devices.get(name)
            if found is not None:
                wanted.append(found)
            else:
                failures[name] = self.why_unresolvable(name)
        if failures:
            raise ResolutionError(failures)
        steps: list[EditStep] = []
        specs_started: set[str] = set()
        for registered in wanted:
            spec = registered.spec
            if registered.spec_path not in specs_started:
                specs_started.add(registered.spec_path)
                if not spec.container_edits.is_empty():
                    steps.append(
                        EditStep(
                            f"{spec.kind} (spec-level)",
                            registered.spec_path,
                            spec.container_edits,
                        )
                    )
            steps.append(
                EditStep(
                    registered.qualified_name,
                    registered.spec_path,
                    registered.device.container_edits,
                )
            )
        return Resolution(tuple(r.qualified_name for r in wanted), tuple(steps))

    def why_unresolvable(self, name: str) -> str:
        """Why `name` does not resolve here, in words an operator can act on."""
        if name in self._devices:
            return "resolvable"
        try:
            qualified = parse_qualified_name(name)
        except QualifiedNameError as exc:
            return str(exc)
        kind = qualified.kind
        broken = self._broken_by_kind.get(kind, ())
        broken_note = "; ".join(
            f"spec {s.path} (kind {kind}) failed to load: "
            + (_one_line(s.error) if s.error else "unknown error")
            for s in broken
        )
        if name in self.conflicts:
            # A broken spec of the kind may be the one meant to settle it.
            files = " and ".join(self.conflicts[name])
            return (
                f"defined by more than one spec in the same directory ({files}); "
                "remove or rename one of them"
            ) + ("; also " + broken_note if broken_note else "")
        loaded = self._specs_by_kind.get(kind, ())
        if not loaded:
            if broken_note:
                return broken_note
            known = ", ".join(sorted(self._specs_by_kind)) or "none"
            dirs = ", ".join(self.spec_dirs) or "none"
            why = (
                f"no CDI spec for kind {kind!r} in the spec directories ({dirs}); "
                f"kinds available: {known}"
            )
            # A spec too broken to tell its kind (or a directory that could
            # not be listed) may be the missing one: say so, with its error.
            attributed = {s.path for specs in self._broken_by_kind.values() for s in specs}
            unknown = [
                f"{path}: {_one_line(error)}"
                for path, error in self.spec_errors.items()
                if path not in attributed
            ]
            if unknown:
                why += "; spec files that failed to load, any of which may be it: " + "; ".join(
                    unknown
                )
            return why
        have = sorted(
            {q.partition("=")[2] for q in self._devices if q.partition("=")[0] == kind},
            key=_device_order,
        )
        listed = ", ".join(have[:_MAX_LISTED_DEVICES])
        if len(have) > _MAX_LISTED_DEVICES:
            listed += f", ... ({len(have) - _MAX_LISTED_DEVICES} more)"
        paths = ", ".join(s.path for s in loaded)
        why = (
            f"no device {qualified.name!r} in the spec(s) for kind {kind} ({paths}); "
            f"devices there: {listed or 'none resolvable'}"
        )
        return why + ("; also " + broken_note if broken_note else "")
