"""What one runsc release makes of a command line, before anything runs (pure).

`interpret` reads argv the way that release's ``main`` does: top-level flags
with Go's ``flag`` package (an unknown one: "flag provided but not defined"
plus the commander's usage, exit 2), then ``--version``/``-help``, then the
command. Commands that only print (``help``, ``flags``, ``nvproxy
list-supported-drivers``) and every usage error are answered here, byte for
byte from the release file (an `Answer`); anything else becomes an
`Invocation` for the emulator to run. `real_argv` then drops what the real
runsc behind the emulator lacks: flags absent from its probed surface
(`runsc_real`), computed, not listed by hand.

Streams and exit codes follow ``output_formats`` of the release files,
checked against Debian's binary for 20221219; the newer releases' usage
errors follow ``runsc/cli`` of their source (from release-20260309.0 a bad
command flag is reported by a pre-parse: usage, then "failed to parse flags
for %q: %v", exit 128).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tests.support.runsc_release import (
    FlagParse,
    Release,
    command_help,
    parse_go_flags,
    short_usage,
)

# subcommands.ExitUsageError and util.Fatalf both end the process with 128.
EXIT_FAILURE = 128
# flag.ExitOnError on the top-level FlagSet.
EXIT_FLAG_ERROR = 2


@dataclass(frozen=True, slots=True)
class Answer:
    """What runsc prints and exits with when it runs nothing."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


@dataclass(frozen=True, slots=True)
class Invocation:
    """A command to run: its top-level flags, name, own flags and arguments.

    `command_flags` is None for commands the release file gives no flags for
    (``spec``, ``pause``, ``help <topic>``...): their arguments pass as given.
    """

    global_flags: FlagParse
    command: str
    command_flags: FlagParse | None
    args: tuple[str, ...]

    @property
    def container(self) -> str | None:
        return self.args[0] if self.args else None

    def flag(self, name: str) -> str | None:
        """The command's own flag `name` as given (last wins), or None."""
        return self.command_flags.value(name) if self.command_flags else None

    def command_flag_true(self, name: str) -> bool:
        return bool(self.command_flags and self.command_flags.is_true(name))


def _command_flag_error(release: Release, name: str, parsed: FlagParse) -> Answer:
    """A bad or help flag after `name`, as that release reports it."""
    usage = command_help(release, name, via_help_command=False)
    said = parsed.error + "\n" if parsed.error else ""
    if release.preparses_command_flags:
        why = parsed.error or "flag: help requested"
        return Answer(stderr=f'{said}{usage}failed to parse flags for "{name}": {why}\n',
                      exit_code=EXIT_FAILURE)
    if parsed.help and release.has_help_flag:
        # helpCommandWrapper's own -help: usage with its flags, success.
        return Answer(stderr=command_help(release, name, via_help_command=True))
    return Answer(stderr=said + usage, exit_code=EXIT_FAILURE)


def _help(release: Release, args: Sequence[str]) -> Answer | None:
    """`runsc help [cmd]`; None when the release file cannot render the topic."""
    if not args:
        return Answer(stdout=release.top_level_help)
    if args[0] in release.commands and args[0] not in release.twice_registered:
        return Answer(stdout=command_help(release, args[0], via_help_command=True))
    return None


def _nvproxy(release: Release, args: Sequence[str]) -> Answer:
    """The nested ``nvproxy`` commander (only ``list-supported-drivers`` prints data)."""
    own = parse_go_flags(args, release.commands["nvproxy"].flags)
    if own.error or own.help:
        return _command_flag_error(release, "nvproxy", own)
    if own.rest[:1] == ("list-supported-drivers",):
        # One version per line (sorted ascending from 20240930; the file's
        # order, one Go map order, for 20240422).
        return Answer(stdout="".join(v + "\n" for v in release.supported_drivers))
    return Answer(stderr=release.commands["nvproxy"].usage, exit_code=EXIT_FAILURE)


def interpret(release: Release, argv: Sequence[str]) -> Answer | Invocation:
    """What `release` does with ``runsc <argv>`` up to running a command (pure)."""
    top = parse_go_flags(argv, release.flags)
    if top.error:
        return Answer(stderr=f"{top.error}\n{short_usage(release)}", exit_code=EXIT_FLAG_ERROR)
    if top.help:  # -h/-help undefined here: flag.ErrHelp, usage, exit 0
        return Answer(stderr=short_usage(release))
    if release.has_help_flag and (top.is_true("help") or top.is_true("h")):
        return Answer(stdout=release.top_level_help)
    if top.is_true("version"):
        return Answer(stdout=release.version_output)
    if not top.rest or top.rest[0] not in release.top_level_commands:
        return Answer(stderr=short_usage(release), exit_code=EXIT_FAILURE)
    name, rest = top.rest[0], top.rest[1:]
    if name == "flags":
        return Answer(stderr=release.flags_output)
    if name == "help":
        return _help(release, rest) or Invocation(top, name, None, rest)
    if name == "nvproxy" and name in release.commands:
        return _nvproxy(release, rest)
    if name not in release.commands:
        return Invocation(top, name, None, rest)
    own = parse_go_flags(rest, release.commands[name].flags)
    if own.error or own.help:
        return _command_flag_error(release, name, own)
    return Invocation(top, name, own, own.rest)


@dataclass(frozen=True, slots=True)
class RealCall:
    """The argv (after ``runsc``) for the real runsc, and what was left out."""

    argv: tuple[str, ...]
    stripped: tuple[str, ...]  # "nvproxy", "restore:background" (ateom's probe names)


def real_argv(inv: Invocation, real: Release, *,
              drop_global: Sequence[str] = ()) -> RealCall:
    """`inv` for the real runsc: flags that build lacks left out (pure).

    `drop_global` removes flags the real build has too (e.g. ``log`` for the
    emulator's own helper calls).
    """
    argv: list[str] = []
    stripped: list[str] = []
    for use in inv.global_flags.used:
        if use.name in real.flags and use.name not in drop_global:
            argv += use.tokens
        elif use.name not in drop_global:
            stripped.append(use.name)
    argv.append(inv.command)
    if inv.command_flags is not None:
        known = real.commands.get(inv.command)
        for use in inv.command_flags.used:
            if known is not None and use.name in known.flags:
                argv += use.tokens
            else:
                stripped.append(f"{inv.command}:{use.name}")
        if inv.command_flags.terminated:
            argv.append("--")
    argv += inv.args
    return RealCall(tuple(argv), tuple(stripped))
