"""gRPC calls the way an operator makes them: grpcurl over a daemon's unix socket.

grpcurl prints a reply's fields by their JSON names (camelCase) or their proto
names depending on its version; `call` gives proto names either way.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

GRPCURL = shutil.which("grpcurl")


def grpcurl(socket: str | Path, method: str, body: dict[str, Any], *, timeout: float = 180
            ) -> subprocess.CompletedProcess[str]:
    """`method` with `body` over the unix socket `socket` (never raises on its exit)."""
    return subprocess.run([GRPCURL or "grpcurl", "-plaintext", "-unix", "-d", json.dumps(body),
                           str(socket), method],
                          capture_output=True, text=True, timeout=timeout, check=False)


def snake(value: Any) -> Any:
    """A grpcurl reply with every field by its proto name."""
    if isinstance(value, dict):
        return {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): snake(v) for k, v in value.items()}
    if isinstance(value, list):
        return [snake(v) for v in value]
    return value


def call(socket: str | Path, method: str, body: dict[str, Any]) -> dict[str, Any]:
    """`method`'s reply (proto names); fails the test, with grpcurl's stderr, if refused."""
    done = grpcurl(socket, method, body)
    assert done.returncode == 0, f"{method}: {done.stderr}"
    reply: dict[str, Any] = snake(json.loads(done.stdout or "{}"))
    return reply
