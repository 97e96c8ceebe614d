"""The real runsc the emulator runs in front of, as probed from the binary (runs it).

The emulator passes every command to a real runsc with the flags that build
lacks left out. No release file describes Debian's builds (0.0~20221219,
0.0~20240729) exactly, so the real binary describes itself: ``--version``,
``runsc help`` (its commands), ``runsc flags`` and ``runsc help <command>``
(Go's ``flag.PrintDefaults`` entries: a name, then a type word unless bool),
and ``nvproxy list-supported-drivers``. `probe_real_runsc` turns that into a
`Release` with the same shape the release files give, so one `real_argv`
serves every build; `real_profile_json` / `profile_from_json` keep it in the
emulator's config, so a call of the emulator probes nothing.

What the emulator asks of the real build beyond its flags:

- `restores_subcontainers`: ``restore -direct`` came with multi-container
  restore (release-20240501.0); Debian's 2022 build restores a sandbox's root
  only.
- `newest_driver`: nvproxy needs a driver ABI it knows; with no GPU here the
  emulator pins the newest one the real build lists
  (``--nvproxy-driver-version``), whatever driver the emulated release uses.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ateom.runsc.probe import parse_drivers
from tests.support.runsc_release import CommandDef, FlagDef, Release

_ENTRY = re.compile(r"  -([A-Za-z0-9][A-Za-z0-9_.-]*)(?: ([^\s-]\S*))?\n    \t")
_COMMAND = re.compile(r"^\t(\S+)\s")
_DATE = re.compile(r"(20\d{6})")
# Go flag.PrintDefaults type words, as the emulator's parser names the types.
_TYPES = {"string": "string", "int": "int", "uint": "uint", "uint64": "uint64",
          "int64": "int64", "duration": "duration", "float": "float"}


def parse_print_defaults(text: str) -> dict[str, FlagDef]:
    """Flags from Go ``flag.PrintDefaults`` output (pure).

    An entry is ``  -name [type]`` then a tab-indented usage; no type word
    means a bool, a flag.Value's own word ("value", "list") a value. A
    command's usage line may lack its newline, so an entry can start mid-line
    (``delete [flags] <container ids>  -force``).
    """
    return {m.group(1): FlagDef(name=m.group(1), default="", help_text="",
                                type="bool" if m.group(2) is None
                                else _TYPES.get(m.group(2), "value"))
            for m in _ENTRY.finditer(text)}


def parse_commands(help_text: str) -> frozenset[str]:
    """Command names from ``runsc help`` (tab-indented ``name  synopsis`` lines; pure)."""
    return frozenset(m.group(1) for m in map(_COMMAND.match, help_text.splitlines()) if m)


def version_date(version: str) -> int:
    """The release date in a version string: ``0.0~20240729.0``, ``release-20260817.0-70``."""
    m = _DATE.search(version)
    return int(m.group(1)) if m else 0


def newest_driver(release: Release) -> str | None:
    """The newest driver ABI in `release`'s list (sorted by the daemon's own
    `parse_drivers`: runsc's order is not always sorted)."""
    drivers = parse_drivers("\n".join(release.supported_drivers))
    return drivers[-1] if drivers else None


def restores_subcontainers(release: Release) -> bool:
    """Whether the build restores a multi-container sandbox (see the module doc)."""
    restore = release.commands.get("restore")
    return restore is not None and "direct" in restore.flags


def _run(argv: Sequence[str]) -> tuple[int, str]:
    done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30, check=False)
    return done.returncode, done.stdout + done.stderr


def probe_real_runsc(path: str) -> Release:
    """Probe the runsc at `path` (runs it once per command); raises OSError if unusable."""
    code, version = _run([path, "--version"])
    if code != 0 or "runsc version" not in version:
        raise OSError(f"{path}: `--version` did not answer like runsc (exit {code})")
    _, top_help = _run([path, "help"])
    _, flags_text = _run([path, "flags"])
    names = parse_commands(top_help[top_help.find("Subcommands"):])
    commands: dict[str, CommandDef] = {}
    for name in sorted(names - {"help", "flags"}):
        _, text = _run([path, "help", name])
        commands[name] = CommandDef(name=name, usage="", flags=parse_print_defaults(text),
                                    help_output=text, help_via_help_command=text,
                                    semantics={})
    drivers: tuple[str, ...] = ()
    if "nvproxy" in names:
        code, out = _run([path, "nvproxy", "list-supported-drivers"])
        drivers = parse_drivers(out) if code == 0 else ()
    tag = version.split()[2] if len(version.split()) > 2 else "unknown"
    return Release(
        tag=tag, date=version_date(tag), version_output=version, flags=parse_print_defaults(
            flags_text), commands=commands, top_level_commands=names,
        twice_registered=frozenset(), top_level_help=top_help, flags_output=flags_text,
        features={}, supported_drivers=drivers)


def real_profile_json(release: Release) -> dict[str, Any]:
    """What the emulator's config keeps of a probed build (flag names and kinds)."""
    return {
        "tag": release.tag, "date": release.date, "version_output": release.version_output,
        "flags": {n: f.type for n, f in release.flags.items()},
        "commands": {c: {n: f.type for n, f in d.flags.items()}
                     for c, d in release.commands.items()},
        "supported_drivers": list(release.supported_drivers),
    }


def _flags(kinds: Mapping[str, str]) -> dict[str, FlagDef]:
    return {n: FlagDef(name=n, type=t, default="", help_text="") for n, t in kinds.items()}


def profile_from_json(data: Mapping[str, Any]) -> Release:
    """The `Release` `real_profile_json` wrote (pure)."""
    commands = {c: CommandDef(name=c, usage="", flags=_flags(f), help_output="",
                              help_via_help_command="", semantics={})
                for c, f in data["commands"].items()}
    return Release(
        tag=str(data["tag"]), date=int(data["date"]),
        version_output=str(data["version_output"]), flags=_flags(data["flags"]),
        commands=commands, top_level_commands=frozenset(commands) | {"help", "flags"},
        twice_registered=frozenset(), top_level_help="", flags_output="", features={},
        supported_drivers=tuple(data.get("supported_drivers", ())))


@dataclass(frozen=True, slots=True)
class RealRunsc:
    """A probed real runsc: where it is and what it is."""

    path: str
    release: Release

    @property
    def has_nvproxy(self) -> bool:
        return "nvproxy" in self.release.flags

    @property
    def restores_subcontainers(self) -> bool:
        return restores_subcontainers(self.release)

    @property
    def newest_driver(self) -> str | None:
        return newest_driver(self.release)


_probed: dict[str, RealRunsc] = {}


def real_runsc(path: str) -> RealRunsc:
    """The probed build at `path`, probed once per process."""
    if path not in _probed:
        _probed[path] = RealRunsc(path, probe_real_runsc(path))
    return _probed[path]
