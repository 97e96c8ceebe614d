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
# Always (re)install this tree in editable mode: a fresh clone must not run an
# older checkout's code through the `ateom` console script.
if ! "$PYTHON" -m pip install -q --disable-pip-version-check --no-build-isolation -e '.[test]' 2>/dev/null; then
    "$PYTHON" -m pip install -q --disable-pip-version-check -e '.[test]'
fi
