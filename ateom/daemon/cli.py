"""`ateom serve`: run the daemon."""

from __future__ import annotations

import argparse
from typing import Any

import structlog

from ateom.daemon.lifecycle import config as daemon_config
from ateom.errors import AteomError, UsageError


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="run the daemon (gRPC on a unix socket)",
        description="Serve the ateom gRPC API: run actors' sandboxes under runsc with their"
        " CDI devices. Every flag has an ATEOM_* environment twin.",
    )
    daemon_config.add_flags(parser)
    parser.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    # Imported here, not for a cycle: every `ateom` verb registers through this
    # module, and importing grpc's server is most of the daemon's start-up, which
    # the other verbs skip.
    from ateom.daemon.logs import configure_logging
    from ateom.daemon.rpc.server import serve

    try:
        config = daemon_config.from_args(args)
    except AteomError as exc:  # everything it checks is a flag or its twin
        raise UsageError(str(exc)) from None
    configure_logging(config.log_format, config.log_level)
    try:
        return serve(config)
    except (AteomError, OSError) as exc:
        if config.log_format != "json":
            raise  # ateom.cli says it in one plain line, as the console log reads
        # Once the log runs, a fatal error is one more of its JSON lines on stdout, not
        # a plain line on stderr after them: a log pipeline reads it like the rest.
        code = exc.code.value if isinstance(exc, AteomError) else "OSError"
        where = f": {exc.filename}" if isinstance(exc, OSError) and exc.filename else ""
        error = str(exc) if isinstance(exc, AteomError) else f"{exc.strerror or exc}{where}"
        structlog.get_logger("ateom.daemon").error("serve_failed", error=error, code=code)
        return 1
