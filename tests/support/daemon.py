"""The e2e suites' world: `DaemonWorld` (a `tests.support.world.SimWorker` with an
emulated runsc per gVisor release), `Daemon` (``ateom serve`` on it as a subprocess, with
its gRPC clients) and `run_request`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from tests.support import (
    DEFAULT_DRIVER_VERSION,
    EmulatedRunsc,
    build_busybox_bundle,
    install_runsc,
    sim_gpus,
)
from tests.support.cuda_checkpoint_stub import install_cuda_checkpoint_stub
from tests.support.runsc_release import load_release
from tests.support.world import actor_dirs, sim_worker

RUNSC = shutil.which("runsc")
GLOBAL_FLAGS = ("--network=none", "--ignore-cgroups")
LIB_DIR = "/usr/local/nvidia/lib64"

# The set-up's runsc (Debian's 0.0~20240729 or newer) has no
# --cuda-checkpoint-path and knows no driver past 550.90.07: the daemon under
# test runs an emulated gVisor release in front of it (tests.support.runsc_emu),
# which answers probes as that release, applies its GPU rules, strips what the
# real build lacks and records every call. The newest release is the default:
# today's ateom behaves right on it for every test here (a GPU actor's
# checkpoint included: 20260706+ saves live GPU clients and records the GPUs).
DEFAULT_RELEASE = "20260817"
# Release-independent tests run on these: Debian 12's own, the first with
# multi-container restore and restore -background, the first with
# --cuda-checkpoint-path, and the newest.
RELEASES = ("20221219", "20240930", "20260608", "20260817")
# GPU actors (refused without nvproxy) that only run: the oldest release here with
# nvproxy (its driver ABI chosen by --nvproxy-driver-version) and the newest
# (nvproxy also auto-enabled by /dev/nvidiactl); between them nothing differs for a run.
GPU_RELEASES = ("20240930", "20260817")
GPUS = 2
# Where the cuda-checkpoint stand-in records its runs, inside a GPU container
# (a test mounts a writable dir of the actor's there: ateom mounts the tool
# itself read-only, as a single file).
STUB_RECORD_DIR = "/cuda-stub"


def release_options(release: str) -> dict[str, str]:
    """Daemon options a release needs: a driver ABI it supports when it predates
    the simulated host's (the operator's --nvproxy-driver-version remedy)."""
    supported = load_release(release).supported_drivers
    if not supported or DEFAULT_DRIVER_VERSION in supported:
        return {}
    return {"nvproxy_driver_version": supported[-1]}


def runsc_processes(root: str) -> list[int]:
    marker = f"--root={root}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in args:
                pids.append(int(entry))
    return pids


def dev_null_ok() -> bool:
    st = os.stat("/dev/null")
    return st.st_uid == 0 and st.st_gid == 0 and stat.S_IMODE(st.st_mode) == 0o666


@dataclass
class DaemonWorld:
    """Everything a daemon under test needs, in one temp dir."""

    base: Path
    gpus: int = GPUS  # the simulated worker's GPUs (and the emulated runsc's)
    actors_root: Path = field(init=False)
    spec_dir: Path = field(init=False)
    gpu_glob: str = field(init=False)
    run_dir: Path = field(init=False)
    socket: Path = field(init=False)
    emulators: dict[str, EmulatedRunsc] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.actors_root = self.base / "actors"
        self.run_dir = self.base / "run"
        self.socket = self.run_dir / "ateom.sock"
        self.actors_root.mkdir(parents=True)
        worker = sim_worker(self.base, gpus=self.gpus, driver=DEFAULT_DRIVER_VERSION,
                            container_lib_dir=LIB_DIR)
        self.spec_dir = worker.spec_dir
        self.gpu_node = worker.node
        self.gpu_glob = worker.node.gpu_glob
        # The worker's cuda-checkpoint: a stand-in that records its runs.
        self.cuda_checkpoint = install_cuda_checkpoint_stub(
            self.base / "cuda-checkpoint", record_dir=STUB_RECORD_DIR).host_dir / "cuda-checkpoint"

    def runsc(self, release: str = DEFAULT_RELEASE) -> EmulatedRunsc:
        """The emulated runsc of `release` in this world (installed on first use),
        with the world's GPUs and the fake driver's version as the host's."""
        if release not in self.emulators:
            self.emulators[release] = install_runsc(
                release, self.base / f"runsc-{release}", real_runsc=RUNSC,
                driver_version=DEFAULT_DRIVER_VERSION, gpus=sim_gpus(self.gpus))
        return self.emulators[release]

    @property
    def shim(self) -> Path:
        """The default emulated runsc's path (tests/ops start daemons with it)."""
        return self.runsc().path

    def actor_dirs(self, uid: str) -> pb.ActorDirs:
        """`uid`'s dirs (`tests.support.world.actor_dirs`), as the wire carries them."""
        d = actor_dirs(self.actors_root, uid)
        return pb.ActorDirs(root_dir=d.root_dir, oci_bundle_dir=d.oci_bundle_dir,
                            checkpoint_dir=d.checkpoint_dir, restore_dir=d.restore_dir)

    def bundles(self, uid: str, apps: dict[str, list[str]], pause_args: list[str] | None = None,
                *, stub_record: bool = False) -> Path:
        """The actor's bundles; with `stub_record`, each app container mounts
        `stub_record_dir(uid)` writable where the cuda-checkpoint stand-in records."""
        bundles = self.actors_root / uid / "bundles"
        build_busybox_bundle(bundles / "_pause", pause_args or ["sleep", "1000"])
        mounts = []
        if stub_record:
            self.stub_record_dir(uid).mkdir(parents=True, exist_ok=True)
            mounts = [{"destination": STUB_RECORD_DIR, "type": "bind", "options": ["rbind", "rw"],
                       "source": str(self.stub_record_dir(uid))}]
        for name, args in apps.items():
            build_busybox_bundle(bundles / name, args, mounts=mounts)
        return bundles

    def stub_record_dir(self, uid: str) -> Path:
        """Where the cuda-checkpoint stand-in's runs in `uid`'s containers land."""
        return self.actors_root / uid / "cuda-stub"

    def daemon_args(self, runsc: str, *, run_dir: Path | None = None,
                    networks: bool = False, **extra: str) -> list[str]:
        """`ateom serve` for this world; `run_dir` (socket inside) defaults to the world's.
        `networks`: each actor gets a network of its own (runsc's default network, not
        --network=none)."""
        run_dir = run_dir or self.run_dir
        args = [
            sys.executable, "-m", "ateom", "serve",
            "--socket", str(run_dir / "ateom.sock"),
            "--actors-root", str(self.actors_root),
            "--runsc", runsc,
            "--run-dir", str(run_dir),
            "--spec-dir", str(self.spec_dir),
            "--gpu-glob", self.gpu_glob,
            "--proc-root", self.gpu_node.proc_root,
            "--cuda-checkpoint", str(self.cuda_checkpoint),
            "--kill-grace", "0.5",
            "--shutdown-grace", "2",
        ]
        for flag in GLOBAL_FLAGS:
            if not (networks and flag.startswith("--network")):
                args.append(f"--runsc-global-flag={flag}")
        for key, value in extra.items():
            flag = f"--{key.replace('_', '-')}"
            # A value that starts with a dash only reads as one with `=`.
            args += [f"{flag}={value}"] if value.startswith("-") else [flag, value]
        return args


