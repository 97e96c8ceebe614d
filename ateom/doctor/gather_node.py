"""What the doctor looks at on the node itself: device nodes, directories, the
toolkit's binaries, the host driver's version (stats files, reads a few bytes)."""

from __future__ import annotations

import glob
import os
import re
import stat

from ateom.doctor.config import DoctorConfig
from ateom.doctor.facts import DirFact, NodeFact, ToolFact
from ateom.inject.options import nvidia_hook_binary
from ateom.runsc.host import CgroupMount, read_cgroup_mounts

_DIGITS = re.compile(r"(\d+)")
_PROC_VERSION = re.compile(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s")
_DRIVER_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)?$")


def natural(path: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in _DIGITS.split(path)]


def stat_node(path: str) -> NodeFact:
    """What is at `path` (stats it, following symlinks as the injector does)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return NodeFact(path, error=exc.strerror or str(exc))
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        kind = "c" if stat.S_ISCHR(st.st_mode) else "b"
        return NodeFact(path, kind, os.major(st.st_rdev), os.minor(st.st_rdev))
    return NodeFact(path, "other")


def dir_fact(path: str) -> DirFact:
    return DirFact(path, os.path.isdir(path))


def tool_fact(toolkit_dir: str, name: str) -> ToolFact:
    """`name` in the toolkit dir, ``name.real`` preferred (stats and reads 2 bytes).

    The hook binary is chosen by the injector's own rule, so the doctor checks
    the very file kept hooks will run.
    """
    real = os.path.join(toolkit_dir, name + ".real")
    if name == "nvidia-cdi-hook":
        path = nvidia_hook_binary(toolkit_dir)
    else:
        path = real if os.path.exists(real) else os.path.join(toolkit_dir, name)
    if not os.path.isfile(path):
        return ToolFact(name, path, exists=False)
    try:
        with open(path, "rb") as f:
            is_script = f.read(2) == b"#!"
    except OSError:
        is_script = False
    return ToolFact(
        name,
        path,
        exists=True,
        executable=os.access(path, os.X_OK),
        is_real=path == real,
        is_script=is_script,
    )


def host_driver_version(config: DoctorConfig) -> str:
    """The loaded kernel module's version, else libcuda's file name suffix (reads files)."""
    try:
        with open(config.driver_version_file) as f:
            m = _PROC_VERSION.search(f.read())
        if m:
            return m.group(1)
    except OSError:
        pass
    for lib in sorted(glob.glob(os.path.join(config.node.driver_lib_dir, "libcuda.so.*"))):
        suffix = os.path.basename(lib)[len("libcuda.so.") :]
        if _DRIVER_VERSION.match(suffix):
            return suffix
    return ""


def gather_cgroups(mountinfo: str = "/proc/self/mountinfo") -> tuple[CgroupMount, ...] | None:
    """The cgroup filesystems mounted here (`ateom.runsc.host.read_cgroup_mounts`, which
    the daemon's readiness reads too; reads a file)."""
    return read_cgroup_mounts(mountinfo)
