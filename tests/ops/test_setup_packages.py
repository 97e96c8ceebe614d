"""The set-up's package steps on every recorded Debian release, from that release's real
package layout (tests/fixtures/setup/debian-<N>/, replayed by tests/support/apt_replay.py).

Issue 36: Debian 13 moved promtool out of `prometheus` into a package of its own, and the
set-up, which assumed Debian 12's layout, stopped both README commands there. These run the
set-up's own scripts against each release's recorded apt answers and .deb listings, so the
next release's difference fails a test here rather than a user's first command.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.apt_replay import candidate, make_bin, releases

REPO = Path(__file__).resolve().parents[2]
BOOTSTRAP = REPO / "scripts" / "bootstrap.sh"
RELEASES = {r.name: r for r in releases()}

# Where promtool comes from on each release, as the set-up must take it: installed when a
# package holds it alone (no server), otherwise unpacked from the downloaded server package.
PROMTOOL_ROUTE = {"debian-12": ("download", "prometheus"), "debian-13": ("install", "promtool")}
# Where runsc 0.0~20240729 or newer comes from: the release's own package, or backports.
RUNSC_ROUTE = {"debian-12": "backports", "debian-13": "install"}

needs_dpkg_deb = pytest.mark.skipif(shutil.which("dpkg-deb") is None,
                                    reason="no dpkg-deb here to rebuild the recorded packages")


def bootstrap_arrays() -> dict[str, list[str]]:
    """APT_PACKAGES and OPTIONAL_APT_PACKAGES as the script writes them, plus the packages
    it adds when the machine's python lacks venv."""
    text = BOOTSTRAP.read_text()
    arrays = {m.group(1): m.group(2).split()
              for m in re.finditer(r"^(\w*APT_PACKAGES)=\(([^)]*)\)", text, re.M)}
    arrays["added"] = sorted({p for m in re.finditer(r"APT_PACKAGES\+=\(([^)]*)\)", text)
                              for p in m.group(1).split()})
    return arrays


def test_every_recorded_release_has_its_expected_routes() -> None:
    # A release recorded without saying here how it gets promtool and runsc is a gap.
    assert set(RELEASES) == set(PROMTOOL_ROUTE) == set(RUNSC_ROUTE), sorted(RELEASES)


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_every_package_the_set_up_asks_for_exists_on_the_release(release: str) -> None:
    arrays = bootstrap_arrays()
    assert {"gcc", "busybox-static", "nftables"} <= set(arrays["APT_PACKAGES"])
    assert {"podman", "mmdebstrap"} <= set(arrays["OPTIONAL_APT_PACKAGES"])
    wanted = arrays["APT_PACKAGES"] + arrays["OPTIONAL_APT_PACKAGES"] + arrays["added"]
    absent = [p for p in wanted if candidate(RELEASES[release], p) is None]
    assert not absent, f"{release}: apt has no candidate for {absent}"


