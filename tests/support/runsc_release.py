"""One gVisor runsc release's command line, from ``tests/fixtures/runsc/release-*.json`` (pure).

The release files (see their ``PROVENANCE.md``) hold, per release, what
gVisor's source registers: every flag with its Go type and the exact
``flag.PrintDefaults`` entry, every command's usage and help, the rendered
``runsc flags``/``runsc help`` texts, the GPU features a launcher cares
about, and the release's error strings with file:line. This module turns one
file into a `Release` and answers the questions an emulator asks of it:

- which flags exist and how Go's ``flag`` package parses them
  (`parse_go_flags`: ``-f``/``--f``, ``-f=v``, ``-f v``, bool ``-f=false``,
  ``--`` and the first non-flag end the flags);
- what ``--version``, ``help``, ``flags`` and usage errors print (`short_usage`,
  `command_help`, `version_output`);
- the release's own message texts (`Release.message`), filled in with Go's
  verbs by `go_sprintf`.

Only `load_release` and `release_file` touch the disk.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Where the release files are: test data in the repository (their PROVENANCE.md).
_DEFAULT_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "runsc"
RELEASES_DIR_ENV = "ATEOM_RUNSC_RELEASES_DIR"

# Debian bookworm's runsc, the only one that installs here: the emulator runs
# every real command through it.
DEBIAN = "20221219"

# From release-20260309.0, cli.Run parses a command's flags once before
# dispatch (to find the container's spec) and reports a bad flag through
# util.Fatalf ("failed to parse flags for %q: %v", exit 128).
_PREPARSE_FROM = 20260309

_TAG = re.compile(r"^(?:release-)?(\d{8})(?:\.(\d+))?$")


def releases_dir() -> Path:
    """The release files' directory: ``$ATEOM_RUNSC_RELEASES_DIR`` or ``tests/fixtures/runsc``."""
    return Path(os.environ.get(RELEASES_DIR_ENV) or _DEFAULT_DIR)


def _available(directory: Path) -> tuple[str, ...]:
    try:
        names = os.listdir(directory)
    except OSError:
        return ()
    found = (_TAG.match(n.removesuffix(".json")) for n in names if n.endswith(".json"))
    return tuple(sorted(m.group(1) for m in found if m))


# The releases there, by date ("20221219", ...): what `install_runsc` accepts.
RELEASES: tuple[str, ...] = _available(releases_dir())


def release_file(name: str, directory: Path | None = None) -> Path:
    """The file of release `name` ("20240930", "release-20240930.0"); reads no file."""
    m = _TAG.match(name)
    if not m:
        raise ValueError(f"runsc release {name[:80]!r}: expected YYYYMMDD or release-YYYYMMDD.N")
    return (directory or releases_dir()) / f"release-{m.group(1)}.{m.group(2) or 0}.json"


@dataclass(frozen=True, slots=True)
class FlagDef:
    """One flag as Go's ``flag`` package sees it."""

    name: str
    type: str  # bool, string, int, uint, uint64, duration, value
    default: str
    help_text: str  # the exact flag.PrintDefaults entry

    @property
    def is_bool(self) -> bool:
        return self.type == "bool"


@dataclass(frozen=True, slots=True)
class CommandDef:
    """A top-level command the release file describes (flags, usage, help)."""

    name: str
    usage: str
    flags: Mapping[str, FlagDef]
    help_output: str  # Usage() + PrintDefaults of its own flags
    help_via_help_command: str  # what `runsc help <cmd>` prints (adds -h/-help when wrapped)
    semantics: Mapping[str, Any]


@dataclass(frozen=True)
class Release:
    """One release's command-line surface and GPU-relevant facts."""

    tag: str  # "release-20240930.0"
    date: int  # 20240930
    version_output: str  # what --version prints (Debian's own string for 20221219)
    flags: Mapping[str, FlagDef]  # top-level: config flags plus runsc/cli's own
    commands: Mapping[str, CommandDef]
    top_level_commands: frozenset[str]
    # Names registered in two groups ("state" and debug's "state" until 2024):
    # `runsc help <name>` explains both, and the file renders only one.
    twice_registered: frozenset[str]
    top_level_help: str
    flags_output: str
    features: Mapping[str, bool]  # gpu_launcher_features
    supported_drivers: tuple[str, ...] = ()
    unsupported_drivers: tuple[str, ...] = ()  # known ABI, refused without the flag
    catalog: tuple[tuple[str, str], ...] = ()  # (text, file:line), errors/panics/warnings
    nvproxy_enable: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.date)

    @property
    def preparses_command_flags(self) -> bool:
        return self.date >= _PREPARSE_FROM

    @property
    def has_help_flag(self) -> bool:
        """``-h``/``-help`` are real top-level flags (long help on stdout, exit 0)."""
        return "help" in self.flags

    def feature(self, name: str) -> bool:
        return bool(self.features.get(name, False))

    def message(self, *starts: str) -> str:
        """The release's own format string beginning with the first of `starts` it has.

        KeyError when it has none: the emulator never invents a release's text.
        """
        for start in starts:
            for text, _ in self.catalog:
                if text.startswith(start):
                    return text
        raise KeyError(f"{self.tag} has no message starting {starts[0]!r}")


