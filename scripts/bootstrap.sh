#!/usr/bin/env bash
# Install everything ateom, its demo and its tests need, on a fresh Debian machine (as root).
# Idempotent: skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(runsc runc busybox-static gcc libc6-dev procps)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootstrap: need root to apt-get install: ${missing[*]}" >&2
        exit 1
    fi
    echo "bootstrap: apt-get install ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import ateom, pytest, hypothesis, grpc_tools' 2>/dev/null \
        || [ pyproject.toml -nt "$("$PYTHON" -c 'import ateom,os;print(os.path.dirname(ateom.__file__))' 2>/dev/null || echo /)" ]; then
    echo "bootstrap: pip install -e .[test]" >&2
    "$PYTHON" -m pip install -q --disable-pip-version-check -e '.[test]'
fi
