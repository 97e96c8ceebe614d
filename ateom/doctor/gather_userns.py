"""Whether this machine lets runsc make the user namespaces it needs (runs a child python).

runsc's sandbox and gofer start in new user namespaces. Where the kernel
refuses (a process inside a plain ``chroot``: EPERM for CLONE_NEWUSER; or
``user.max_user_namespaces`` at 0), every Run fails, and runsc's own hint
names ``max_user_namespaces`` even in the chroot case. So the doctor tries
what runsc does, in a child process (never in the daemon's own, which is
threaded), and records why it failed: the errno, whether the process is
chroot'ed (``/`` is not PID 1's root), and the sysctl.
"""

from __future__ import annotations

import json
import sys

from ateom.doctor.facts import UsernsFact
from ateom.process.runner import Runner

# unshare(CLONE_NEWUSER) in a fresh process; prints one JSON line.
_PROBE = r"""
import ctypes, ctypes.util, json, os
libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
err = 0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno()
try:
    a, b = os.stat("/"), os.stat("/proc/1/root/")
    chroot = (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino)
except OSError:
    chroot = None
try:
    limit = int(open("/proc/sys/user/max_user_namespaces").read())
except (OSError, ValueError):
    limit = None
print(json.dumps({"errno": err, "error": os.strerror(err) if err else "",
                  "chroot": chroot, "max_user_namespaces": limit}))
"""


def gather_userns(run: Runner, timeout: float = 10.0) -> UsernsFact:
    """Try CLONE_NEWUSER in a child python (runs it through `run`)."""
    code, out = run([sys.executable, "-c", _PROBE], timeout=timeout)
    try:
        data = json.loads(out.strip().splitlines()[-1]) if code == 0 and out.strip() else None
    except (ValueError, IndexError):
        data = None
    if not isinstance(data, dict):
        return UsernsFact(probed=False, error=f"the probe failed (exit {code}): {out[-200:]!r}")
    return UsernsFact(probed=True, error=str(data.get("error") or ""),
                      chroot=data.get("chroot"), max_user_namespaces=data.get(
                          "max_user_namespaces"))
