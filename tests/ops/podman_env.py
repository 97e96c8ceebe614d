"""podman for the image test: a storage of its own, and the base image made locally.

No container registry is reachable from the project's machines, so the Dockerfile's
base (`ARG BASE_IMAGE`, a Debian slim tag) is made here with mmdebstrap from Debian's
archive and imported under exactly that name into a podman storage that belongs to
the test (the machine's own images are never touched). The build then runs the
Dockerfile unchanged, with no build arguments, once per test session: every image test
(`test_worker_image.py`, `test_substrate_deployment.py`) takes the same storage and image
(`shared_podman`, `shared_build`), removed when the session ends.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITES = {"12": "bookworm", "13": "trixie"}
# The machine's own extra trust anchors (e.g. those of a TLS-inspecting egress proxy in
# front of PyPI): a base image made for this network carries them, as a company's
# base image would; the Dockerfile's build stage installs ca-certificates, which adds
# them to the store pip reads. Absent elsewhere: nothing is copied.
LOCAL_CA_DIR = Path("/usr/local/share/ca-certificates")
TAG = "localhost/ateom-worker:image-test"  # the default image, as `podman build` makes it
# Linux's capabilities by bit, for the masks of /proc/<pid>/status.
CAP_NAMES = ["CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
             "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST",
             "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO",
             "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
             "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE",
             "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
             "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE"]


def caps_of(status: str, field: str) -> set[str]:
    """The capability names of one mask line (CapEff, CapBnd …) of /proc/<pid>/status."""
    [mask] = [int(line.split()[1], 16) for line in status.splitlines()
              if line.startswith(field + ":")]
    return {name for bit, name in enumerate(CAP_NAMES) if mask >> bit & 1}


def default_base_image() -> str:
    """The Dockerfile's `ARG BASE_IMAGE` default."""
    m = re.search(r"^ARG BASE_IMAGE=(\S+)$", (REPO / "Dockerfile").read_text(), re.M)
    assert m, "Dockerfile: no ARG BASE_IMAGE default"
    return m.group(1)


def suite_of(image: str) -> str:
    """Debian's suite for a `debian:<major>[.<minor>]-slim` tag."""
    m = re.fullmatch(r"debian:(\d+)(\.\d+)?-slim", image)
    if not m or m.group(1) not in SUITES:
        raise ValueError(f"cannot make {image!r} locally: not a debian:<12|13>[.N]-slim tag")
    return SUITES[m.group(1)]


def missing_tools() -> list[str]:
    return [t for t in ("podman", "mmdebstrap", "runc") if shutil.which(t) is None]


@dataclass(frozen=True)
class Podman:
    root: Path

    def argv(self, *args: str) -> list[str]:
        # runc: what containerd runs a Pod's containers with by default, and crun 1.8
        # refuses hosts with cgroup v1 controllers mounted ("hybrid mode"). cgroupfs:
        # these machines have no systemd to hand cgroups out.
        return ["podman", "--root", str(self.root / "storage"), "--runroot",
                str(self.root / "run"), "--runtime", "runc", "--cgroup-manager", "cgroupfs",
                *args]

    def __call__(self, *args: str, timeout: float = 120, check: bool = True
                 ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.argv(*args), capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args[:3])}… exit {done.returncode}:\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def limits(self) -> list[str]:
        """rlimits this process can hand on. podman asks root's containers for more
        (nofile 1048576) than a session without CAP_SYS_RESOURCE may grant, and the
        container's conmon holds nproc 32768: both capped, as a kubelet's containerd
        would hand on its own."""
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
        return [f"--ulimit=nofile={nofile}:{nofile}", f"--ulimit=nproc={nproc}:{nproc}"]

    def make_base(self, image: str, work: Path) -> None:
        """`image` (a Debian slim tag) from Debian's archive, imported under its
        docker.io name so the Dockerfile's FROM resolves to it without a registry."""
        tarball = work / "base.tar"
        hook = 'mkdir -p "$1/usr/local/share/ca-certificates"'
        if any(LOCAL_CA_DIR.glob("*.crt")):
            hook += f' && cp {LOCAL_CA_DIR}/*.crt "$1/usr/local/share/ca-certificates/"'
        done = subprocess.run(
            ["mmdebstrap", "--quiet", "--variant=minbase", "--format=tar",
             f"--customize-hook={hook}", suite_of(image), str(tarball)],
            capture_output=True, text=True, timeout=900, check=False,
            env={**os.environ, "TMPDIR": str(work)})
        assert done.returncode == 0, f"mmdebstrap {suite_of(image)}: {done.stderr[-3000:]}"
        self("import", str(tarball), "docker.io/library/" + image, timeout=300)
        tarball.unlink()


@dataclass
class _Session:
    """The storage and the default image every image test of this session shares."""

    podman: Podman | None = None
    skip: str = ""          # why podman cannot run here (every image test skips, saying so)
    build_log: str = ""
    build_failed: str = ""  # the build's failure, not retried by the next module


_SESSION = _Session()


def shared_podman(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Podman:
    """podman with a storage of the session's own, made once and removed (containers,
    images, dir) when the session ends; skips where podman cannot work at all."""
    if _SESSION.skip:
        pytest.skip(_SESSION.skip)
    if _SESSION.podman is None:
        root = tmp_path_factory.mktemp("podman")
        tool = Podman(root)
        info = tool("info", check=False)
        if info.returncode != 0:  # podman itself cannot work here (e.g. no storage driver)
            _SESSION.skip = f"podman cannot run on this machine: {info.stderr.strip()[-500:]}"
            shutil.rmtree(root, ignore_errors=True)
            pytest.skip(_SESSION.skip)
        config.add_cleanup(lambda: _remove(tool))
        _SESSION.podman = tool
    return _SESSION.podman


def _remove(tool: Podman) -> None:
    tool("rm", "--all", "--force", "--time", "0", check=False)
    tool("rmi", "--all", "--force", check=False, timeout=300)
    # containers/storage's overlay driver mounts its dir over itself (private) and leaves
    # it mounted when podman exits: unmounted here, or the tree cannot be removed.
    subprocess.run(["umount", str(tool.root / "storage" / "overlay")], capture_output=True,
                   timeout=60, check=False)
    shutil.rmtree(tool.root, ignore_errors=True)
    _SESSION.podman = None


def shared_build(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The build log of `podman build -f Dockerfile .` (no build arguments, tagged TAG),
    built the first time an image test asks for it in this session."""
    if _SESSION.build_failed:
        pytest.fail(f"the image build failed earlier in this session:\n{_SESSION.build_failed}")
    if not _SESSION.build_log:
        try:
            podman.make_base(default_base_image(), tmp_path_factory.mktemp("base"))
            done = podman("build", *podman.limits(), "-f", "Dockerfile", "-t", TAG, str(REPO),
                          timeout=1800)
        except (AssertionError, subprocess.TimeoutExpired) as exc:
            _SESSION.build_failed = str(exc)[-3000:]
            raise
        _SESSION.build_log = done.stdout + done.stderr
    return _SESSION.build_log
