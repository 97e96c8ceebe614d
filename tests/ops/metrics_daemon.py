"""`ateom serve` with ``--metrics-listen`` wired the way the daemon should wire it.

    python -m tests.ops.metrics_daemon <ateom serve flags...> --metrics-listen HOST:PORT

Used by the e2e test only while `ateom serve` lacks --metrics-listen: it is the
two lines the daemon needs (`start_daemon_metrics` before serving, `close`
after), so the test exercises exactly that wiring either way.
"""

from __future__ import annotations

import argparse
import sys

from ateom.daemon import config as daemon_config
from ateom.daemon.logs import configure_logging
from ateom.daemon.server import serve
from ateom.daemon.service import AteomService
from ateom.metrics import start_daemon_metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="metrics_daemon")
    daemon_config.add_flags(parser)
    if not any(flag == "--metrics-listen" for flag, *_ in daemon_config._FLAGS):
        parser.add_argument("--metrics-listen", required=True)
    args = parser.parse_args(argv)
    listen = args.metrics_listen
    args.metrics_listen = None  # a daemon that has the flag must not serve it twice
    config = daemon_config.from_args(args)
    configure_logging(config.log_format, config.log_level)
    service = AteomService(config)
    metrics_server = start_daemon_metrics(listen, service)
    try:
        return serve(config, service)
    finally:
        metrics_server.close()


if __name__ == "__main__":
    sys.exit(main())
