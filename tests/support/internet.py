"""A stand-in internet: a network namespace of its own beside the worker's, reached over
a veth pair on a documentation /24 (RFC 5737), with a real HTTP server in it. The egress
suite and the ingress benchmark fetch from it through an actor's egress gateway."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence


class AddressTaken(RuntimeError):
    """This host already has an address in the stand-in internet's /24."""


class NotUp(RuntimeError):
    """The stand-in internet's server did not take connections in time."""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextlib.contextmanager
def stand_in_internet(prefix: str, server: Sequence[str], *, tag: str,
                      up_timeout: float = 20.0) -> Iterator[str]:
    """`<prefix>.1` in a namespace of its own, `<prefix>.2` on this side of a veth
    (`prefix`: a /24's first three octets, as "198.51.100"). `server` is the argv run
    in that namespace, serving port 80 on `<prefix>.1`; yields the base URL once it
    takes connections. Namespace, link and server are gone after, whatever happened."""
    internet_ip, worker_side_ip = f"{prefix}.1", f"{prefix}.2"
    taken = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    if f"{prefix}." in taken:
        raise AddressTaken(f"this host has an address in {prefix}.0/24, the stand-in "
                           "internet's")
    name, link = f"ateom-{tag}-inet-{os.getpid()}", f"x{tag[:4]}{os.getpid() % 100000}"
    _ip("netns", "add", name)
    process = None
    try:
        _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("addr", "add", f"{worker_side_ip}/24", "dev", link)
        _ip("link", "set", link, "up")
        _ip("-n", name, "addr", "add", f"{internet_ip}/24", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        process = subprocess.Popen(["ip", "netns", "exec", name, *server],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + up_timeout
        while True:
            try:
                socket.create_connection((internet_ip, 80), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise NotUp(f"the stand-in internet did not take connections on "
                                f"{internet_ip}:80 within {up_timeout:g} s") from None
                time.sleep(0.1)
        yield f"http://{internet_ip}"
    finally:
        if process is not None:
            process.kill()
            process.wait()
        subprocess.run(["ip", "link", "del", link], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
