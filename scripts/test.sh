#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: lint, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. scripts/venv.sh
"$PYTHON" -m ruff check ateom tests benchmarks scripts
"$PYTHON" -m mypy
exec "$PYTHON" -m pytest -q "$@"
