"""End to end: inject a simulated GPU into a busybox bundle, run it under real runtimes.

The GPU nodes are stand-in host char devices (/dev/null, /dev/full, ...), the
driver libraries real gcc-built ELF objects, the spec goes through the real CDI
registry, and the container really runs (runc, and gVisor's runsc with
--network=none --ignore-cgroups). Assertions are made from inside the container.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from ateom.cdi.registry import Registry
from ateom.inject import InjectOptions, inject_devices
from tests.support import (
    FakeLibrary,
    build_busybox_bundle,
    build_cuda_probe,
    host_loader_mounts,
    run_container,
    runtime_available,
    write_sim_gpu_spec,
)
from tests.support.runsc_real import real_runsc

pytestmark = [pytest.mark.root, pytest.mark.runtime]

LIB_DIR = "/usr/local/nvidia/lib64"
DEVICE = "nvidia.com/gpu=0"
NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")

# Prints what the assertions need, one fact per line, whatever fails.
SCRIPT = (
    "env | sed 's/^/env: /'; "
    f"for n in {' '.join(NODES)}; do "
    "  if [ -e $n ]; then stat -c 'node: %n %F %t %T' $n; else echo \"node: $n absent\"; fi; "
    "done; "
    f"for l in {LIB_DIR}/*.so.[0-9]; do "
    "  echo \"link: $l -> $(readlink $l) $(md5sum < $l | cut -d' ' -f1)\"; "
    "done; "
    "/bin/cuda-probe; echo \"probe: $?\""
)


def needs(runtime: str) -> None:
    why = runtime_available(runtime)
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def gpu(tmp_path_factory: pytest.TempPathFactory,
        fake_driver: list[FakeLibrary]) -> dict[str, object]:
    work = tmp_path_factory.mktemp("e2e")
    spec = write_sim_gpu_spec(work / "cdi", fake_driver, gpus=2, container_lib_dir=LIB_DIR)
    probe = build_cuda_probe(work / "cuda-probe", fake_driver[0].path)
    hook = work / "trusted-hook"
    hook.write_text('#!/bin/sh\necho "$0 $*" >> "$(dirname "$0")/hook-$$.log"\n')
    hook.chmod(0o755)
    return {"work": work, "spec": spec, "probe": probe, "hook": hook}


def injected_bundle(where: Path, gpu: dict[str, object]) -> Path:
    bundle = build_busybox_bundle(
        where, ["sh", "-c", SCRIPT],
        env=["NVIDIA_VISIBLE_DEVICES=all", "LD_LIBRARY_PATH=/opt/app/lib"],
        mounts=host_loader_mounts())
    probe = bundle / "rootfs/bin/cuda-probe"
    probe.write_bytes(Path(str(gpu["probe"])).read_bytes())
    probe.chmod(0o755)
    options = InjectOptions(allowed_hooks=frozenset({"create-symlinks"}),
                            hook_binary=str(gpu["hook"]), library_dirs=(LIB_DIR,),
                            drop_env=("NVIDIA_VISIBLE_DEVICES",))
    resolution = Registry.load([str(Path(str(gpu["spec"])).parent)]).resolve([DEVICE])
    inject_devices(bundle, resolution, options)
    return bundle


def facts(stdout: str, kind: str) -> list[str]:
    prefix = f"{kind}: "
    return [line[len(prefix):] for line in stdout.splitlines() if line.startswith(prefix)]


def expected_nodes(spec_path: Path) -> dict[str, tuple[int, int]]:
    """Container node -> the (major, minor) of the host stand-in the spec names."""
    spec = json.loads(spec_path.read_text())
    edits = [spec["containerEdits"], spec["devices"][0]["containerEdits"]]
    out = {}
    for e in edits:
        for node in e.get("deviceNodes", []):
            st = os.stat(node["hostPath"])
            out[node["path"]] = (os.major(st.st_rdev), os.minor(st.st_rdev))
    return out


def check_common(stdout: str, fake_driver: list[FakeLibrary]) -> None:
    env = facts(stdout, "env")
    assert f"LD_LIBRARY_PATH={LIB_DIR}:/opt/app/lib" in env
    assert f"NVIDIA_CTK_LIBCUDA_DIR={LIB_DIR}" in env
    assert not [e for e in env if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
    # Each SONAME link resolves, inside the container, to the mounted library.
    md5 = {lib.name: hashlib.md5(lib.path.read_bytes()).hexdigest() for lib in fake_driver}
    links = {}
    for line in facts(stdout, "link"):
        path, _, rest = line.partition(" -> ")
        target, digest = rest.split()
        links[os.path.basename(path)] = target
        assert md5[target] == digest
    assert links["libcuda.so.1"] == "libcuda.so.580.65.06"
    assert links["libnvidia-ml.so.1"] == "libnvidia-ml.so.580.65.06"
    # A program linked against libcuda.so.1 finds it through the link and cuInit succeeds.
    assert "cuInit=0" in stdout
    assert facts(stdout, "probe") == ["0"]


def seen_nodes(stdout: str) -> dict[str, tuple[int, int]]:
    """Each device node the container reported: (major, minor)."""
    seen = {}
    for line in facts(stdout, "node"):
        name, _, rest = line.partition(" ")
        assert rest.startswith("character special file"), line
        major, minor = rest.split()[-2:]
        seen[name] = (int(major, 16), int(minor, 16))
    return seen


def test_runc_sees_env_links_and_device_nodes_with_host_numbers(
        tmp_path: Path, gpu: dict[str, object], fake_driver: list[FakeLibrary]) -> None:
    needs("runc")
    bundle = injected_bundle(tmp_path / "bundle", gpu)
    for log in Path(str(gpu["work"])).glob("hook-*.log"):
        log.unlink()
    result = run_container("runc", bundle)
    assert result.returncode == 0, result.stderr
    check_common(result.stdout, fake_driver)
    # runc creates arbitrary nodes: every injected node is there, with its numbers.
    want = expected_nodes(Path(str(gpu["spec"])))
    assert seen_nodes(result.stdout) == {n: want[n] for n in NODES}
    # The allowlisted hook ran, from the trusted binary, with the spec's arguments.
    logs = [p.read_text() for p in Path(str(gpu["work"])).glob("hook-*.log")]
    assert logs == [f"{gpu['hook']} create-symlinks --link libcuda.so.1::{LIB_DIR}/libcuda.so\n"]


def test_runsc_runs_cuda_program_and_ignores_non_emulated_nodes(
        tmp_path: Path, gpu: dict[str, object], fake_driver: list[FakeLibrary]) -> None:
    needs("runsc")
    bundle = injected_bundle(tmp_path / "bundle", gpu)
    result = run_container("runsc", bundle)
    assert result.returncode == 0, result.stderr
    check_common(result.stdout, fake_driver)
    # Without nvproxy, Debian's 2022 runsc creates no device node it does not
    # emulate; from 0.0~20240729 it makes each linux.devices entry a node with
    # the spec's numbers (it opens nothing on the host: no I/O reaches it).
    if real_runsc(shutil.which("runsc") or "runsc").release.date < 20240729:
        assert facts(result.stdout, "node") == [f"{n} absent" for n in NODES]
        return
    want = expected_nodes(Path(str(gpu["spec"])))
    assert seen_nodes(result.stdout) == {n: want[n] for n in NODES}


def test_runsc_cuda_program_fails_without_the_soname_link(
        tmp_path: Path, gpu: dict[str, object]) -> None:
    """The control: the staged link, not luck, is what lets the loader find libcuda."""
    needs("runsc")
    bundle = injected_bundle(tmp_path / "bundle", gpu)
    (bundle / "rootfs" / LIB_DIR.lstrip("/") / "libcuda.so.1").unlink()
    result = run_container("runsc", bundle)
    assert "error while loading shared libraries: libcuda.so.1" in result.stdout + result.stderr
    assert "cuInit=0" not in result.stdout
    assert facts(result.stdout, "probe") != ["0"]


@pytest.mark.parametrize("runtime", ["runsc", "runc"])
def test_run_container_cleans_up_after_a_timeout(tmp_path: Path, runtime: str) -> None:
    """tests.support's runner leaves no sandbox behind, even when the run hangs."""
    needs(runtime)
    # runc's container shell is a host process (found by the marker in its
    # cmdline); runsc's sandbox and gofer carry the container id in theirs.
    marker = f"ateom-timeout-{uuid.uuid4().hex}"
    bundle = build_busybox_bundle(tmp_path / "bundle", ["sh", "-c", f"sleep 600; : {marker}"])
    result = run_container(runtime, bundle, timeout=3)
    assert result.timed_out
    leftovers = [pid for pid in os.listdir("/proc") if pid.isdigit()
                 and (result.container_id in _cmdline(pid) or marker in _cmdline(pid))]
    assert leftovers == []


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