def _flag(entry: Mapping[str, Any]) -> FlagDef:
    return FlagDef(name=str(entry["name"]), type=str(entry["type"]),
                   default=str(entry.get("default", "")), help_text=str(entry["help_text"]))


def _command(name: str, entry: Mapping[str, Any]) -> CommandDef:
    flags = {f["name"]: _flag(f) for f in entry.get("flags", ())}
    help_output = str(entry.get("help_output", entry.get("usage", "")))
    return CommandDef(
        name=name, usage=str(entry.get("usage", "")), flags=flags, help_output=help_output,
        help_via_help_command=str(entry.get("help_output_via_runsc_help", help_output)),
        semantics=dict(entry.get("semantics", {})),
    )


def _catalog(data: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    entries: list[tuple[str, str]] = [(m["text"], m["at"]) for m in data.get("message_catalog", ())]
    for found in (data.get("notable_messages") or {}).values():
        entries += [(m["text"], m["at"]) for m in found or ()]
    return tuple(dict.fromkeys(entries))


def parse_release(data: Mapping[str, Any]) -> Release:
    """A `Release` from a parsed release file (pure)."""
    tag = str(data["release"])
    m = _TAG.match(tag)
    if not m:
        raise ValueError(f"release file: release: {tag[:80]!r} is not a release tag")
    version = data["output_formats"]["version"]
    commands = {name: _command(name, entry) for name, entry in data["commands"].items()
                if entry.get("present", True)}
    drivers = (data.get("nvproxy") or {}).get("driver_versions") or {}
    registered = [c["name"] for c in data["subcommand_registry"]
                  if c.get("group") != "<help topic>"]
    return Release(
        tag=tag, date=int(m.group(1)),
        version_output=version.get("example_debian_bookworm") or version["example_official_build"],
        flags={f.name: f for f in map(_flag, [*data["global_flags"], *data["cli_flags"]])},
        commands=commands,
        top_level_commands=frozenset(registered),
        twice_registered=frozenset(n for n in registered if registered.count(n) > 1),
        top_level_help=str(data["top_level_help_output"]),
        flags_output=str(data["runsc_flags_output"]),
        features=dict(data["gpu_launcher_features"]),
        supported_drivers=tuple(drivers.get("supported", ())),
        unsupported_drivers=tuple(drivers.get("known_abi_but_unsupported", ())),
        catalog=_catalog(data),
        nvproxy_enable=dict((data.get("nvproxy") or {}).get("enable") or {}),
    )


def load_release(name: str | os.PathLike[str]) -> Release:
    """Read and parse a release file, by name ("20240930") or path."""
    path = Path(name) if str(name).endswith(".json") else release_file(str(name))
    with open(path, "rb") as f:
        return parse_release(json.load(f))


# --- Go's flag package ------------------------------------------------------

_BOOL_WORDS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
               "0": False, "f": False, "F": False, "FALSE": False, "false": False,
               "False": False}
_INT = re.compile(r"^[+-]?(0[xX][0-9a-fA-F_]+|0[oO]?[0-7_]*|0[bB][01_]+|[1-9][0-9_]*)$")
_DURATION = re.compile(r"^[+-]?(0|((\d+\.?\d*|\.\d+)(ns|us|µs|ms|s|m|h))+)$")


@dataclass(frozen=True, slots=True)
class FlagUse:
    """One flag as given: its name, value, and the argv tokens it took."""

    name: str
    value: str
    tokens: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FlagParse:
    """What Go's FlagSet.Parse made of some arguments."""

    used: tuple[FlagUse, ...]
    rest: tuple[str, ...]  # from the first non-flag on
    error: str = ""  # Go's message, e.g. "flag provided but not defined: -x"
    help: bool = False  # -h/-help given but not defined: flag.ErrHelp
    terminated: bool = False  # a "--" ended the flags

    def value(self, name: str) -> str | None:
        """The last value given for `name` (Go keeps the last Set)."""
        found = [u.value for u in self.used if u.name == name]
        return found[-1] if found else None

    def is_true(self, name: str) -> bool:
        value = self.value(name)
        return value is not None and _BOOL_WORDS.get(value, False)


