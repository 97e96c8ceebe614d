#!/usr/bin/env bash
# Install everything ateom, its demo and its tests need, on a fresh Debian/Ubuntu machine
# (as root): apt packages, a project virtualenv (.venv) with ateom in editable mode, then
# a runsc of 0.0~20240729 or newer (scripts/install_runsc.sh: Debian 13's package, or on
# Debian 12 the bookworm-backports one, fetched without touching the system's apt sources)
# and Prometheus' promtool for the metrics test (scripts/install_promtool.sh: unpacked
# from the downloaded package, no Prometheus server installed).
#
# A virtualenv, not the system python's site-packages: stock Debian 12/13 and Ubuntu 24.04
# mark their python3 "externally managed" (PEP 668) and refuse `pip install`. Every
# script runs ateom through .venv (scripts/venv.sh puts it first on PATH).
# Idempotent: skips what is already there; always re-installs this tree (a fresh clone
# must not run an older checkout's code through the `ateom` console script).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${ATEOM_VENV:-.venv}

# podman, mmdebstrap: the worker image test builds the Dockerfile from a base image made
# from Debian's archive (tests/ops/test_worker_image.py). nftables: Debian 13's podman
# networks a build's RUN step through netavark, which only *recommends* nftables yet
# fails without `nft` (Debian 12's podman uses the CNI plugins, which depend on iptables).
# Installed without Recommends: each package's Recommends were checked against what the
# tests use, and this list is what they need (tests/ops/test_setup.py checks it).
APT_PACKAGES=(runc busybox-static gcc libc6-dev procps podman mmdebstrap nftables)
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    PYTHON=python3
    APT_PACKAGES+=(python3 python3-venv)
elif [ ! -x "$VENV/bin/python" ] && ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) apart from python3.
    APT_PACKAGES+=(python3-venv)
fi

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

# A venv left by another python (or half-made) is made again.
if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' >/dev/null 2>&1; then
    echo "bootstrap: python venv $VENV (from $(command -v "$PYTHON"))" >&2
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
bash scripts/install_runsc.sh
bash scripts/install_promtool.sh
