#!/usr/bin/env bash
# Make sure Prometheus' own checker, promtool, is there for the metrics test (as root).
#
# The test runs `promtool check metrics` on ateom's exposition. Which Debian package holds
# promtool depends on the release, so the script asks apt rather than assuming:
#   - a `promtool` package (Debian 13 and later: promtool alone, depending only on libc6):
#     apt-get install'ed, which adds no Prometheus server;
#   - otherwise the `prometheus` package (Debian 12: promtool inside the server's package),
#     whose install would add a Prometheus server (and under systemd start it): so it is
#     only downloaded, and promtool alone, when the package holds one, is unpacked into
#     .cache/promtool-<version>/ and linked as $VENV/bin/promtool (scripts/venv.sh puts it
#     first on PATH). Nothing of the system's package state changes on this path.
# A promtool on PATH or in $VENV/bin already is kept. promtool serves one test: when this
# script cannot get it (no root, no apt, no package holds it, a download fails) it says why
# and exits 0, the set-up goes on, and that test says plainly that it did not run.
# ATEOM_SKIP_PROMTOOL_INSTALL=1 leaves it alone.
set -uo pipefail
cd "$(dirname "$0")/.."

VENV=${ATEOM_VENV:-.venv}
CACHE=.cache

[ "${ATEOM_SKIP_PROMTOOL_INSTALL:-}" = 1 ] && exit 0
if [ -x "$VENV/bin/promtool" ] || command -v promtool >/dev/null 2>&1; then
    exit 0
fi
cannot() { # cannot REASON: say so; the set-up goes on without promtool
    echo "install_promtool: $1; going on without promtool: the metrics exposition lint" \
         "(tests/ops/test_metrics.py) will not run" >&2
    exit 0
}
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
    cannot "needs root and apt to fetch promtool"
fi

candidate() { # candidate PACKAGE: apt's candidate version, empty when none
    apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p' | grep -vx '(none)'
}
if [ -z "$(candidate promtool)$(candidate prometheus)" ]; then
    apt-get update -qq || cannot "apt-get update failed"
fi

version=$(candidate promtool)
if [ -n "$version" ]; then
    echo "install_promtool: apt-get install promtool ($version; promtool alone, no server)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends promtool \
        >/dev/null || cannot "apt-get install promtool=$version failed"
    command -v promtool >/dev/null 2>&1 || cannot "the promtool package installed no promtool on PATH"
    exit 0
fi

version=$(candidate prometheus)
[ -n "$version" ] || cannot "apt has neither a promtool nor a prometheus package here"
dest=$PWD/$CACHE/promtool-$version
work=$PWD/$CACHE/promtool-download
rm -rf "$work" "$dest.tmp"
mkdir -p "$work" "$dest.tmp"
echo "install_promtool: promtool from Debian's prometheus $version (download only)" >&2
(cd "$work" && apt-get -o APT::Sandbox::User=root download -qq "prometheus=$version") \
    || cannot "apt-get download prometheus=$version failed"
deb=$(ls "$work"/prometheus_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || cannot "apt-get download prometheus=$version left no .deb"
# Asked of the .deb itself, not assumed: Debian 13 moved promtool out of this package.
listing=$(dpkg-deb -c "$deb") || cannot "dpkg-deb cannot list $deb"
if ! grep -q ' \./usr/bin/promtool$' <<<"$listing"; then
    rm -rf "$work" "$dest.tmp"
    cannot "prometheus $version holds no ./usr/bin/promtool (a release that packs it apart?)"
fi
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dest.tmp" ./usr/bin/promtool \
    || cannot "unpacking promtool from $deb failed"
rm -rf "$work" "$dest"
mv "$dest.tmp" "$dest"
mkdir -p "$VENV/bin"
ln -sfn "$dest/usr/bin/promtool" "$VENV/bin/promtool"
echo "install_promtool: $VENV/bin/promtool -> $dest/usr/bin/promtool" >&2
