# Sourced by the scripts after bootstrap.sh: run everything through the project venv.
# shellcheck shell=bash
VENV=${ATEOM_VENV:-.venv}
VENV=$(cd "$VENV" && pwd)
export PATH="$VENV/bin:$PATH"
PYTHON="$VENV/bin/python"
