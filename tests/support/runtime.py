"""Run a bundle under a real OCI runtime (runsc or runc), and always clean up.

Each run gets a unique container id and its own state root, and its stdio are
regular files: runsc chowns its stdio, so handing it /dev/null would change the
host's /dev/null.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# runsc flags that work in an unprivileged-network VM without cgroup delegation.
RUNSC_FLAGS = ("--network=none", "--ignore-cgroups")


@dataclass(frozen=True)
class ContainerResult:
    """What a container run produced."""

    runtime: str
    container_id: str
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


def runtime_available(runtime: str) -> str | None:
    """Why `runtime` cannot run here (for ``pytest.skip``), or None when it can.

    Both runtimes need root here; the binary must be on PATH.
    """
    if shutil.which(runtime) is None:
        return f"{runtime} not installed"
    if os.geteuid() != 0:
        return f"{runtime} needs root here"
    return None


def _global_flags(runtime: str, state_root: Path) -> list[str]:
    flags = ["--root", str(state_root)]
    if runtime == "runsc":
        flags += list(RUNSC_FLAGS)
    return flags


def run_container(
    runtime: str,
    bundle_dir: str | os.PathLike[str],
    *,
    timeout: float = 60.0,
    extra_flags: Sequence[str] = (),
    id_prefix: str = "ateom-test",
) -> ContainerResult:
    """Run the bundle to completion under `runtime` ("runsc" or "runc").

    ``<runtime> --root <tmp> [runsc: --network=none --ignore-cgroups]
    <extra_flags> run --bundle <bundle> <unique id>``. The container's stdout
    and stderr (and the runtime's own messages) are captured through files.
    Whatever happens (timeout, exception), the container is deleted with
    ``delete --force`` and the run's process group is killed.
    """
    container_id = f"{id_prefix}-{uuid.uuid4().hex[:12]}"
    with tempfile.TemporaryDirectory(prefix=f"ateom-{runtime}-") as tmp:
        work = Path(tmp)
        state_root = work / "state"
        state_root.mkdir()
        stdin_path, out_path, err_path = work / "stdin", work / "stdout", work / "stderr"
        stdin_path.write_bytes(b"")
        cmd = [runtime, *_global_flags(runtime, state_root), *extra_flags,
               "run", "--bundle", str(bundle_dir), container_id]
        timed_out = False
        with open(stdin_path, "rb") as fin, open(out_path, "wb") as fout, \
                open(err_path, "wb") as ferr:
            proc = subprocess.Popen(cmd, stdin=fin, stdout=fout, stderr=ferr,
                                    start_new_session=True)
            try:
                returncode = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                returncode = -1
            finally:
                _cleanup(runtime, state_root, container_id, proc)
        return ContainerResult(
            runtime=runtime,
            container_id=container_id,
            returncode=returncode,
            stdout=out_path.read_text(errors="replace"),
            stderr=err_path.read_text(errors="replace"),
            timed_out=timed_out,
        )


def _cleanup(
    runtime: str, state_root: Path, container_id: str, proc: subprocess.Popen[bytes]
) -> None:
    """Delete the container and kill the run's own process group, by id only."""
    subprocess.run(
        [runtime, *_global_flags(runtime, state_root), "delete", "--force", container_id],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=30,
    )
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
