"""apt as one recorded Debian release saw it: stand-in `apt-get`, `apt-cache` and `id`.

The set-up's package steps (`scripts/install_promtool.sh`, `scripts/install_runsc.sh`)
decide from what apt says; this replays what apt said on a fresh root of each release
(`tests/fixtures/setup/debian-<N>/`, see its PROVENANCE.md), so those decisions are tested
on every release's real package layout on any machine. Only apt is replayed: a download's
.deb is built by the real `dpkg-deb -b` from the release's recorded `contents/`, so the
script's own `dpkg-deb` and `tar` run on that layout for real.

One program under three names (`make_bin` links them); what it was called as says which.
Every call is appended to `$APT_REPLAY_LOG` (one line: the argv), an install unpacks the
package into `$APT_REPLAY_ROOT` (whose `usr/bin` the test puts on PATH, as `/usr/bin` is).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SETUP_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "setup"
REAL_TOOLS = ("bash", "sh", "sed", "grep", "head", "tail", "ls", "cat", "rm", "mv", "ln",
              "mkdir", "dirname", "basename", "tar", "dpkg-deb", "gzip", "xz", "zstd", "env",
              "chmod")


def releases() -> list[Path]:
    """Every recorded release dir (`debian-12`, `debian-13`, ...)."""
    return sorted(SETUP_FIXTURES.glob("debian-*"))


def candidate(release: Path, package: str, backports: bool = False) -> str | None:
    """The `Candidate:` the release's recorded `apt-cache policy` gives, None when none."""
    policy = release / "policy" / f"{'backports-' if backports else ''}{package}.txt"
    if not policy.exists():
        return None
    found = re.search(r"^\s*Candidate: (\S+)", policy.read_text(), re.M)
    return None if found is None or found.group(1) == "(none)" else found.group(1)


def make_bin(release: Path, where: Path) -> Path:
    """A bin dir holding the stand-ins for `release` and links to the real tools the
    scripts use, nothing else: a runsc or promtool of the machine running the test must
    not be found."""
    where.mkdir(parents=True, exist_ok=True)
    launcher = where / "apt-replay"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__)} "
                        f"{release} \"${{0##*/}}\" \"$@\"\n")
    launcher.chmod(0o755)
    for name in ("apt-get", "apt-cache", "id"):
        (where / name).symlink_to(launcher)
    for tool in REAL_TOOLS:
        real = shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")
        if real is not None:
            (where / tool).symlink_to(real)
    return where


def build_deb(release: Path, package: str, backports: bool, out_dir: Path) -> Path:
    """The package's .deb, rebuilt with `dpkg-deb -b` from its recorded listing: the same
    paths, modes and links; files empty but for executables, which say what they stand for
    (`runsc version 0.0~20240729.0`, as the real ones begin their --version)."""
    name = f"{'backports-' if backports else ''}{package}.txt"
    control = dict(line.split(": ", 1) for line in
                   (release / "control" / name).read_text().splitlines() if ": " in line)
    version = control["Version"]
    upstream = version.split(":")[-1].rsplit("-", 1)[0]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        (tree / "DEBIAN").mkdir(parents=True)
        (tree / "DEBIAN" / "control").write_text(
            f"Package: {package}\nVersion: {version}\nArchitecture: amd64\n"
            f"Maintainer: replay <replay@invalid>\nDescription: replayed {package}\n")
        for line in (release / "contents" / name).read_text().splitlines():
            mode, path, *link = line.split()
            target = tree / path
            if mode.startswith("d"):
                target.mkdir(parents=True, exist_ok=True)
            elif mode.startswith("l"):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(link[-1])
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                if "x" in mode:
                    target.write_text(f"#!/bin/sh\necho '{target.name} version {upstream}'\n")
                    target.chmod(0o755)
                else:
                    target.write_bytes(b"")
        deb = out_dir / f"{package}_{version.replace(':', '%3a')}_amd64.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(tree), str(deb)],
                       check=True, capture_output=True)
    return deb


def _private_backports(argv: list[str]) -> bool:
    """Whether apt was pointed at install_runsc.sh's private backports sources."""
    return any("backports" in a for a in argv if a.startswith("Dir::Etc::SourceList="))


def _operands(argv: list[str]) -> list[str]:
    """argv less options (and each -o's value)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif not a.startswith("-"):
            out.append(a)
    return out


def main(release: Path, called: str, argv: list[str]) -> int:
    with open(os.environ.get("APT_REPLAY_LOG", os.devnull), "a") as log:
        log.write(" ".join([called, *argv]) + "\n")
    if called == "id":
        print(0)  # the scripts ask `id -u`: root, as the set-up runs
        return 0
    backports = _private_backports(argv)
    verb, *packages = _operands(argv)
    if called == "apt-cache" and verb == "policy":
        for package in packages:
            policy = release / "policy" / f"{'backports-' if backports else ''}{package}.txt"
            if policy.exists():
                sys.stdout.write(policy.read_text())
        return 0
    if called == "apt-get" and verb == "update":
        return 0
    if called == "apt-get" and verb in ("download", "install"):
        for spec in packages:
            package, _, wanted = spec.partition("=")
            have = candidate(release, package, backports)
            if have is None or wanted not in ("", have):
                print(f"E: Unable to locate package {spec}", file=sys.stderr)
                return 100
            if verb == "download":
                build_deb(release, package, backports, Path.cwd())
                continue
            with tempfile.TemporaryDirectory() as tmp:
                deb = build_deb(release, package, backports, Path(tmp))
                root = os.environ["APT_REPLAY_ROOT"]
                subprocess.run(["dpkg-deb", "-x", str(deb), root], check=True)
        return 0
    print(f"apt replay: {called} {' '.join(argv)}: not a call the set-up makes", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:]))
