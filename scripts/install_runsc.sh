#!/usr/bin/env bash
# Make sure a runsc of 0.0~20240729 or newer is what the project runs (as root).
#
# Why that build: Debian's 0.0~20240729 is the oldest Debian runsc that restores a
# multi-container sandbox (every GPU actor is one: a root `_pause` plus the app) and
# has --nvproxy; Debian 12's own 0.0~20221219 has neither.
#
#   - a runsc on $PATH that new already: kept;
#   - the distribution's apt candidate that new (Debian 13's own package): apt-get install;
#   - otherwise (Debian 12): the package from <codename>-backports, fetched with a private
#     apt configuration (its own sources list, lists and cache under .cache/apt-backports,
#     the system's keyring for the signature) and unpacked into .cache/runsc-<version>/.
#     Nothing of the system's apt sources or package state changes; the binary is linked
#     as $VENV/bin/runsc, which the scripts put first on PATH (scripts/venv.sh).
# ATEOM_SKIP_RUNSC_INSTALL=1 leaves runsc alone.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${ATEOM_VENV:-.venv}
MIN_DATE=20240729
CACHE=.cache
MIRROR=${ATEOM_DEBIAN_MIRROR:-http://deb.debian.org/debian}

[ "${ATEOM_SKIP_RUNSC_INSTALL:-}" = 1 ] && exit 0

runsc_date() { # runsc_date BINARY: the release date in its --version (0 when none)
    "$1" --version 2>/dev/null | sed -n 's/.*runsc version [^0-9]*\(20[0-9]\{6\}\).*/\1/p;
        s/.*runsc version 0\.0~\(20[0-9]\{6\}\).*/\1/p' | head -n 1 | grep . || echo 0
}
deb_date() { # deb_date VERSION: 0.0~20240729.0-4~bpo12+2 -> 20240729
    sed -n 's/^0\.0~\(20[0-9]\{6\}\).*/\1/p' <<<"$1" | grep . || echo 0
}

for candidate in "$VENV/bin/runsc" "$(command -v runsc || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && [ "$(runsc_date "$candidate")" -ge "$MIN_DATE" ]; then
        exit 0
    fi
done
if [ "$(id -u)" -ne 0 ]; then
    echo "install_runsc: need root to install runsc $MIN_DATE or newer" >&2
    exit 1
fi

apt_candidate() { apt-cache policy runsc 2>/dev/null | sed -n 's/^ *Candidate: //p'; }
candidate=$(apt_candidate)
if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
    apt-get update -qq
    candidate=$(apt_candidate)
fi
if [ -n "$candidate" ] && [ "$candidate" != "(none)" ] && [ "$(deb_date "$candidate")" -ge "$MIN_DATE" ]; then
    echo "install_runsc: apt-get install runsc ($candidate)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runsc >/dev/null
    exit 0
fi

# The distribution's own runsc is older: take the backports build, privately.
. /etc/os-release
codename=${VERSION_CODENAME:-}
if [ "${ID:-}" != debian ] || [ -z "$codename" ]; then
    echo "install_runsc: no runsc $MIN_DATE or newer in apt here (candidate: ${candidate:-none})," \
         "and this is not Debian (no backports to take it from): install a runsc release" \
         "and put it on PATH, or set ATEOM_SKIP_RUNSC_INSTALL=1" >&2
    exit 1
fi
apt_dir=$PWD/$CACHE/apt-backports
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
cat >"$apt_dir/backports.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $codename-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_private=(-o "Dir::Etc::SourceList=$apt_dir/backports.sources" -o "Dir::Etc::SourceParts=-"
             -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir"
             -o "Dir::Cache::Archives=$apt_dir/archives" -o "Dir::State::Status=/dev/null"
             -o "APT::Sandbox::User=root")
echo "install_runsc: Debian's runsc is ${candidate:-absent}; fetching runsc from" \
     "$codename-backports (private apt config in $CACHE/apt-backports; system sources untouched)" >&2
apt-get "${apt_private[@]}" update -qq
version=$(apt-cache "${apt_private[@]}" policy runsc | sed -n 's/^ *Candidate: //p')
if [ -z "$version" ] || [ "$version" = "(none)" ] || [ "$(deb_date "$version")" -lt "$MIN_DATE" ]; then
    echo "install_runsc: $codename-backports has no runsc $MIN_DATE or newer (found: ${version:-none})" >&2
    exit 1
fi
(cd "$apt_dir/archives" && apt-get "${apt_private[@]}" download -qq "runsc=$version")
deb=$(ls "$apt_dir/archives"/runsc_*"$(sed 's/:/%3a/' <<<"${version}")"_*.deb | head -n 1)
dest=$PWD/$CACHE/runsc-$version
rm -rf "$dest.tmp"
dpkg-deb -x "$deb" "$dest.tmp"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
mkdir -p "$VENV/bin"
ln -sfn "$dest/usr/bin/runsc" "$VENV/bin/runsc"
echo "install_runsc: $VENV/bin/runsc -> $dest/usr/bin/runsc ($("$dest/usr/bin/runsc" --version | head -n 1))" >&2