class Scripted:
    """One set-up script run in a copy of the repository's scripts dir, with apt replaying
    `release` and nothing but the replay and the real tools on PATH."""

    def __init__(self, release: Path, tmp: Path) -> None:
        self.repo = tmp / "repo"
        (self.repo / "scripts").mkdir(parents=True)
        self.venv = tmp / "venv"
        self.root = tmp / "apt-root"  # what an apt-get install puts in place
        (self.root / "usr" / "bin").mkdir(parents=True)
        self.log = tmp / "apt.log"
        self.bin = make_bin(release, tmp / "bin")

    def run(self, script: str) -> subprocess.CompletedProcess[str]:
        shutil.copy(REPO / "scripts" / script, self.repo / "scripts" / script)
        env = {"PATH": f"{self.bin}:{self.root}/usr/bin", "ATEOM_VENV": str(self.venv),
               "APT_REPLAY_LOG": str(self.log), "APT_REPLAY_ROOT": str(self.root),
               "LANG": "C.UTF-8"}
        return subprocess.run(["bash", str(self.repo / "scripts" / script)], env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    def apt_calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def installs(self) -> list[str]:
        return [c for c in self.apt_calls() if c.startswith("apt-get") and " install " in c]


def version_of(tool: Path) -> str:
    return subprocess.run([str(tool), "--version"], capture_output=True, text=True,
                          check=True).stdout.strip()


@needs_dpkg_deb
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_promtool_comes_from_whichever_package_holds_it_and_no_server_is_installed(
        release: str, tmp_path: Path) -> None:
    route, package = PROMTOOL_ROUTE[release]
    version = candidate(RELEASES[release], package)
    assert version is not None
    setup = Scripted(RELEASES[release], tmp_path)
    done = setup.run("install_promtool.sh")
    assert done.returncode == 0, done.stderr
    assert "going on without promtool" not in done.stderr, done.stderr
    # Never the server: no install of prometheus, whatever the route.
    assert not [c for c in setup.installs() if "prometheus" in c], setup.apt_calls()
    if route == "install":
        assert setup.installs() == [
            "apt-get install -y -qq --no-install-recommends promtool"], setup.apt_calls()
        promtool = setup.root / "usr" / "bin" / "promtool"
        assert not (setup.venv / "bin" / "promtool").exists()
    else:
        assert setup.installs() == [], setup.apt_calls()
        assert f"apt-get -o APT::Sandbox::User=root download -qq {package}={version}" \
            in setup.apt_calls()
        promtool = setup.venv / "bin" / "promtool"
        assert promtool.resolve() == (setup.repo / ".cache" / f"promtool-{version}" / "usr"
                                      / "bin" / "promtool")
        # Only promtool was unpacked from the server's package, and the download is gone.
        unpacked = setup.repo / ".cache" / f"promtool-{version}"
        assert sorted(str(p.relative_to(unpacked)) for p in unpacked.rglob("*")
                      if p.is_file()) == ["usr/bin/promtool"]
        assert not (setup.repo / ".cache" / "promtool-download").exists()
    upstream = version.rsplit("-", 1)[0]
    assert version_of(promtool) == f"promtool version {upstream}"


@needs_dpkg_deb
def test_a_release_whose_prometheus_holds_no_promtool_is_said_and_the_set_up_goes_on(
        tmp_path: Path) -> None:
    # Debian 13's real layout as the old set-up saw it (it never asked for `promtool`):
    # the server's package without promtool in it. Said, exit 0, nothing half-made.
    release = tmp_path / "debian-13-no-promtool-package"
    shutil.copytree(RELEASES["debian-13"], release)
    (release / "policy" / "promtool.txt").write_text("")
    setup = Scripted(release, tmp_path / "run")
    done = setup.run("install_promtool.sh")
    assert done.returncode == 0, done.stderr
    version = candidate(release, "prometheus")
    assert (f"prometheus {version} holds no ./usr/bin/promtool" in done.stderr
            and "going on without promtool: the metrics exposition lint" in done.stderr
            and "will not run" in done.stderr), done.stderr
    assert setup.installs() == []
    assert not (setup.venv / "bin" / "promtool").exists()
    assert not list((setup.repo / ".cache").glob("promtool-*"))


@needs_dpkg_deb
def test_a_release_with_neither_package_is_said_and_the_set_up_goes_on(tmp_path: Path) -> None:
    release = tmp_path / "debian-none"
    shutil.copytree(RELEASES["debian-12"], release)
    for name in ("promtool", "prometheus"):
        (release / "policy" / f"{name}.txt").write_text("")
    setup = Scripted(release, tmp_path / "run")
    done = setup.run("install_promtool.sh")
    assert done.returncode == 0, done.stderr
    assert "apt has neither a promtool nor a prometheus package here" in done.stderr
    assert "apt-get update -qq" in setup.apt_calls()  # asked again after a refresh


@needs_dpkg_deb
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_runsc_of_20240729_or_newer_comes_from_the_release_or_its_backports(
        release: str, tmp_path: Path) -> None:
    setup = Scripted(RELEASES[release], tmp_path)
    done = setup.run("install_runsc.sh")
    assert done.returncode == 0, done.stderr
    if RUNSC_ROUTE[release] == "install":
        assert setup.installs() == [
            "apt-get install -y -qq --no-install-recommends runsc"], setup.apt_calls()
        runsc = setup.root / "usr" / "bin" / "runsc"
    else:
        # The release's own runsc is too old: fetched from backports, privately.
        own = candidate(RELEASES[release], "runsc")
        assert own is not None and own.startswith("0.0~2022")
        assert setup.installs() == [], setup.apt_calls()
        version = candidate(RELEASES[release], "runsc", backports=True)
        assert version is not None
        assert any(c.endswith(f"download -qq runsc={version}") for c in setup.apt_calls())
        runsc = setup.venv / "bin" / "runsc"
        assert runsc.resolve() == (setup.repo / ".cache" / f"runsc-{version}" / "usr" / "bin"
                                   / "runsc")
    assert version_of(runsc) == "runsc version 0.0~20240729.0"
