"""Minimal OCI bundles for tests: a busybox-static rootfs and a runsc-style config."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BUSYBOX = "/bin/busybox"

# What `runsc spec` writes, minus what a test bundle must not have: a
# read-only root (the injector stages symlinks into it) and a terminal.
_BASE_CONFIG: dict[str, Any] = {
    "ociVersion": "1.0.0",
    "process": {
        "terminal": False,
        "user": {"uid": 0, "gid": 0},
        "args": ["sh"],
        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "cwd": "/",
        "capabilities": {
            k: ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
            for k in ("bounding", "effective", "inheritable", "permitted")
        },
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        "noNewPrivileges": True,
    },
    "root": {"path": "rootfs", "readonly": False},
    "hostname": "ateom-test",
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
    ],
    "linux": {
        "namespaces": [
            {"type": "pid"},
            {"type": "network"},
            {"type": "ipc"},
            {"type": "uts"},
            {"type": "mount"},
        ]
    },
}


def _busybox_applets(busybox: str) -> list[str]:
    res = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True)
    return [a for a in res.stdout.split() if a and "/" not in a]


def build_busybox_bundle(
    bundle_dir: str | os.PathLike[str],
    args: Sequence[str] = ("sh",),
    *,
    env: Sequence[str] = (),
    mounts: Sequence[Mapping[str, Any]] = (),
    readonly_root: bool = False,
    busybox: str = BUSYBOX,
) -> Path:
    """Create an OCI bundle at `bundle_dir`; returns the bundle path.

    The rootfs (``rootfs/``) holds a copy of the static `busybox` at
    ``/bin/busybox`` with one relative symlink per applet in ``/bin`` (so
    ``sh``, ``ls``, ``readlink``, ``stat`` ... exist), plus empty ``/dev``,
    ``/proc``, ``/sys``, ``/tmp``, ``/etc``. ``config.json`` is what
    ``runsc spec`` writes with ``process.args`` = `args`, `env` appended to
    the default ``PATH``, `mounts` appended to proc/dev/sys, ``terminal``
    false and ``root.readonly`` = `readonly_root` (default False). Works for
    both runsc and runc. Copies files only; needs no root.
    """
    bundle = Path(bundle_dir)
    rootfs = bundle / "rootfs"
    for sub in ("bin", "dev", "proc", "sys", "tmp", "etc"):
        (rootfs / sub).mkdir(parents=True, exist_ok=True)
    target = rootfs / "bin" / "busybox"
    target.write_bytes(Path(busybox).read_bytes())
    target.chmod(0o755)
    for applet in _busybox_applets(busybox):
        link = rootfs / "bin" / applet
        if applet != "busybox" and not os.path.lexists(link):
            link.symlink_to("busybox")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\n")

    config = copy.deepcopy(_BASE_CONFIG)
    config["process"]["args"] = list(args)
    config["process"]["env"] += list(env)
    config["mounts"] += [dict(m) for m in mounts]
    config["root"]["readonly"] = readonly_root
    write_config(bundle, config)
    return bundle


def host_loader_mounts() -> list[dict[str, Any]]:
    """Read-only bind mounts of the host's glibc and dynamic loader directories.

    For running a dynamically linked host-built program (e.g. the CUDA probe)
    inside a busybox bundle: the host's multiarch library directory and the
    loader's directory, mounted at the same paths, read-only.
    """
    mounts = []
    for dest in ("/lib/x86_64-linux-gnu", "/lib64"):
        source = os.path.realpath(dest)
        if os.path.isdir(source):
            mounts.append(
                {"destination": dest, "type": "bind", "source": source,
                 "options": ["rbind", "ro", "nosuid", "nodev"]}
            )
    return mounts


def read_config(bundle_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse the bundle's ``config.json``."""
    with open(Path(bundle_dir) / "config.json", "rb") as f:
        config: dict[str, Any] = json.load(f)
    return config


def write_config(bundle_dir: str | os.PathLike[str], config: Mapping[str, Any]) -> None:
    """Write `config` as the bundle's ``config.json`` (indented, like ``runsc spec``)."""
    Path(bundle_dir, "config.json").write_text(json.dumps(config, indent=4) + "\n")
