#!/bin/sh
# Puts the worker image's runsc at OUT/runsc and says where it came from in
# OUT/runsc.source (copied into the image as /usr/local/share/ateom/runsc.source, and
# printed into the build log). Run by the Dockerfile's runsc stage:
#
#   install-runsc.sh CONTEXT OUT      (env: RUNSC_BINARY, RUNSC_SHA512)
#
# First match wins:
#   RUNSC_BINARY=https://...       downloaded; RUNSC_SHA512 is required (an unchecked
#                                  download would run as root on every GPU node)
#   RUNSC_BINARY=<relative path>   a file in the build context (CONTEXT/<path>; the
#                                  Dockerfile copies deploy/runsc* there)
#   CONTEXT/deploy/runsc           if present (and CONTEXT/deploy/runsc.sha512, if present,
#                                  must match it)
#   Debian's runsc package         of the suite the stage's apt sources name
# RUNSC_SHA512, when set, is checked whatever the source. Any failure stops the build.
set -eu

die() {
    echo "install-runsc: $*" >&2
    exit 1
}

[ $# -eq 2 ] || die "usage: install-runsc.sh CONTEXT OUT"
context=$1
out=$2
binary=${RUNSC_BINARY:-}
sha512=${RUNSC_SHA512:-}
mkdir -p "$out"
rm -f "$out/runsc" "$out/runsc.source"

from_context() {
    # A relative path that stays inside the context: no absolute path, no "..".
    case "/$1/" in
        //*|*/../*|*/./*) die "RUNSC_BINARY=$1: give a path relative to the build context, without '.' or '..'" ;;
    esac
    [ -f "$context/$1" ] || die "RUNSC_BINARY=$1: no such file in the build context (.dockerignore sends only deploy/runsc*)"
    cp "$context/$1" "$out/runsc"
}

download() {
    [ -n "$sha512" ] || die "RUNSC_BINARY=$1 is a URL: give its RUNSC_SHA512 too"
    python3 - "$1" "$out/runsc.part" <<'EOF'
import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=120) as answer, open(sys.argv[2], "wb") as f:
    shutil.copyfileobj(answer, f)
EOF
    mv "$out/runsc.part" "$out/runsc"
}

from_debian() {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runsc >/dev/null
    cp /usr/bin/runsc "$out/runsc"
    version=$(dpkg-query -W -f='${Version}' runsc)
}

case "$binary" in
    https://*)
        download "$binary"
        source="release binary $binary"
        ;;
    *://*)
        die "RUNSC_BINARY=$binary: only https URLs"
        ;;
    "")
        if [ -f "$context/deploy/runsc" ]; then
            from_context deploy/runsc
            source="build-context file deploy/runsc"
            if [ -z "$sha512" ] && [ -f "$context/deploy/runsc.sha512" ]; then
                sha512=$(cut -d' ' -f1 "$context/deploy/runsc.sha512")
                [ -n "$sha512" ] || die "deploy/runsc.sha512 is empty"
            fi
        else
            from_debian
            source="Debian package runsc $version"
        fi
        ;;
    *)
        from_context "$binary"
        source="build-context file $binary"
        ;;
esac

if [ -n "$sha512" ]; then
    echo "$sha512  $out/runsc" | sha512sum -c --status - \
        || die "$source: SHA-512 is $(sha512sum "$out/runsc" | cut -d' ' -f1), not $sha512"
fi
chmod 0755 "$out/runsc"
version_line=$("$out/runsc" --version 2>&1 | head -n 1) || die "$source: runsc --version failed"
# The drivers its nvproxy knows: what a GPU node's driver must be one of.
if drivers=$("$out/runsc" nvproxy list-supported-drivers 2>/dev/null) && [ -n "$drivers" ]; then
    nvproxy="drivers $(echo "$drivers" | sort -V | head -n 1) ... $(echo "$drivers" | sort -V | tail -n 1) ($(echo "$drivers" | wc -l) listed)"
else
    nvproxy="none: this runsc cannot run GPU actors"
fi
{
    echo "source: $source"
    echo "sha512: $(sha512sum "$out/runsc" | cut -d' ' -f1)"
    echo "version: $version_line"
    echo "nvproxy: $nvproxy"
} >"$out/runsc.source"
sed 's/^/runsc for the image: /' "$out/runsc.source"
