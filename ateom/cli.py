"""The `ateom` command line: one verb per job, each owned by its package.

Each subpackage with a command line exposes ``register(subparsers)``, which
adds its verb(s) and sets ``func`` (taking the parsed args, returning an exit
code) on them. This module only dispatches, so verbs stay next to the code
they drive, and turns an ordinary mistake into one line and its exit code,
never a traceback (docs/operations.md, "Exit codes and output"); with ``--json``, into one
JSON object on stdout instead (``{"error": ..., "exit_code": ...}``):

    0    done: no check failed, the daemon is SERVING, ...
    1    the command ran and what it judged failed (a FAIL, NOT_SERVING, an
         invalid spec, a checkpoint not restorable here)
    2    usage: a flag or its ATEOM_* twin is unknown, missing or malformed
    3    unreachable: what it asks did not answer (no daemon on the socket)
    4    bad input: a file or directory it was given is missing, unreadable or
         not what it must be (a corrupt checkpoint record)
    130  interrupted (SIGINT)
    141  its output was closed early (`ateom cdi resolve ... | head`), as a
         tool killed by SIGPIPE shows
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from ateom import __version__
from ateom.errors import AteomError, InputError, UnreachableError, UsageError

EXIT_FAILED = 1
EXIT_USAGE = 2  # also what argparse exits with for a flag it does not know
EXIT_UNREACHABLE = 3
EXIT_BAD_INPUT = 4
EXIT_INTERRUPTED = 130
EXIT_OUTPUT_CLOSED = 141

# Modules that add verbs, in the order `ateom --help` lists them.
_VERB_MODULES = (
    "ateom.cdi.cli",  # ateom cdi validate|devices|resolve
    "ateom.inject.cli",  # ateom inject
    "ateom.daemon.cli",  # ateom serve
    "ateom.doctor.cli",  # ateom doctor
    "ateom.gpuinfo.cli",  # ateom checkpoint-info
)


# Whether the command line being parsed asked for --json (set by `main`): argparse
# reports a usage error before any namespace exists to say so.
_json_errors = False


class _Parser(argparse.ArgumentParser):
    """argparse, with a hint where its message leaves a person guessing, and with
    ``--json`` in the command line the error as JSON on stdout."""

    def error(self, message: str) -> NoReturn:
        if message.endswith("expected one argument"):
            flag = message.removeprefix("argument ").split(":", 1)[0].split("/")[-1]
            message += f" (a value that starts with '-' is written {flag}=VALUE)"
        if _json_errors:
            _print_json_error(f"{self.prog}: {message}", EXIT_USAGE)
            self.exit(EXIT_USAGE)
        super().error(message)


class _VersionAction(argparse.Action):
    """``--version``: ateom's version and commit, and the runsc it would run."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print ateom's version and "
                         "commit and the runsc found ($ATEOM_RUNSC or runsc on PATH), then exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(version_text())
        parser.exit()


def _first_line(argv: Sequence[str], cwd: str | None = None) -> str:
    """The first line `argv` prints, "" if it cannot run or fails (bounded)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False,
                              cwd=cwd, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else ""


def version_text() -> str:
    """``ateom <version> (commit <sha>)`` and ``runsc: <path> (<its --version>)`` (runs
    git, where ateom is a checkout, and runsc)."""
    source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    commit = ""
    if os.path.exists(os.path.join(source, ".git")) and shutil.which("git"):
        commit = _first_line(["git", "rev-parse", "--short=12", "HEAD"], cwd=source)
    runsc_name = os.environ.get("ATEOM_RUNSC") or "runsc"
    runsc = shutil.which(runsc_name)
    if runsc is None:
        found = f"runsc: {runsc_name} not found"
    else:
        said = _first_line([runsc, "--version"])
        found = f"runsc: {runsc} ({said or 'no version: not a runsc?'})"
    return (f"ateom {__version__} (commit {commit or 'unknown: not a git checkout'})\n"
            + found)


def _name_verb_parsers(parser: argparse.ArgumentParser) -> None:
    """Give every verb's parser to its own namespace (``_verb_parser``): a mistake
    after the verb is said with that verb's usage, not the top level's."""
    for action in parser._actions:  # noqa: SLF001 -- argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                sub.set_defaults(_verb_parser=sub)
                _name_verb_parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ateom",
        description="In-worker sandbox launcher: gVisor actors with CDI devices.",
    )
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _VERB_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # Only a verb whose package is absent is skipped; a broken import
            # inside a present package must surface.
            if exc.name is None or not name.startswith(exc.name):
                raise
            continue
        module.register(subparsers)
    for verb in subparsers.choices.values():
        # `ateom serve --version` too: Substrate's workers take --version after
        # their entrypoint, and ateom's image runs `ateom serve` as its entrypoint.
        verb.add_argument("--version", action=_VersionAction)
    _name_verb_parsers(parser)
    return parser


def _print_json_error(message: str, code: int) -> None:
    sys.stdout.write(json.dumps({"error": message, "exit_code": code}) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    global _json_errors
    _json_errors = "--json" in (sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        args._verb_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    as_json = bool(getattr(args, "json", False))

    def failed(message: str, code: int) -> int:
        if as_json:
            _print_json_error(message, code)
        else:
            print(message, file=sys.stderr)
        return code

    try:
        return int(args.func(args))
    except UsageError as exc:
        return failed(f"ateom {args.command}: {exc}", EXIT_USAGE)
    except UnreachableError as exc:
        return failed(f"ateom {args.command}: {exc}", EXIT_UNREACHABLE)
    except InputError as exc:
        return failed(f"ateom {args.command}: {exc}", EXIT_BAD_INPUT)
    except AteomError as exc:
        return failed(f"ateom: {exc}", EXIT_FAILED)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Whoever read the output stopped (`| head`): nothing more to say. Later
        # flushes of stdout go nowhere instead of raising again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OUTPUT_CLOSED
    except OSError as exc:  # a path that is not there, not readable...
        where = f": {exc.filename}" if exc.filename else ""
        return failed(f"ateom: {exc.strerror or exc}{where}", EXIT_FAILED)
