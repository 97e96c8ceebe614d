"""Put an emulated runsc release on disk for a test, and read what it was asked.

    emu = install_runsc("20240930", tmp / "bin", gpus=sim_gpus(2))
    subprocess.run([emu.path, "--version"])    # runsc version release-20240930.0 ...
    ... run the daemon with --runsc emu.path ...
    [create] = [c for c in emu.calls() if c.command == "create"]
    assert create.has_flag("nvproxy") and "nvproxy" in create.stripped

`install_runsc` writes, into `bin_dir`, an executable ``runsc`` (a ``#!/bin/sh``
that runs ``python -m tests.support.runsc_emulator`` with its config), the
config, the simulated host driver (a ``/proc/driver/nvidia/version``-style
file) and GPU list, and names the record file the emulator appends a JSON
line to per call (`RunscCall`). The release files are
``tests/fixtures/runsc/release-*.json`` (`RELEASES` lists them); the real work runs
through a real runsc (`real_runsc`: by default the ``runsc`` on ``$PATH``, the
set-up's Debian build), probed once here (`runsc_real`) and described to the
emulator in ``<name>.real.json``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.driver import DEFAULT_DRIVER_VERSION
from tests.support.runsc_emu_gpu import SimGpu, proc_version_text
from tests.support.runsc_real import RealRunsc, real_profile_json
from tests.support.runsc_real import real_runsc as probe_real
from tests.support.runsc_release import RELEASES, load_release, release_file

__all__ = ["RELEASES", "EmulatedRunsc", "RunscCall", "install_runsc"]

_SCRIPT = """#!/bin/sh
# runsc {tag}, emulated in front of {real} (tests.support.runsc_emu)
PYTHONPATH={pythonpath} exec {python} -P -m tests.support.runsc_emulator {config} "$@"
"""


@dataclass(frozen=True, slots=True)
class RunscCall:
    """One call of the emulated runsc, as recorded."""

    argv: tuple[str, ...]  # as received, without argv[0]
    command: str | None  # None when answered before a command ran (--version, usage errors)
    container: str | None
    exit_code: int
    ran: tuple[tuple[str, ...], ...]  # real runsc command lines run, in order
    stripped: tuple[str, ...]  # flags the real build lacks: "nvproxy", "restore:background"
    nvproxy: bool | None  # the release's nvproxy decision (create/run/restore)
    notes: tuple[str, ...]  # what the emulator did or said beyond the real runsc
    release: str

    def has_flag(self, name: str) -> bool:
        """Whether `argv` carried flag `name` (``-name``, ``--name``, ``--name=v``)."""
        forms = (f"-{name}", f"--{name}")
        return any(a in forms or a.startswith(tuple(f + "=" for f in forms)) for a in self.argv)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunscCall:
        return cls(
            argv=tuple(data.get("argv", ())), command=data.get("command"),
            container=data.get("container"), exit_code=int(data.get("exit_code") or 0),
            ran=tuple(tuple(r) for r in data.get("ran", ())),
            stripped=tuple(data.get("stripped", ())), nvproxy=data.get("nvproxy"),
            notes=tuple(data.get("notes", ())), release=str(data.get("release", "")),
        )


@dataclass(frozen=True, slots=True)
class EmulatedRunsc:
    """An installed emulated runsc: where it is and what it records."""

    release: str  # "20240930"
    tag: str  # "release-20240930.0"
    path: Path  # the executable ``runsc``
    config_path: Path
    record_path: Path
    driver_version_file: Path
    gpus_file: Path

    def calls(self) -> list[RunscCall]:
        """Every call so far, in order (reads the record file)."""
        try:
            lines = self.record_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [RunscCall.from_json(json.loads(line)) for line in lines if line.strip()]

    def clear_calls(self) -> None:
        """Forget the calls recorded so far."""
        self.record_path.write_text("")

    def set_driver_version(self, version: str | None) -> None:
        """Change the simulated host driver; None removes it (no driver loaded)."""
        if version is None:
            self.driver_version_file.unlink(missing_ok=True)
        else:
            self.driver_version_file.write_text(proc_version_text(version))

    def set_gpus(self, gpus: Sequence[SimGpu]) -> None:
        """Change the simulated host GPUs (what a restore remaps onto)."""
        self.gpus_file.write_text(json.dumps([g.to_json() for g in gpus]) + "\n")


def default_real_runsc() -> str:
    """The real runsc emulators run in front of: ``$ATEOM_TEST_EMU_REAL_RUNSC``, else
    the ``runsc`` on ``$PATH`` (the set-up installs Debian's 0.0~20240729 or newer)."""
    found = os.environ.get("ATEOM_TEST_EMU_REAL_RUNSC") or shutil.which("runsc")
    if not found:
        raise FileNotFoundError("no real runsc: set ATEOM_TEST_EMU_REAL_RUNSC or put runsc"
                                " on $PATH (scripts/bootstrap.sh installs one)")
    return found


def real_of(emu: EmulatedRunsc) -> RealRunsc:
    """The probed real runsc behind `emu`."""
    return probe_real(json.loads(emu.config_path.read_text())["real_runsc"])


def install_runsc(
    release: str,
    bin_dir: str | os.PathLike[str],
    *,
    real_runsc: str | None = None,
    driver_version: str | None = DEFAULT_DRIVER_VERSION,
    driver_version_file: str | os.PathLike[str] | None = None,
    gpus: Sequence[SimGpu] = (),
    name: str = "runsc",
) -> EmulatedRunsc:
    """Write an emulated runsc of `release` into `bin_dir` (created); returns it.

    `driver_version` is written as the simulated ``/proc/driver/nvidia/version``
    (None: no driver), unless `driver_version_file` names a file the test
    keeps itself. `gpus` is the simulated host's GPU list. Files are named
    after `name`: ``<name>``, ``<name>.emu.json``, ``<name>.calls.jsonl``,
    ``<name>.nvidia-version``, ``<name>.gpus.json``, ``<name>.real.json``.
    `real_runsc` defaults to `default_real_runsc`.
    """
    if release.removeprefix("release-").split(".")[0] not in RELEASES:
        raise ValueError(f"runsc release {release!r}: not one of {', '.join(RELEASES)}")
    tag = load_release(release).tag
    directory = Path(bin_dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    emu = EmulatedRunsc(
        release=tag.removeprefix("release-").split(".")[0], tag=tag, path=directory / name,
        config_path=directory / f"{name}.emu.json",
        record_path=directory / f"{name}.calls.jsonl",
        driver_version_file=Path(driver_version_file or directory / f"{name}.nvidia-version"),
        gpus_file=directory / f"{name}.gpus.json",
    )
    if driver_version_file is None:
        emu.set_driver_version(driver_version)
    emu.set_gpus(gpus)
    emu.clear_calls()
    real = probe_real(real_runsc or default_real_runsc())
    real_path = directory / f"{name}.real.json"
    real_path.write_text(json.dumps(real_profile_json(real.release)) + "\n")
    emu.config_path.write_text(json.dumps({
        "release_file": str(release_file(tag)), "real_profile": str(real_path),
        "real_runsc": real.path, "record": str(emu.record_path),
        "driver_version_file": str(emu.driver_version_file), "gpus_file": str(emu.gpus_file),
    }, indent=1) + "\n")
    package_root = Path(__file__).resolve().parents[2]  # the repository: tests.support
    emu.path.write_text(_SCRIPT.format(
        tag=tag, real=f"{real.path} ({real.release.tag})",
        pythonpath=shlex.quote(str(package_root)),
        python=shlex.quote(sys.executable), config=shlex.quote(str(emu.config_path))))
    emu.path.chmod(0o755)
    return emu
