"""Fake NVIDIA driver libraries: real ELF shared objects built with gcc.

The injector reads DT_SONAME from the libraries it mounts, and the end-to-end
tests load them with the real dynamic loader inside a sandbox, so these are
compiled, not faked byte by byte.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DRIVER_VERSION = "580.65.06"


@dataclass(frozen=True)
class FakeLibrary:
    """One built library: `path` on the host, the `soname` linked into it."""

    path: Path
    soname: str | None

    @property
    def name(self) -> str:
        return self.path.name


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc not found: tests.support compiles real ELF libraries with it")
    return gcc


def compile_shared_library(out: str | os.PathLike[str], soname: str | None, source: str) -> Path:
    """Compile C `source` into the shared object `out` with DT_SONAME `soname`.

    `soname=None` builds a library without a DT_SONAME entry. Runs gcc.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ateom-lib-") as tmp:
        src = Path(tmp) / "lib.c"
        src.write_text(source)
        cmd = [_gcc(), "-shared", "-fPIC", "-O1", "-o", str(out), str(src)]
        if soname is not None:
            cmd.insert(-3, f"-Wl,-soname,{soname}")
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"gcc failed building {out}:\n{res.stderr}")
    return out


def _symbol_source(name: str, functions: Sequence[str]) -> str:
    ident = re.sub(r"[^A-Za-z0-9]", "_", name)
    body = [f'const char ateom_fake_library_{ident}[] = "{name}";']
    body += [f"int {fn}(unsigned flags) {{ (void)flags; return 0; }}" for fn in functions]
    return "\n".join(body) + "\n"


def build_fake_driver_libs(
    lib_dir: str | os.PathLike[str],
    *,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    extra: Sequence[tuple[str, str | None]] = (),
) -> list[FakeLibrary]:
    """Build fake driver libraries in `lib_dir` (created if missing); runs gcc.

    Always builds ``libcuda.so.<driver_version>`` (SONAME ``libcuda.so.1``,
    exporting ``int cuInit(unsigned)`` that returns 0) and
    ``libnvidia-ml.so.<driver_version>`` (SONAME ``libnvidia-ml.so.1``,
    exporting ``nvmlInit_v2``). `extra` adds ``(file name, SONAME or None)``
    pairs, e.g. ``("libnvidia-tls.so.580.65.06", None)`` for a library
    without DT_SONAME. Returns the libraries in build order; libcuda first.
    """
    lib_dir = Path(lib_dir)
    lib_dir.mkdir(parents=True, exist_ok=True)
    wanted: list[tuple[str, str | None, tuple[str, ...]]] = [
        (f"libcuda.so.{driver_version}", "libcuda.so.1", ("cuInit", "cuDriverGetVersion")),
        (f"libnvidia-ml.so.{driver_version}", "libnvidia-ml.so.1", ("nvmlInit_v2",)),
    ]
    wanted += [(name, soname, ()) for name, soname in extra]
    built = []
    for name, soname, functions in wanted:
        path = compile_shared_library(lib_dir / name, soname, _symbol_source(name, functions))
        built.append(FakeLibrary(path=path, soname=soname))
    return built


CUDA_PROBE_SOURCE = r"""
#include <stdio.h>
int cuInit(unsigned flags);
int main(void) {
    int rc = cuInit(0);
    printf("cuInit=%d\n", rc);
    return rc == 0 ? 0 : 1;
}
"""


def build_cuda_probe(out: str | os.PathLike[str], libcuda: str | os.PathLike[str]) -> Path:
    """Build a dynamically linked program at `out` that calls ``cuInit(0)``; runs gcc.

    It is linked against the library file `libcuda` (e.g. the fake
    ``libcuda.so.580.65.06``) so its DT_NEEDED is that library's SONAME
    (``libcuda.so.1``): at run time the loader finds it only through a SONAME
    link on its search path. Prints ``cuInit=<rc>`` and exits 0 when rc is 0.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ateom-probe-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(CUDA_PROBE_SOURCE)
        cmd = [_gcc(), "-O1", "-o", str(out), str(src), str(libcuda)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"gcc failed building {out}:\n{res.stderr}")
    return out
