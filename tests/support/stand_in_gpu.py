"""Run a command where ``/dev/nvidia*`` exist as stand-ins, in a private mount namespace.

A real runsc with nvproxy opens the NVIDIA nodes at their host paths
(``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidiaN``) in the mount
namespace it runs in; there is no GPU here. `stand_in_gpu_prefix` gives the
argv prefix that runs a command (``ateom serve``, say) in a new mount
namespace (``unshare --mount --propagation private``) whose ``/dev`` is a
tmpfs holding the host's own nodes, bind-mounted back one by one, plus the
NVIDIA names, each a bind mount of ``/dev/null``. The host's ``/dev`` is never
written: everything happens below the private namespace's own mounts, which
die with its last process. With ``--nvproxy-driver-version`` pinned, nvproxy
boots on them, and create, start, exec, checkpoint and restore work while no
process opens a GPU node (an ioctl on ``/dev/null`` fails).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")

# $1: a scratch dir for the host's /dev while the tmpfs covers it; $2: GPU count;
# $3: the control nodes to make (space-separated, may be empty).
_SCRIPT = r"""
set -eu
scratch=$1; gpus=$2; controls=$3; shift 3
mkdir -p "$scratch"
mount --rbind /dev "$scratch"
mount -t tmpfs -o mode=755,nosuid stand-in-dev /dev
for entry in "$scratch"/* "$scratch"/.[!.]*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    name=${entry##*/}
    if [ -L "$entry" ]; then cp -P "$entry" "/dev/$name"
    elif [ -d "$entry" ]; then mkdir -p "/dev/$name"; mount --rbind "$entry" "/dev/$name"
    else : > "/dev/$name"; mount --bind "$entry" "/dev/$name"; fi
done
i=0
for name in $controls; do : > "/dev/$name"; mount --bind "$scratch/null" "/dev/$name"; done
while [ "$i" -lt "$gpus" ]; do
    : > "/dev/nvidia$i"; mount --bind "$scratch/null" "/dev/nvidia$i"; i=$((i + 1))
done
exec "$@"
"""


def can_make_namespaces() -> str:
    """Why stand-in GPU namespaces cannot be made here ("" when they can)."""
    if os.geteuid() != 0:
        return "needs root (mount namespaces, bind mounts)"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    return ""


def stand_in_gpu_prefix(scratch: str | os.PathLike[str], gpus: int, *,
                        control_nodes: bool = True) -> tuple[str, ...]:
    """The argv prefix running a command with `gpus` stand-in GPU nodes (and the
    control nodes, unless `control_nodes` is False: a worker whose node lacks
    nvidia-uvm) at ``/dev/nvidia*``; `scratch` is an empty dir to use."""
    Path(scratch).mkdir(parents=True, exist_ok=True)
    controls = " ".join(CONTROL_NODES) if control_nodes else ""
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c", _SCRIPT,
            "stand-in-gpu", str(scratch), str(gpus), controls)


def install_cdi_hook_stand_in(toolkit_dir: str | os.PathLike[str]) -> Path:
    """The toolkit's ``nvidia-cdi-hook`` as a stand-in that records each run (its
    arguments, one line) and succeeds; returns the record file. runsc from 2026
    runs a spec's createContainer hooks itself (Debian's 0.0~20240729 does not)."""
    toolkit = Path(toolkit_dir)
    toolkit.mkdir(parents=True, exist_ok=True)
    calls = toolkit / "hook-calls"
    hook = toolkit / "nvidia-cdi-hook"
    hook.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    hook.chmod(0o755)
    return calls
