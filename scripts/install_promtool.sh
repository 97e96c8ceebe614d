#!/usr/bin/env bash
# Make sure Prometheus' own checker, promtool, is there for the metrics test (as root).
#
# The test runs `promtool check metrics` on ateom's exposition. promtool comes in Debian's
# `prometheus` package, whose install would also add a Prometheus server (and, under
# systemd, start it): so the package is only downloaded with the system's apt lists, and
# promtool alone is unpacked into .cache/promtool-<version>/ and linked as $VENV/bin/promtool
# (scripts/venv.sh puts it first on PATH). Nothing of the system's package state changes.
#   - a promtool on PATH or in $VENV/bin already: kept;
#   - no apt (not Debian or Ubuntu), or no `prometheus` candidate: said, and the metrics
#     test says plainly that it did not run.
# ATEOM_SKIP_PROMTOOL_INSTALL=1 leaves it alone.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${ATEOM_VENV:-.venv}
CACHE=.cache

[ "${ATEOM_SKIP_PROMTOOL_INSTALL:-}" = 1 ] && exit 0
if [ -x "$VENV/bin/promtool" ] || command -v promtool >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
    echo "install_promtool: needs root and apt to fetch promtool; the metrics exposition" \
         "test will not run" >&2
    exit 0
fi

candidate() { apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: //p'; }
version=$(candidate)
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    apt-get update -qq
    version=$(candidate)
fi
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    echo "install_promtool: apt has no prometheus package here; the metrics exposition" \
         "test will not run" >&2
    exit 0
fi

dest=$PWD/$CACHE/promtool-$version
work=$PWD/$CACHE/promtool-download
rm -rf "$work" "$dest.tmp"
mkdir -p "$work" "$dest.tmp"
echo "install_promtool: promtool from Debian's prometheus $version (download only)" >&2
(cd "$work" && apt-get -o APT::Sandbox::User=root download -qq "prometheus=$version")
dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -C "$dest.tmp" ./usr/bin/promtool
rm -rf "$work" "$dest"
mv "$dest.tmp" "$dest"
mkdir -p "$VENV/bin"
ln -sfn "$dest/usr/bin/promtool" "$VENV/bin/promtool"
echo "install_promtool: $VENV/bin/promtool -> $dest/usr/bin/promtool" >&2
