"""`ateom serve` with ``--metrics-listen`` wired the way the daemon should wire it.

    python -m tests.ops.metrics_daemon --metrics-listen 127.0.0.1:0 \\
        --metrics-port-file FILE <ateom serve flags...>

The daemon's own command line has no --metrics-listen yet; this launcher is
the two lines it needs (`start_daemon_metrics` before serving, `close` after),
so the e2e test exercises exactly the proposed wiring.
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
    parser.add_argument("--metrics-listen", required=True)
    parser.add_argument("--metrics-port-file", required=True)
    args = parser.parse_args(argv)
    config = daemon_config.from_args(args)
    configure_logging(config.log_format, config.log_level)
    service = AteomService(config)
    metrics_server = start_daemon_metrics(args.metrics_listen, service)
    with open(args.metrics_port_file, "w") as f:
        f.write(str(metrics_server.port))
    try:
        return serve(config, service)
    finally:
        metrics_server.close()


if __name__ == "__main__":
    sys.exit(main())
