"""Real network namespaces, veth pairs and nftables, for the network tests: root
and the nft binary, or a skip that says which is missing. Each test runs in a
namespace of its own standing for the worker Pod's (`pod_namespace`), so the
start-up sweep and ``table inet ateom`` never meet the machine's.

Sockets "inside an actor" are made by a thread that setns()es into the actor's
namespace and ends: a socket stays in the namespace it was made in, so the test
drives it from its own thread (connect, accept) with a timeout on each.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ateom.network import ActorNetworks
from ateom.network.networks import find_nft
from ateom.process.runner import subprocess_runner

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
NFT = find_nft()

needs_root_and_nft = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.isabs(NFT),
    reason="real network namespaces, veth pairs and nftables need root and the nft binary"
           f" (euid {os.geteuid()}, nft: {NFT})")


def socket_in(netns_path: str, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A new AF_INET socket inside the namespace mounted at `netns_path`."""
    box: dict[str, object] = {}

    def run() -> None:
        fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                box["error"] = OSError(ctypes.get_errno(), "setns", netns_path)
                return
            box["sock"] = socket.socket(socket.AF_INET, kind)
        finally:
            os.close(fd)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(5)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    sock = box["sock"]
    assert isinstance(sock, socket.socket)
    return sock


@dataclass(frozen=True)
class Attempt:
    outcome: str  # "connected", "refused", "timeout" or an errno name
    seconds: float


def connect(sock: socket.socket, address: tuple[str, int], timeout: float = 1.0) -> Attempt:
    """Connect `sock` (then keep it for the caller, or close it), bounded by `timeout`."""
    sock.settimeout(timeout)
    start = time.monotonic()
    try:
        sock.connect(address)
        outcome = "connected"
    except ConnectionRefusedError:
        outcome = "refused"
    except TimeoutError:
        outcome = "timeout"
    except OSError as exc:
        outcome = errno.errorcode.get(exc.errno or 0, str(exc))
    return Attempt(outcome, time.monotonic() - start)


def listener(sock: socket.socket, port: int = 0, host: str = "0.0.0.0") -> socket.socket:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(8)
    sock.settimeout(2.0)
    return sock


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def run_in(netns_path: str, *argv: str) -> str:
    """`argv` under ``nsenter --net=<netns_path>`` (what any tool sees there)."""
    done = subprocess.run(["nsenter", f"--net={netns_path}", *argv], capture_output=True,
                          text=True, timeout=10, check=True)
    return done.stdout


def worker_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    return {line.split(": ")[1].split("@")[0] for line in out.splitlines()}


def mounts_under(directory: Path) -> list[str]:
    real = os.path.realpath(directory)
    with open("/proc/self/mountinfo") as f:
        points = [line.split(" ")[4] for line in f]
    return [p for p in points if os.path.dirname(p) == real]


def table_sets() -> dict[str, set[str]] | None:
    """Each set of ``inet ateom`` and its elements (nft's plain listing), None if no table."""
    done = subprocess.run([NFT, "-j", "list", "table", "inet", "ateom"], capture_output=True,
                          text=True, timeout=10)
    if done.returncode != 0:
        return None
    sets = {}
    for item in json.loads(done.stdout)["nftables"]:
        if "set" in item:
            sets[item["set"]["name"]] = set(item["set"].get("elem", []))
    return sets


@contextlib.contextmanager
def pod_namespace(*, forwarding: bool = True) -> Iterator[None]:
    """This thread (and the threads and processes it starts) in a fresh network
    namespace shaped like a worker Pod's: ``lo``, an ``eth0`` with a default
    route, ``ip_forward`` as asked. The machine's own namespace (its links, its
    nftables) is never touched; the namespace goes away with whatever the test
    left in it."""
    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
        try:
            for argv in (["link", "set", "lo", "up"],
                         ["link", "add", "eth0", "type", "veth", "peer", "name", "uplink"],
                         ["addr", "add", "10.99.0.2/24", "dev", "eth0"],
                         ["link", "set", "uplink", "up"],
                         ["link", "set", "eth0", "up"],
                         ["route", "add", "default", "via", "10.99.0.1"]):
                subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=10)
            with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
                f.write("1" if forwarding else "0")
            yield
        finally:
            if _libc.setns(saved, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the test's namespace")
    finally:
        os.close(saved)


@pytest.fixture
def worker_netns() -> Iterator[None]:
    with pod_namespace():
        yield


@pytest.fixture
def egress_port() -> int:
    return free_port()


@pytest.fixture
def networks(worker_netns: None, tmp_path: Path, egress_port: int) -> Iterator[ActorNetworks]:
    """Started networks with an egress port; everything stopped afterwards, even on
    failure (then swept once more by a fresh object)."""
    nets = ActorNetworks(str(tmp_path / "run"), egress_port=egress_port,
                         runner=subprocess_runner)
    nets.start()
    try:
        yield nets
    finally:
        try:
            nets.stop()
        finally:
            with contextlib.suppress(Exception):
                again = ActorNetworks(str(tmp_path / "run"), egress_port=None,
                                      runner=subprocess_runner)
                again._sweep()
                subprocess.run([NFT, "delete", "table", "inet", "ateom"], capture_output=True,
                               timeout=10)
