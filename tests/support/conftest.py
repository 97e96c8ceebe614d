"""Running an emulated runsc in tests: stdio to files, and nothing left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.runsc_emu import EmulatedRunsc, default_real_runsc, real_of
from tests.support.runsc_real import RealRunsc, real_runsc


def _real() -> RealRunsc | None:
    try:
        return real_runsc(default_real_runsc())
    except OSError:
        return None


# The real runsc emulators run in front of (the set-up's Debian 0.0~20240729 or newer).
REAL = _real()
REAL_RUNSC = REAL.path if REAL else None
GLOBAL = ("--network=none", "--ignore-cgroups")


def _debian_2022() -> str | None:
    """Debian 12's own runsc (0.0~20221219), when it is installed: the one build the
    20221219 release file was checked against byte for byte."""
    for path in ("/usr/bin/runsc", "/usr/sbin/runsc"):
        try:
            if real_runsc(path).release.tag == "0.0~20221219.0":
                return path
        except OSError:
            continue
    return None


DEBIAN_2022 = _debian_2022()

needs_runsc = pytest.mark.skipif(
    os.geteuid() != 0 or REAL_RUNSC is None or not os.path.exists("/bin/busybox"),
    reason="needs root, a real runsc (scripts/bootstrap.sh installs one) and /bin/busybox",
)
needs_runsc_binary = pytest.mark.skipif(REAL_RUNSC is None, reason="no real runsc installed")
needs_debian_2022 = pytest.mark.skipif(
    DEBIAN_2022 is None, reason="Debian 12's own runsc 0.0~20221219 is not installed "
    "(/usr/bin/runsc): the byte-identity and root-only-restore checks need that build")


@dataclass(frozen=True)
class Done:
    code: int
    out: str
    err: str


def run_files(argv: Sequence[str], workdir: Path, timeout: float = 120) -> Done:
    """Run `argv` with stdio in files: runsc hands its stdio to the sandbox it starts
    (a pipe would never see EOF) and chowns them (so never /dev/null)."""
    workdir.mkdir(parents=True, exist_ok=True)
    out, err, stdin = workdir / "stdout", workdir / "stderr", workdir / "stdin"
    stdin.write_bytes(b"")
    with open(stdin, "rb") as fi, open(out, "wb") as fo, open(err, "wb") as fe:
        code = subprocess.run(list(argv), stdin=fi, stdout=fo, stderr=fe, timeout=timeout,
                              check=False).returncode
    return Done(code, out.read_text(errors="replace"), err.read_text(errors="replace"))


def root_processes(root: Path) -> list[int]:
    marker = f"--root={root}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if marker in Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry))
    return found


class Runsc:
    """An emulated runsc with its own -root, run with stdio in files."""

    def __init__(self, emu: EmulatedRunsc, base: Path) -> None:
        self.emu = emu
        self.base = base
        self.root = base / "state"
        self.root.mkdir(parents=True, exist_ok=True)
        self._n = 0

    def __call__(self, *argv: str, timeout: float = 120) -> Done:
        self._n += 1
        return run_files([str(self.emu.path), "--root", str(self.root), *GLOBAL, *argv],
                         self.base / "io" / str(self._n), timeout)

    def real(self, *argv: str) -> Done:
        self._n += 1
        return run_files([real_of(self.emu).path, "--root", str(self.root), *GLOBAL, *argv],
                         self.base / "io" / str(self._n))

    def status(self, container: str) -> str:
        done = self.real("state", container)
        return done.out.split('"status": "', 1)[1].split('"', 1)[0] if done.code == 0 else ""

    def cleanup(self) -> None:
        """Delete every container under this root and kill what still runs with it."""
        listed = self.real("list", "-quiet").out.split()
        for cid in listed:
            self.real("delete", "-force", cid)
        for pid in root_processes(self.root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while root_processes(self.root) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not root_processes(self.root), "sandbox processes left behind"


@pytest.fixture(autouse=True)
def dev_null_untouched() -> Iterator[None]:
    """After each test /dev/null must still be root's 0666: runsc chowns the stdio it
    hands a sandbox, so an emulator that passed /dev/null on would take it."""
    yield
    st = os.stat("/dev/null")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o666)


@pytest.fixture
def runsc_factory(tmp_path: Path) -> Iterator[list[Runsc]]:
    """Collects every `Runsc` a test makes, and cleans each up afterwards."""
    made: list[Runsc] = []
    yield made
    for r in made:
        r.cleanup()
