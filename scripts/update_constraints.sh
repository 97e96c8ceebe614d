#!/usr/bin/env bash
# Re-resolve the project's dependencies from nothing (newest versions its bounds in
# pyproject.toml allow) and write them to constraints.txt, which the set-up installs.
# Run the whole suite on Debian 12 and 13 before committing the result.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
{
    sed -n '1,/^[^#]/{/^#/p}' constraints.txt
    "$tmp/venv/bin/python" -m pip freeze --exclude-editable | grep -v '^-e \|^ateom'
} > constraints.txt.new
mv constraints.txt.new constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) packages pinned" >&2