def _invalid(flag: FlagDef, value: str) -> bool:
    if flag.type in ("int", "int64"):
        return not _INT.match(value)
    if flag.type in ("uint", "uint64"):
        return value.startswith(("-", "+")) or not _INT.match(value)
    if flag.type == "duration":
        return not _DURATION.match(value)
    return False


def parse_go_flags(args: Sequence[str], flags: Mapping[str, FlagDef]) -> FlagParse:
    """Parse `args` against `flags` exactly as Go's ``flag.FlagSet.Parse`` does (pure)."""
    used: list[FlagUse] = []
    i = 0
    while i < len(args):
        s = args[i]
        if len(s) < 2 or s[0] != "-":
            break
        if s == "--":
            return FlagParse(tuple(used), tuple(args[i + 1:]), terminated=True)
        name = s[2:] if s[1] == "-" else s[1:]
        if not name or name[0] in "-=":
            return FlagParse(tuple(used), tuple(args[i:]), error=f"bad flag syntax: {s}")
        name, has_value, value = name.partition("=")
        flag = flags.get(name)
        if flag is None:
            if name in ("help", "h"):
                return FlagParse(tuple(used), tuple(args[i + 1:]), help=True)
            return FlagParse(tuple(used), tuple(args[i:]),
                             error=f"flag provided but not defined: -{name}")
        tokens: tuple[str, ...] = (s,)
        if flag.is_bool:
            if has_value and value not in _BOOL_WORDS:
                return FlagParse(tuple(used), tuple(args[i:]), error=(
                    f'invalid boolean value "{value}" for -{name}: parse error'))
            value = value if has_value else "true"
        elif not has_value:
            if i + 1 >= len(args):
                return FlagParse(tuple(used), (), error=f"flag needs an argument: -{name}")
            i += 1
            value = args[i]
            tokens = (s, value)
        if not flag.is_bool and _invalid(flag, value):
            return FlagParse(tuple(used), tuple(args[i:]), error=(
                f'invalid value "{value}" for flag -{name}: parse error'))
        used.append(FlagUse(name, value, tokens))
        i += 1
    return FlagParse(tuple(used), tuple(args[i:]))


# --- what runsc prints ------------------------------------------------------

def short_usage(release: Release) -> str:
    """The commander's usage (google/subcommands Explain): what usage errors print.

    The top-level help without its blurb and help topics: the usage line, the
    command groups, and the pointer to ``runsc flags`` (pure).
    """
    text = release.top_level_help
    first = text.index("\n") + 1
    groups = text[text.index("Subcommands"):text.index("Additional help topics")]
    return text[:first] + "\n" + groups + '\nUse "runsc flags" for a list of top-level flags\n'


def command_help(release: Release, name: str, *, via_help_command: bool) -> str:
    """`runsc help <name>` (`via_help_command`) or the usage a bad flag of it prints."""
    cmd = release.commands[name]
    if not via_help_command:
        return cmd.help_output
    if cmd.help_via_help_command != cmd.help_output:
        return cmd.help_via_help_command
    # Wrapped releases add the same -h/-help entries to every command; the
    # file renders them for the others but not for nvproxy: take them from start.
    start = release.commands.get("start")
    if start is not None and start.help_via_help_command.startswith(start.help_output):
        return cmd.help_output + start.help_via_help_command[len(start.help_output):]
    return cmd.help_output


_VERB = re.compile(r"%([#+]?)([vsdqwTx%])")


def go_quote(value: object) -> str:
    """Go's %q of a string (strconv.Quote; exact for ASCII text)."""
    return json.dumps(str(value), ensure_ascii=False)


def go_sprintf(fmt: str, *args: object) -> str:
    """`fmt` with Go's verbs (%v %s %d %q %w %x %T %%, with # or +) filled in (pure)."""
    values = iter(args)

    def fill(m: re.Match[str]) -> str:
        flag, verb = m.group(1), m.group(2)
        if verb == "%":
            return "%"
        value = next(values, "%!" + verb + "(MISSING)")
        if verb == "q" or (verb == "v" and flag == "#" and isinstance(value, str)):
            return go_quote(value)
        if verb == "x" and isinstance(value, int):
            return ("0x" if flag == "#" else "") + format(value, "x")
        if verb == "T":
            return type(value).__name__
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return _VERB.sub(fill, fmt)
