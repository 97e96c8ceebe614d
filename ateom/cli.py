"""The `ateom` command line: one verb per job, each owned by its package.

Each subpackage with a command line exposes ``register(subparsers)``, which
adds its verb(s) and sets ``func`` (taking the parsed args, returning an exit
code) on them. This module only dispatches, so verbs stay next to the code
they drive.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ateom import __version__
from ateom.errors import AteomError

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
    except AteomError as exc:
        print(f"ateom: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
