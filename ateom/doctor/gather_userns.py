"""Whether this machine lets runsc make and map the user namespaces it needs (runs a child
python).

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

# A fresh process forks a child that unshares CLONE_NEWUSER; the parent then writes
# the child's uid_map and gid_map mapping root to root, as runsc does for its gofer
# and sandbox (Go writes them from the parent). Mapping uid 0 needs CAP_SETFCAP since
# Linux 5.12, besides CAP_SETUID/CAP_SETGID: a container without it can unshare but
# not map, and runsc then fails with "fork/exec /proc/self/exe: operation not
# permitted", blaming max_user_namespaces. Prints one JSON line.
_PROBE = r"""
import ctypes, ctypes.util, json, os
libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:
    err = 0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno()
    os.write(ready_w, str(err).encode())
    os.read(go_r, 1)
    os._exit(0)
err = int(os.read(ready_r, 16) or b"0")
map_error = ""
if err == 0:
    for name in ("uid_map", "gid_map"):
        try:
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write("0 0 1\n")
        except OSError as e:
            map_error = f"writing {name}: {os.strerror(e.errno or 0)}"
            break
os.write(go_w, b"x")
os.waitpid(pid, 0)
try:
    a, b = os.stat("/"), os.stat("/proc/1/root/")
    chroot = (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino)
except OSError:
    chroot = None
try:
    limit = int(open("/proc/sys/user/max_user_namespaces").read())
except (OSError, ValueError):
    limit = None
caps = None
for line in open("/proc/self/status"):
    if line.startswith("CapEff:"):
        caps = int(line.split()[1], 16)
print(json.dumps({"errno": err, "error": os.strerror(err) if err else "",
                  "chroot": chroot, "max_user_namespaces": limit,
                  "map_error": map_error, "cap_eff": caps}))
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
    caps = data.get("cap_eff")
    return UsernsFact(probed=True, error=str(data.get("error") or ""),
                      chroot=data.get("chroot"), max_user_namespaces=data.get(
                          "max_user_namespaces"), map_error=str(data.get("map_error") or ""),
                      capabilities=caps if isinstance(caps, int) else None)
