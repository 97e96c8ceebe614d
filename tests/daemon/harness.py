"""Shared e2e parts: a simulated-GPU world, a daemon subprocess, a gRPC client."""

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
from ateom.testing import (
    build_busybox_bundle,
    build_fake_driver_libs,
    write_sim_gpu_spec,
)

RUNSC = shutil.which("runsc")
GLOBAL_FLAGS = ("--network=none", "--ignore-cgroups")
LIB_DIR = "/usr/local/nvidia/lib64"

# Records --nvproxy* flags (one line per call), answers `flags` as if it had
# nvproxy, and execs the real runsc without them (Debian's runsc has none).
SHIM = """#!/bin/sh
REAL={real}
REC={record}
if [ "$1" = flags ]; then
    "$REAL" flags 2>&1
    printf '  -nvproxy\\n    \\tEXPERIMENTAL: enable support for Nvidia GPUs (shim).\\n'
    printf '  -nvproxy-driver-version string\\n    \\tshim\\n'
    exit 0
fi
seen=""
for a in "$@"; do
    case "$a" in
        --nvproxy*|-nvproxy*) seen="$seen $a" ;;
        *) set -- "$@" "$a" ;;
    esac
    shift
done
[ -n "$seen" ] && echo "$*:$seen" >> "$REC"
exec "$REAL" "$@"
"""


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
class World:
    """Everything a daemon under test needs, in one temp dir."""

    base: Path
    actors_root: Path = field(init=False)
    spec_dir: Path = field(init=False)
    gpu_glob: str = field(init=False)
    run_dir: Path = field(init=False)
    socket: Path = field(init=False)
    shim: Path = field(init=False)
    shim_record: Path = field(init=False)

    def __post_init__(self) -> None:
        self.actors_root = self.base / "actors"
        self.spec_dir = self.base / "cdi"
        self.run_dir = self.base / "run"
        self.socket = self.run_dir / "ateom.sock"
        self.actors_root.mkdir(parents=True)
        libs = build_fake_driver_libs(self.base / "driver" / "lib64")
        write_sim_gpu_spec(self.spec_dir, libs, gpus=2, container_lib_dir=LIB_DIR)
        devdir = self.base / "dev"
        devdir.mkdir()
        (devdir / "nvidia0").touch()
        (devdir / "nvidia1").touch()
        self.gpu_glob = str(devdir / "nvidia[0-9]*")
        shim_dir = self.base / "runsc-bin"
        shim_dir.mkdir()
        self.shim = shim_dir / "runsc"
        self.shim_record = self.base / "nvproxy-calls.txt"
        self.shim.write_text(SHIM.format(real=RUNSC, record=self.shim_record))
        self.shim.chmod(0o755)

    def actor_dirs(self, uid: str) -> pb.ActorDirs:
        root = self.actors_root / uid
        return pb.ActorDirs(
            root_dir=str(root),
            oci_bundle_dir=str(root / "bundles"),
            checkpoint_dir=str(root / "checkpoint"),
            restore_dir=str(root / "restore"),
        )

    def bundles(self, uid: str, apps: dict[str, list[str]], pause_args: list[str] | None = None,
                ) -> Path:
        bundles = self.actors_root / uid / "bundles"
        build_busybox_bundle(bundles / "_pause", pause_args or ["sleep", "1000"])
        for name, args in apps.items():
            build_busybox_bundle(bundles / name, args)
        return bundles

    def daemon_args(self, runsc: str, **extra: str) -> list[str]:
        args = [
            sys.executable, "-m", "ateom", "serve",
            "--socket", str(self.socket),
            "--actors-root", str(self.actors_root),
            "--runsc", runsc,
            "--run-dir", str(self.run_dir),
            "--spec-dir", str(self.spec_dir),
            "--gpu-glob", self.gpu_glob,
            "--kill-grace", "0.5",
            "--shutdown-grace", "2",
        ]
        for flag in GLOBAL_FLAGS:
            args.append(f"--runsc-global-flag={flag}")
        for key, value in extra.items():
            args += [f"--{key.replace('_', '-')}", value]
        return args


class Daemon:
    """`ateom serve` as a subprocess, with its JSON log captured to a file."""

    def __init__(self, world: World, runsc: str, *, wrap: tuple[str, ...] = (),
                 **extra: str) -> None:
        self.world = world
        self.log_path = world.base / f"daemon-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        env = dict(os.environ)
        env["ATEOM_NVIDIA_TOOLKIT_DIR"] = str(world.base / "toolkit")
        self.proc = subprocess.Popen(
            [*wrap, *world.daemon_args(runsc, **extra)], stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=env,
        )
        self.channel = grpc.insecure_channel(f"unix:{world.socket}")
        self.stub = pb_grpc.AteomStub(self.channel)
        self.inspect = pb_grpc.InspectStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.wait_serving()

    def wait_serving(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}:\n{self.logs()}")
            try:
                resp = self.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"daemon not SERVING after {timeout}s:\n{self.logs()}")

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


def run_request(world: World, uid: str, containers: list[pb.Container], **kw: Any
                ) -> pb.RunWorkloadRequest:
    return pb.RunWorkloadRequest(
        atespace="default", actor_name=f"actor-{uid}", actor_uid=uid,
        spec=pb.WorkloadSpec(containers=containers), actor_dirs=world.actor_dirs(uid), **kw,
    )
