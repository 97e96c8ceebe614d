"""The actor: turn_app and its kernels built on this machine, a rootfs of what they
load, bundles of it, and the app's tick lines read back.

turn_app (``turn_app.c``) fills MIB MiB of device memory with a pattern and, every
PERIOD_MS, ticks a counter kept in device memory and checks the whole pattern,
printing ``tick=<counter> bad=<words wrong> t=<time>``: after a checkpoint and
restore the counter must go on from its saved value and no word may be wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from scripts.gpu_real_turn.node import StepFailed, driver_libraries, run

HERE = Path(__file__).resolve().parent
# A whole line only (t with its three decimals): one still being written is not read.
TICK_RE = re.compile(r"^tick=(\d+) bad=(\d+) t=(\d+\.\d{3})\n", re.MULTILINE)
PERIOD_MS = 100


def ticks(log: Path, offset: int = 0) -> list[tuple[int, int, float]]:
    """(counter, bad words, time) of each tick line past byte `offset` of the app's log."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return []
    return [(int(n), int(b), float(t)) for n, b, t in TICK_RE.findall(text)]


def wait_ticks(log: Path, offset: int, count: int, timeout: float, what: str
               ) -> list[tuple[int, int, float]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = ticks(log, offset)
        if len(seen) >= count:
            return seen
        time.sleep(0.01)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise StepFailed(f"{what}: fewer than {count} tick(s) in {log} within {timeout:.0f} s;"
                     f" its end:\n{tail}")


def ldd_closure(binary: Path, driver_dir: str) -> list[Path]:
    """The shared objects `binary` loads (ldd), the driver's own left out: the spec
    mounts those."""
    r = run(["ldd", str(binary)], 30)
    paths = []
    for line in r.out.splitlines():
        m = re.search(r"(/\S+)\s+\(0x", line)
        if m and "libcuda.so" not in line and os.path.dirname(m.group(1)) != driver_dir:
            paths.append(Path(m.group(1)))
    return paths


def copy_into(rootfs: Path, host: Path, at: str | None = None) -> None:
    dest = rootfs / (at or str(host)).lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(host.resolve(), dest)


class App:
    """turn_app built under `work`; `args` as turn.py parsed them, `facts` the node's."""

    def __init__(self, args: argparse.Namespace, facts: dict[str, Any]) -> None:
        self.args = args
        self.facts = facts
        self.work: Path = args.work

    @property
    def lib_dir(self) -> str:
        """The driver's libraries as the node step found them (lib64/ before it ran)."""
        return str(self.args.lib_dir or Path(self.args.driver_root) / "lib64")

    def build(self, data: dict[str, Any]) -> None:
        """turn_app with the machine's gcc, its kernels as PTX with nvcc where there is
        one; a rootfs template holding them, busybox and what they load."""
        build = self.work / "build"
        build.mkdir(parents=True, exist_ok=True)
        gcc = run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(build / "turn_app"),
                   str(HERE / "turn_app.c"), "-ldl"], 120)
        if not gcc.ok:
            raise StepFailed(f"gcc: {gcc.why()}")
        nvcc = shutil.which("nvcc")
        ptx = build / "turn_kernels.ptx"
        if nvcc:
            r = run([nvcc, "-ptx", "-arch=compute_90", "-o", str(ptx),
                     str(HERE / "turn_kernels.cu")], 180)
            if not r.ok:
                raise StepFailed(f"nvcc: {r.why()}")
            data["module"] = f"PTX from {nvcc} ({run([nvcc, '--version'], 30).out.strip()[-60:]})"
        else:
            shutil.copy(HERE / "turn_kernels.cu", ptx)
            data["module"] = ("no nvcc here: the module is the kernels' source text, which only"
                              " a stand-in libcuda takes")
        rootfs = self.work / "rootfs"
        shutil.rmtree(rootfs, ignore_errors=True)
        for sub in ("bin", "dev", "proc", "sys", "tmp", "etc", "turn"):
            (rootfs / sub).mkdir(parents=True)
        copy_into(rootfs, Path(self.args.busybox), "/bin/busybox")
        for applet in ("sh", "sleep", "cat", "echo", "ls"):
            (rootfs / "bin" / applet).symlink_to("busybox")
        copy_into(rootfs, build / "turn_app", "/turn/turn_app")
        copy_into(rootfs, ptx, "/turn/turn_kernels.ptx")
        # What the app, cuda-checkpoint and the driver's libraries load (glibc's
        # libm, libdl, librt...): a real image has them, the spec does not bring them.
        driver = driver_libraries(Path(self.lib_dir), self.facts.get("driver_version", ""))
        loaded = {p for b in (build / "turn_app", Path(self.args.cuda_checkpoint), *driver)
                  for p in ldd_closure(b, self.lib_dir)}
        for lib in sorted(loaded):
            copy_into(rootfs, lib)
        # libcuda.so.1 on the loader's default path too, for processes that runsc
        # starts without the container's LD_LIBRARY_PATH (cuda-checkpoint, say).
        default = "/usr/lib/x86_64-linux-gnu"
        if os.path.normpath(self.lib_dir) not in (default, "/lib/x86_64-linux-gnu"):
            (rootfs / default.lstrip("/")).mkdir(parents=True, exist_ok=True)
            (rootfs / default.lstrip("/") / "libcuda.so.1").symlink_to(
                f"{self.lib_dir}/libcuda.so.1")
        (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\n")
        data["rootfs_libraries"] = sorted(str(p) for p in loaded)

    def on_host(self, data: dict[str, Any]) -> None:
        """turn_app straight on this machine's driver for two seconds, no gVisor: the
        program and the GPU work apart from ateom and runsc (and libcuda makes
        /dev/nvidia-uvm if nothing had yet)."""
        build = self.work / "build"
        env = {**os.environ, "LD_LIBRARY_PATH": self.lib_dir}
        out = build / "host.log"
        with open(out, "wb") as log:
            app = subprocess.Popen([str(build / "turn_app"), str(build / "turn_kernels.ptx"),
                                    "64", "50"], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env)
            try:
                app.wait(2.5)
            except subprocess.TimeoutExpired:
                app.terminate()
                app.wait(10)
        text = out.read_text(errors="replace")
        seen = ticks(out)
        data["start"] = next((ln for ln in text.splitlines() if "turn_app: start" in ln), "")
        data["ticks"] = len(seen)
        good = [n for n, _, _ in seen] == list(range(1, len(seen) + 1))
        if len(seen) < 3 or not good or any(b for _, b, _ in seen):
            raise StepFailed(f"turn_app on the host (exit {app.returncode}): {text[-1500:]}")

    def bundle(self, directory: Path, argv: list[str]) -> None:
        """An OCI bundle: a copy of the rootfs template, runsc's own starter spec."""
        shutil.copytree(self.work / "rootfs", directory / "rootfs", symlinks=True)
        r = run([self.args.runsc, "spec", "--bundle", str(directory), "--", *argv], 30)
        if not r.ok:
            raise StepFailed(f"runsc spec: {r.why()}")
        config = json.loads((directory / "config.json").read_text())
        config["root"]["readonly"] = False
        config["process"]["terminal"] = False
        config["process"]["env"].append(f"LD_LIBRARY_PATH={self.lib_dir}")
        (directory / "config.json").write_text(json.dumps(config, indent=2))

    def actor_bundles(self, actors: Path, uid: str, mib: int) -> None:
        bundles = actors / uid / "bundles"
        shutil.rmtree(actors / uid, ignore_errors=True)
        self.bundle(bundles / "_pause", ["/bin/sleep", "1000000"])
        self.bundle(bundles / "app", ["/turn/turn_app", "/turn/turn_kernels.ptx", str(mib),
                                      str(PERIOD_MS)])
