"""What a runsc binary can do, probed once per binary (`runsc flags`, `runsc help <cmd>`).

runsc versions differ in flags that matter to us: `--nvproxy` (GPU
passthrough, absent from Debian's 2022 build), the global
`-allow-connected-on-save`, and restore's `-background`/`-direct`. ateom
passes an optional flag only when the binary lists it, and refuses a GPU
actor up front on a runsc without nvproxy.

`probe_runsc` runs the binary with plain `subprocess` (for `ateom doctor`);
the daemon passes its reaper's runner so no one else waits on its children.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from shutil import which

from ateom.errors import AteomError, ErrorCode

# A runner: argv -> (exit code, combined output).
Runner = Callable[[Sequence[str]], tuple[int, str]]

_FLAG_RE = re.compile(r"^\s+-{1,2}([A-Za-z0-9][A-Za-z0-9_.-]*)", re.MULTILINE)
_VERSION_RE = re.compile(r"runsc version\s+(\S+)")


@dataclass(frozen=True, slots=True)
class RunscInfo:
    path: str
    version: str
    global_flags: frozenset[str]
    command_flags: tuple[tuple[str, frozenset[str]], ...] = ()
    # `runsc nvproxy list-supported-drivers` (() when the build has no such list):
    # a driver outside it is a boot FATAL that the CLI reports only as "EOF".
    supported_drivers: tuple[str, ...] = ()
    # `--overlay2`'s default as `runsc flags` prints it ("root:self" since 2023; "none"
    # in Debian's 2022 build; "" when the build has no such flag).
    overlay_default: str = ""

    def supports(self, flag: str) -> bool:
        """A global flag (``nvproxy``) or ``command:flag`` (``restore:background``)."""
        flag = flag.lstrip("-")
        command, sep, name = flag.partition(":")
        if not sep:
            return flag in self.global_flags
        return name.lstrip("-") in dict(self.command_flags).get(command, frozenset())

    @property
    def supports_nvproxy(self) -> bool:
        return self.supports("nvproxy")

    @property
    def restores_subcontainers(self) -> bool:
        """Whether `runsc restore` restores a multi-container sandbox. No flag names
        it; `restore -direct` came in the same release (20240501), so its presence
        tells. Debian's 2022 build restores only a sandbox's root container."""
        return self.supports("restore:direct")

    @property
    def restore_needs_create(self) -> bool:
        # Every runsc probed so far (Debian's 2022 build, and 2024+ builds with
        # restore -background) creates the container inside `restore`; a
        # `create` first fails with "container already exists". Kept as a
        # probed property so a runsc that needs one can be adapted to here.
        return False


def unknown_global_flags(flags: Sequence[str], known: frozenset[str]) -> tuple[str, ...]:
    """The flags among `flags` (``--network=none``, ``-debug``, ``--log-format json``)
    whose names are not in `known` (`RunscInfo.global_flags`, from `runsc flags`):
    runsc would refuse every call with "flag provided but not defined" (pure). A
    token that does not start with a dash is a value, skipped."""
    unknown = []
    for token in flags:
        name = token.lstrip("-").partition("=")[0]
        if token.startswith("-") and name and name not in known:
            unknown.append(token)
    return tuple(unknown)


def parse_flags(text: str) -> frozenset[str]:
    """Flag names from Go `flag` usage output (``  -name type`` lines; pure)."""
    return frozenset(_FLAG_RE.findall(text))


_DRIVER_RE = re.compile(r"^\s*(\d+\.\d+(?:\.\d+)?)\s*$", re.MULTILINE)


def parse_flag_default(text: str, name: str) -> str:
    """A flag's default from Go `flag` usage output (its ``(default X)``; "" when the
    flag is absent or prints none; pure)."""
    start = re.search(rf"^\s+-{{1,2}}{re.escape(name)}(?:\s|$)", text, re.MULTILINE)
    if start is None:
        return ""
    following = _FLAG_RE.search(text, start.end())
    stanza = text[start.end():following.start() if following else len(text)]
    found = re.search(r"\(default ([^)]*)\)", stanza)
    return found.group(1).strip().strip('"') if found else ""


def parse_drivers(text: str) -> tuple[str, ...]:
    """Driver versions from ``nvproxy list-supported-drivers``, oldest first (pure;
    runsc's own order is not always sorted)."""
    found = set(_DRIVER_RE.findall(text))
    return tuple(sorted(found, key=lambda v: tuple(int(p) for p in v.split("."))))


# A runsc release's date in its version: release-20260706.0(-N-g<hash>), or the
# snapshot Debian packaged (0.0~20240729.0-4).
_RELEASE_DATE = re.compile(r"(?:^release-|~)(\d{8})\.\d+")


def release_date(version: str) -> str | None:
    """The ``YYYYMMDD`` a runsc version names, None when it names none (pure)."""
    m = _RELEASE_DATE.search(version)
    return m.group(1) if m else None


def parse_version(text: str) -> str:
    m = _VERSION_RE.search(text)
    return m.group(1) if m else "unknown"


_PROBED_COMMANDS = ("create", "restore", "checkpoint", "events")

# Seconds one probe command may take. Each is a help or version printout that
# takes milliseconds; a binary that hangs here must not stall startup for
# minutes (there are six probe commands).
PROBE_TIMEOUT = 10.0


def _subprocess_runner(argv: Sequence[str]) -> tuple[int, str]:
    done = subprocess.run(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=PROBE_TIMEOUT, check=False,
    )
    return done.returncode, done.stdout


_cache: dict[tuple[str, float], RunscInfo] = {}
_cache_lock = threading.Lock()


def probe_runsc(path: str, runner: Runner | None = None) -> RunscInfo:
    """Probe `path` (runs it a few times); cached per binary and mtime.

    Raises AteomError FAILED_PRECONDITION when the binary is missing or does
    not behave like runsc.
    """
    resolved = which(path) if not os.path.isabs(path) else path
    if not resolved or not os.access(resolved, os.X_OK):
        raise AteomError(
            f"runsc {path!r}: not found or not executable", code=ErrorCode.FAILED_PRECONDITION
        )
    key = (resolved, os.stat(resolved).st_mtime)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    run = runner or _subprocess_runner
    try:
        code, version_out = run([resolved, "--version"])
        # Judge the binary on its first answer: something that is not runsc
        # (or hangs) must not cost five more probe commands and their timeouts.
        if code != 0 or "runsc version" not in version_out:
            raise AteomError(
                f"runsc {resolved}: `--version` did not answer like runsc "
                f"(exit {code}): {version_out[-500:]!r}",
                code=ErrorCode.FAILED_PRECONDITION,
            )
        _, flags_out = run([resolved, "flags"])
        commands = []
        for command in _PROBED_COMMANDS:
            _, help_out = run([resolved, "help", command])
            commands.append((command, parse_flags(help_out)))
        drivers: tuple[str, ...] = ()
        if "nvproxy" in parse_flags(flags_out):
            code, drivers_out = run([resolved, "nvproxy", "list-supported-drivers"])
            drivers = parse_drivers(drivers_out) if code == 0 else ()
    except (OSError, subprocess.SubprocessError) as exc:
        raise AteomError(
            f"runsc {resolved}: probing failed: {exc}", code=ErrorCode.FAILED_PRECONDITION
        ) from exc
    info = RunscInfo(
        path=resolved,
        version=parse_version(version_out),
        global_flags=parse_flags(flags_out),
        command_flags=tuple(commands),
        supported_drivers=drivers,
        overlay_default=parse_flag_default(flags_out, "overlay2"),
    )
    with _cache_lock:
        _cache[key] = info
    return info
