#!/usr/bin/env bash
# Install everything ateom, its demo and its tests need, on a fresh Debian/Ubuntu machine
# (as root): apt packages, a project virtualenv (.venv) with ateom in editable mode, then
# a runsc of 0.0~20240729 or newer (scripts/install_runsc.sh: Debian 13's package, or on
# Debian 12 the bookworm-backports one, fetched without touching the system's apt sources)
# and Prometheus' promtool for the metrics test (scripts/install_promtool.sh: from
# whichever package holds it on this release, no Prometheus server installed).
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

# What the daemon and its suite cannot do without: a failure here stops the set-up.
# nftables: Debian 13's podman builds a RUN step through netavark, which only
# *recommends* nftables yet fails without `nft` (Debian 12's podman uses the CNI plugins,
# which depend on iptables). iproute2: `ip`, for the tests that stand a worker Pod's
# network namespace up (a minimal Debian 13 has none).
# Installed without Recommends: each package's Recommends were checked against what the
# tests use, and this list is what they need (tests/ops/test_setup.py checks it here,
# tests/ops/test_setup_packages.py against each release's recorded package index).
APT_PACKAGES=(runc busybox-static gcc libc6-dev procps iproute2 nftables)
# Optional helpers: podman and mmdebstrap serve only the worker image tests, which build
# the Dockerfile from a base image made from Debian's archive (tests/ops/test_worker_image.py);
# squid-openssl is the real CONNECT proxy (with a TLS port) the egress relay's tests
# carry actors' connections through (tests/dataplane/test_egress.py).
# When they cannot be installed the set-up says so and goes on; that test then says it did
# not run. promtool (scripts/install_promtool.sh, below) is optional in the same way.
OPTIONAL_APT_PACKAGES=(podman mmdebstrap squid-openssl)
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    PYTHON=python3
    APT_PACKAGES+=(python3 python3-venv)
elif [ ! -x "$VENV/bin/python" ] && ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) apart from python3.
    APT_PACKAGES+=(python3-venv)
fi

not_installed() { # not_installed PACKAGE...: those dpkg does not have installed
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
    done
}
apt_install() { # apt_install PACKAGE...
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
mapfile -t missing < <(not_installed "${APT_PACKAGES[@]}")
mapfile -t optional < <(not_installed "${OPTIONAL_APT_PACKAGES[@]}")
if ((${#missing[@]} + ${#optional[@]})); then
    if [ "$(id -u)" -ne 0 ]; then
        if ((${#missing[@]})); then
            echo "bootstrap: need root to apt-get install: ${missing[*]}" >&2
            exit 1
        fi
        echo "bootstrap: not root, so not installing the optional ${optional[*]};" \
             "going on: the tests that need them say they did not run" >&2
        optional=()
    fi
    apt-get update -qq
    if ((${#missing[@]})); then
        echo "bootstrap: apt-get install ${missing[*]}" >&2
        apt_install "${missing[@]}"
    fi
    if ((${#optional[@]})); then
        echo "bootstrap: apt-get install ${optional[*]} (optional)" >&2
        apt_install "${optional[@]}" || echo "bootstrap: could not install the optional" \
            "${optional[*]} (above); going on: the tests that need them say they did not run" >&2
    fi
fi

# A venv left by another python (or half-made) is made again.
if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' >/dev/null 2>&1; then
    echo "bootstrap: python venv $VENV (from $(command -v "$PYTHON"))" >&2
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
bash scripts/install_runsc.sh
# Optional: it says why when it cannot, and exits 0; an unforeseen failure is said here.
bash scripts/install_promtool.sh || echo "bootstrap: scripts/install_promtool.sh failed" \
    "(above); going on: the metrics exposition lint will not run" >&2