class Daemon:
    """`ateom serve` as a subprocess, with its JSON log captured to a file.

    Daemons of one world share its actors root; each needs its own `run_dir`
    (socket, runsc state, logs) to run beside another.
    """

    def emulator(self) -> EmulatedRunsc:
        """The emulated runsc this daemon runs (its calls are the test's evidence)."""
        return self.world.runsc(self.release)

    def __init__(self, world: DaemonWorld, runsc: str, *, wrap: tuple[str, ...] = (),
                 run_dir: Path | None = None, release: str = "", socket: Path | None = None,
                 expect: str = "SERVING", networks: bool = False, **extra: str) -> None:
        self.world = world
        self.runsc = runsc
        self.release = release  # the emulated runsc release, "" for another binary
        self.run_dir = run_dir or world.run_dir
        # `socket` elsewhere than in the run dir: a second daemon on the same run
        # dir (a crashed predecessor's stand-in) must not take the first's socket.
        self.socket = socket or self.run_dir / "ateom.sock"
        self.log_path = world.base / f"daemon-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        env = dict(os.environ)
        env["ATEOM_NVIDIA_TOOLKIT_DIR"] = str(world.base / "toolkit")
        # The simulated node's nvidia-smi, found on PATH as an image's would be.
        env["PATH"] = f"{os.path.dirname(world.gpu_node.nvidia_smi)}:{env.get('PATH', '')}"
        self.proc = subprocess.Popen(
            [*wrap, *world.daemon_args(runsc, run_dir=self.run_dir, networks=networks, **extra),
             *(["--socket", str(socket)] if socket is not None else [])],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        )
        self.channel = grpc.insecure_channel(f"unix:{self.socket}")
        self.stub = pb_grpc.AteomStub(self.channel)
        self.inspect = pb_grpc.InspectStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.wait_serving(expect=expect)

    def wait_serving(self, timeout: float = 20.0, *, expect: str = "SERVING") -> None:
        """Until Health answers `expect` (SERVING, or NOT_SERVING for a daemon that
        cannot run actors)."""
        wanted = health_pb2.HealthCheckResponse.ServingStatus.Value(expect)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}:\n{self.logs()}")
            try:
                resp = self.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                if resp.status == wanted:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"daemon not {expect} after {timeout}s:\n{self.logs()}")

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until no actor is releasing: every answered checkpoint's sandbox
        reaped and its worker freed (the daemon does that after the answer)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.inspect.GetStatus(pb.GetStatusRequest(), timeout=10)
            if not any(a.phase == "releasing" for a in status.actors):
                return
            time.sleep(0.02)
        raise AssertionError(f"actors still releasing after {timeout}s: {status.actors}")

    def own_config(self, uid: str, container: str) -> dict[str, Any]:
        """The config runsc reads for a hosted actor's container: ateom's own copy in
        its run dir (`ateom.daemon.bundles.store`; the node agent's is never written)."""
        path = self.run_dir / "bundles" / uid / container / "config.json"
        return dict(json.loads(path.read_text()))

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.logs().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
        return events

    def crash(self, timeout: float = 30.0) -> None:
        """``kill -9`` the daemon's own process (started without `wrap`): its
        sandboxes, reparented, keep running, as after a crash."""
        self.proc.kill()
        self.proc.wait(timeout)

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.channel.close()
        self._log.close()
        return code


def wait_for(path: Path, text: str, timeout: float = 30.0) -> str:
    """The file's text once `text` appears in it (a container's log, say)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in (content := path.read_text(errors="replace")):
            return content
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


def run_request(world: DaemonWorld, uid: str, containers: list[pb.Container], **kw: Any
                ) -> pb.RunWorkloadRequest:
    return pb.RunWorkloadRequest(
        atespace="default", actor_name=f"actor-{uid}", actor_uid=uid,
        spec=pb.WorkloadSpec(containers=containers), actor_dirs=world.actor_dirs(uid), **kw,
    )
