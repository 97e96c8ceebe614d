"""The `ateom` command line: one verb per job, each owned by its package.

Each subpackage with a command line exposes ``register(subparsers)``, which
adds its verb(s) and sets ``func`` (taking the parsed args, returning an exit
code) on them. This module only dispatches, so verbs stay next to the code
they drive, and turns an ordinary mistake into one line and its exit code,
never a traceback (docs/operations.md, "Exit codes"):

    0    done: no check failed, the daemon is SERVING, ...
    1    the command ran and what it did or found failed
    2    usage: a flag or its ATEOM_* twin is unknown, missing or malformed
    130  interrupted (SIGINT)
    141  its output was closed early (`ateom cdi resolve ... | head`), as a
         tool killed by SIGPIPE shows
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from ateom import __version__
from ateom.errors import AteomError, UsageError

EXIT_FAILED = 1
EXIT_USAGE = 2  # also what argparse exits with for a flag it does not know
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ateom",
        description="In-worker sandbox launcher: gVisor actors with CDI devices.",
    )
    parser.add_argument("--version", action="version", version=f"ateom {__version__}")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"ateom {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except AteomError as exc:
        print(f"ateom: {exc}", file=sys.stderr)
        return EXIT_FAILED
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
        print(f"ateom: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_FAILED
