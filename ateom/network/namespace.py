"""An actor's network namespace: made, bind-mounted at ``<run_dir>/netns/net-<k>``,
unmounted and removed; and the sweep of what a crashed daemon left there.

Why not `pyroute2.netns.create` (or `IPRoute(netns=...)`, which calls it):
it forks a child to unshare and waits for it with ``waitpid(pid)``. In the
daemon one reaper thread owns ``waitpid(-1)`` (`ateom.process.reaper`) and
may reap that child first, so pyroute2's wait fails (ChildProcessError) after
the namespace was made, or on its error path leaves the child unwaited; and
a fork of the many-threaded daemon runs Python in the child. Instead a
short-lived thread of our own unshares (``unshare(CLONE_NEWNET)`` moves only
the calling thread), bind-mounts its ``/proc/self/task/<tid>/ns/net`` onto
the namespace file, opens a netlink socket there (a socket stays in the
namespace it was made in: `ateom.network.links` configures the actor's side
through it with pyroute2) and ends. No fork, no child, nothing to wait for;
the caller's threads never change namespace. Removal is a lazy unmount and an
unlink (what `pyroute2.netns.remove` does, but reporting the unmount's own
error instead of ignoring it). Unlinking the file also detaches copies of
the mount in other mount namespaces (Linux >= 3.18), so the directory needs
no shared propagation.

Inside the new namespace the thread also sets
``net.ipv6.conf.default.disable_ipv6=1`` before any interface but ``lo``
exists, so ``eth0`` arrives with IPv6 off and ``lo`` keeps ``::1``. Where
/proc/sys is read-only (an unprivileged container) that write is skipped;
`links` turns off IPv6 address generation through netlink on both ends
regardless, and the firewall drops whatever IPv6 an actor sends.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

from ateom import safefs

CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MNT_DETACH = 0x2
UMOUNT_NOFOLLOW = 0x8
NETLINK_ROUTE = 0
THREAD_TIMEOUT = 10.0
_IPV6_DEFAULT = "/proc/sys/net/ipv6/conf/default/disable_ipv6"
_OCTAL = re.compile(r"\\([0-7]{3})")

_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


def _check(result: int, what: str, path: str = "") -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}", path or None)


def in_own_thread(body: Callable[[], T], what: str) -> T:
    """`body()` on a new thread, waited for at most THREAD_TIMEOUT seconds; its
    result, or its exception raised here."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["result"] = body()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"ateom-netns-{what}", daemon=True)
    thread.start()
    thread.join(THREAD_TIMEOUT)
    if thread.is_alive():
        raise TimeoutError(errno.ETIMEDOUT, f"{what} did not finish in {THREAD_TIMEOUT:g}s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]


def write_sysctl(path: str, value: str) -> bool:
    """Write a /proc/sys file; False when /proc/sys is read-only or the knob is
    absent (no IPv6 in the kernel), any other error raised."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.ENOENT):
            return False
        raise
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)
    return True


def _netlink() -> socket.socket:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_ROUTE)


def create(run_dir: str, path: str) -> tuple[socket.socket, int]:
    """A new network namespace bind-mounted at `path` (which must not exist): a
    netlink (route) socket inside it and an fd of the namespace, both the
    caller's to close. On failure nothing is left at `path`."""
    directory, name = os.path.split(path)
    with safefs.open_dir(directory, beneath=run_dir, create=True, mode=0o711) as dir_fd:
        os.close(os.open(name, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o444, dir_fd=dir_fd))
        target = f"/proc/self/fd/{dir_fd}/{name}"

        def body() -> tuple[socket.socket, int]:
            _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
            write_sysctl(_IPV6_DEFAULT, "1")
            source = f"/proc/self/task/{threading.get_native_id()}/ns/net"
            _check(_libc.mount(source.encode(), target.encode(), b"none", MS_BIND, None),
                   "bind mount", path)
            ns_fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
            try:
                return _netlink(), ns_fd
            except BaseException:
                os.close(ns_fd)
                raise

        try:
            return in_own_thread(body, "create")
        except BaseException:
            _unmount_all(target)
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise


def netlink_in(run_dir: str, path: str) -> socket.socket:
    """A netlink (route) socket inside the namespace mounted at `path`."""
    directory, name = os.path.split(path)
    with safefs.open_dir(directory, beneath=run_dir) as dir_fd:
        ns_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        def body() -> socket.socket:
            _check(_libc.setns(ns_fd, CLONE_NEWNET), "setns(CLONE_NEWNET)", path)
            return _netlink()

        return in_own_thread(body, "enter")
    finally:
        os.close(ns_fd)


def _unmount_all(target: str) -> None:
    """Lazily unmount everything stacked on `target` (EINVAL: nothing mounted)."""
    for _ in range(64):
        if _libc.umount2(target.encode(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0:
            number = ctypes.get_errno()
            if number in (errno.EINVAL, errno.ENOENT):
                return
            raise OSError(number, f"umount: {os.strerror(number)}", target)


def remove(run_dir: str, path: str) -> bool:
    """Unmount and delete the namespace file at `path`; False when it was not there."""
    directory, name = os.path.split(path)
    try:
        with safefs.open_dir(directory, beneath=run_dir) as dir_fd:
            _unmount_all(f"/proc/self/fd/{dir_fd}/{name}")
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _unescape(field: str) -> str:
    # /proc/self/mountinfo writes space, tab, newline and backslash as \ooo.
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mounted_names(directory: str) -> set[str]:
    """Names of the entries of `directory` something is mounted on (mountinfo)."""
    real = os.path.realpath(directory)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        points = [_unescape(line.split(" ", 5)[4]) for line in f if line.count(" ") >= 5]
    return {os.path.basename(p) for p in points if os.path.dirname(p) == real}


def leftovers(run_dir: str, directory: str) -> list[str]:
    """Every name under `directory`, mounted on or not (the sweep's to-do list)."""
    try:
        names = set(os.listdir(directory))
    except FileNotFoundError:
        return []
    return sorted(names | mounted_names(directory))
