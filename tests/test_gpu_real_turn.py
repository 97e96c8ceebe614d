"""scripts/gpu_real_turn.sh, the one command for a lent GPU machine (issue 30): its pure
parts (the driver pin, the runtime, the scrub, the spec), and its dry run: the same
script, every step, on the stand-in node the newest-runsc suites use (stand-in
/dev/nvidia*, nvidia-smi and cuda-checkpoint; the real turn_app on a CPU libcuda),
so that the day a machine is lent it works on its first try. The dry run needs root
and gVisor's newest runsc; without them it says it did not run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ateom.gpuinfo.gather import gather_worker_gpus
from ateom.gpuinfo.inventory import COMPUTE_APPS_ARGS
from scripts.gpu_real_turn.actor import ticks
from scripts.gpu_real_turn.gpu_watch import MEMORY_ARGS
from scripts.gpu_real_turn.node import (
    judge_runtime,
    nearest_driver,
    node_spec,
    scrub,
)
from tests.support.cuda_stand_in import GCC, build_libcuda_stand_in
from tests.support.gpu_node import SimGpu, write_gpu_node, write_sim_fixture
from tests.support.newest_runsc import newest_runsc
from tests.support.stand_in_gpu import can_make_namespaces, stand_in_gpu_prefix

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_real_turn.sh"
DRIVER = "580.95.05"  # not one nvproxy lists: the script must pin the nearest
SIM_UUID = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"
SERIAL = "1654922012345"


# -- pure ----------------------------------------------------------------------------------


def test_nvproxy_is_pinned_to_the_newest_listed_driver_of_the_branch_not_above() -> None:
    listed = ["535.183.06", "570.195.03", "580.65.06", "580.105.08", "580.159.04", "590.48.01"]
    assert nearest_driver("580.95.05", listed) == "580.65.06"
    assert nearest_driver("580.159.03", listed) == "580.105.08"
    assert nearest_driver("580.01.01", listed) == "580.65.06"  # nothing below: the branch's oldest
    assert nearest_driver("575.10.01", listed) == "570.195.03"  # no such branch: newest below
    assert nearest_driver("500.1.1", listed) == "535.183.06"
    assert nearest_driver("580.95.05", []) == ""


def test_the_runtime_is_judged_from_the_kernel() -> None:
    gvisor = "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016\n"
    assert judge_runtime(gvisor, "")[0] == "gvisor"
    fc = "Linux version 6.18.44-fc-v236-gpu (root@build) (gcc) #1 SMP\n"
    assert judge_runtime(fc, "console=ttyS0")[0] == "firecracker"
    assert judge_runtime("Linux version 6.1.0-41-amd64 (debian) #1\n", "ro quiet")[0] == "other"


def test_scrub_replaces_each_uuid_the_same_way_everywhere_and_zeroes_serials() -> None:
    names: dict[str, str] = {}
    other = "GPU-11111111-2222-3333-4444-555555555555"
    q = f"    Serial Number                         : {SERIAL}\n    GPU UUID : {SIM_UUID}\n"
    first = scrub(q, names)
    second = scrub(f"0, {SIM_UUID}, NVIDIA H200\n1, {other}, NVIDIA H200\n", names)
    assert SIM_UUID not in first + second and other not in second and SERIAL not in first
    assert "Serial Number                         : 0000000000000" in first
    assert names[SIM_UUID] in first and names[SIM_UUID] in second
    assert names[SIM_UUID] != names[other]


def test_the_spec_is_what_nvidia_ctk_writes_and_ateom_takes_it(tmp_path: Path) -> None:
    lib = tmp_path / "lib64" / f"libcuda.so.{DRIVER}"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    spec = node_spec(["/dev/nvidia0", "/dev/nvidia1"], ["/dev/nvidiactl"], [lib],
                     [Path("/usr/local/nvidia/bin/nvidia-smi")], str(lib.parent))
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "all"]
    assert spec["devices"][1]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia1", "hostPath": "/dev/nvidia1"}]
    edits = spec["containerEdits"]
    assert [m["containerPath"] for m in edits["mounts"]] == [
        str(lib), "/usr/local/nvidia/bin/nvidia-smi"]
    assert f"NVIDIA_CTK_LIBCUDA_DIR={lib.parent}" in edits["env"] and "hooks" not in edits
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "nvidia.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, "-m", "ateom", "cdi", "validate", str(tmp_path / "cdi")],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ticks_reads_the_apps_lines_past_an_offset(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("I1204 runsc line\ntick=1 bad=0 t=1.500\nturn_app: x\ntick=2 bad=3 t=2.250\n"
                   "tick=3 bad=0 t=3.1")  # the last line still being written
    assert ticks(log) == [(1, 0, 1.5), (2, 3, 2.25)]
    assert ticks(log, log.read_text().index("turn_app")) == [(2, 3, 2.25)]
    assert ticks(tmp_path / "none.log") == []


# -- the dry run ---------------------------------------------------------------------------


def dry_run_node(base: Path) -> Path:
    """The node the dry run records, as a driver root: the recorded layout's /proc
    (``proc/``), libcuda's CPU stand-in in ``lib64/`` linked as NVIDIA's installer
    links it, and ``bin/nvidia-smi`` answering ateom's query, the compute-apps
    (none) and memory queries, and a short ``-q`` with a UUID and a serial to scrub."""
    fixture = write_sim_fixture(base / "fixture", [SimGpu(0, 0, SIM_UUID)],
                                driver_version=DRIVER)
    q = (f"==============NVSMI LOG==============\nDriver Version : {DRIVER}\n"
         f"GPU 00000000:18:00.0\n    Product Name : NVIDIA H200\n"
         f"    Serial Number : {SERIAL}\n    GPU UUID : {SIM_UUID}\n")
    node = write_gpu_node(base / "node", fixture, also={
        " ".join(COMPUTE_APPS_ARGS): "", " ".join(MEMORY_ARGS): "0, 1, 143771\n", "-q": q,
        "": "stand-in nvidia-smi: one NVIDIA H200\n"})
    lib = build_libcuda_stand_in(node.root / "lib64", DRIVER)
    (node.root / "lib64" / "libcuda.so.1").symlink_to(lib.name)
    return node.root


def brought_back_fixtures_read_as_a_recorded_node(packed: Path, tmp_path: Path) -> None:
    """The fixtures the script packs: laid out as tests/fixtures/gpu/<name>/, nothing
    unscrubbed left, and read by the gatherer as any recorded node is."""
    with tarfile.open(packed) as tar:
        names = set(tar.getnames())
        texts = {n: tar.extractfile(n).read().decode()  # type: ignore[union-attr]
                 for n in names if tar.getmember(n).isfile()}
    base = f"h200-1gpu-{DRIVER}"
    assert {f"{base}/proc/driver/nvidia/version", f"{base}/nvidia-smi/q.txt",
            f"{base}/nvidia-smi/query-gpu.csv", f"{base}/cdi/nvidia.json",
            f"{base}/doctor.json", f"{base}/PROVENANCE.md",
            f"{base}/proc/driver/nvidia/gpus/0000:18:00.0/information"} <= names
    assert not [n for n, t in texts.items() if SIM_UUID in t or SERIAL in t]
    # Brought back as it is, the node is one more recorded fixture the parsers' tests read
    # (tests/gpuinfo's `recorded` takes every dir under tests/fixtures/gpu/).
    for name, text in texts.items():  # written by hand: Debian 12's tarfile has no filter=
        (tmp_path / "brought" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "brought" / name).write_text(text)
    node = write_gpu_node(tmp_path / "as-recorded", tmp_path / "brought" / base)
    gathered = gather_worker_gpus(proc_root=node.proc_root, gpu_glob=node.gpu_glob,
                                  nvidia_smi=node.nvidia_smi)
    assert gathered.problems == () and gathered.driver_version == DRIVER
    assert [g.uuid for g in gathered.gpus] == ["GPU-f0000000-0000-4000-8000-000000000000"]


NEWEST, WHY = newest_runsc()
CANNOT = (WHY if NEWEST is None else can_make_namespaces()
          or ("" if GCC else "needs gcc (turn_app, the stand-in libcuda)")
          or ("" if os.path.exists("/bin/busybox") else "needs a static /bin/busybox"))


@pytest.mark.root
@pytest.mark.runtime
@pytest.mark.skipif(bool(CANNOT), reason=f"the gpu_real_turn dry run did not run: {CANNOT}")
def test_the_dry_run_takes_every_step_on_the_stand_in_node(tmp_path: Path) -> None:
    assert NEWEST is not None
    driver = dry_run_node(tmp_path)
    pack = tmp_path / "pack"  # what --pack gathers; the stand-ins here, no wheels
    pack.mkdir()
    (pack / "runsc").symlink_to(NEWEST.path)
    (pack / "busybox").symlink_to("/bin/busybox")
    (pack / "cuda-checkpoint").write_text("#!/bin/sh\nexit 0\n")
    out = tmp_path / "out"
    argv = [*stand_in_gpu_prefix(tmp_path / "ns", 1), "bash", str(SCRIPT),
            "--work", str(tmp_path / "work"), "--driver-root", str(driver),
            "--proc-root", str(driver / "proc"), "--sizes", "8,16,50000", "--budget", "90"]
    env = {**os.environ, "OUT": str(out), "ATEOM_GPU_PACK": str(pack), "PYTHON": sys.executable}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    report = json.loads((out / "report.json").read_text())
    steps = {s["step"]: s for s in report["steps"]}
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert {k: v["status"] for k, v in steps.items()} == {
        "node": "ok", "app": "ok", "app on the host": "ok", "spec": "ok", "doctor": "ok",
        "fixtures": "ok", "runsc runs here": "ok", "serve": "ok", "turn 8 MiB": "ok",
        "two actors, 8 MiB each": "ok", "turn 16 MiB": "ok",
        "turn 50000 MiB": "skipped"}  # a turn that does not fit the budget is not begun
    assert "s left of --budget, a 50000 MiB turn needs" in steps["turn 50000 MiB"]["why"]
    facts = report["facts"]
    assert facts["driver_version"] == DRIVER and not facts["nvproxy_lists_driver"]
    assert facts["nvproxy_pin"] == "580.65.06"
    assert facts["gpu_nodes"] == ["/dev/nvidia0"] and facts["runsc_runs_here"]
    # With an nvcc here (the project's machines have CUDA 13.0's), the PTX is real.
    assert steps["app"]["module"].startswith("PTX from" if shutil.which("nvcc") else "no nvcc")
    assert steps["app on the host"]["ticks"] >= 3
    assert 'device="libcuda stand-in (CPU)"' in steps["app on the host"]["start"]
    # What the driver's libraries load comes with the rootfs (the spec brings only them).
    assert "/lib/x86_64-linux-gnu/libc.so.6" in steps["app"]["rootfs_libraries"]
    assert steps["spec"]["validate"]["ok"]
    assert "nvidia-ctk" in steps["spec"]["why"]
    assert any(link.endswith("libcuda.so.1") for link in str(steps["spec"]["links"]).split("'"))
    assert steps["doctor"]["checks"]
    for mib in (8, 16):
        turn = steps[f"turn {mib} MiB"]
        # The app's "device memory" went through the image, and came back whole.
        assert turn["image_bytes"] > mib << 20
        assert turn["counter"]["first_after_restore"] == turn["counter"][
            "last_before_checkpoint"] + 1
        assert turn["gpu_freed"] and turn["restore_s"] > 0 and turn["checkpoint_s"] > 0
    first = steps["turn 8 MiB"]
    assert first["record"]["gpus"] and first["stats"]["memory_current_bytes"] > 0
    two = steps["two actors, 8 MiB each"]
    # A refusal names the call, the actor and its bound, as every failed call does.
    assert two["b_refused"].startswith("RunWorkload turn-b: RESOURCE_EXHAUSTED: ")
    assert two["b_refused"].endswith("(bounded at 120 s)")
    assert two["a_counter"]["first_after_restore"] == two["a_counter"][
        "last_before_checkpoint"] + 1
    summary = (out / "summary.md").read_text()
    assert "| 8 |" in summary and "| 16 |" in summary
    brought_back_fixtures_read_as_a_recorded_node(out / "fixtures.tar.gz", tmp_path)
    with tarfile.open(out / "logs.tar.gz") as tar:
        logs = set(tar.getnames())
    assert "ateom.log" in logs and "logs/turn-0/app.log" in logs


@pytest.mark.parametrize(("argv", "env", "says"), [
    ([], {}, "$OUT is not set"),
    (["--pack"], {}, "usage:"),
    (["--pack", "/nonexistent/runsc", "/etc/hostname"], {}, "not an executable runsc"),
    ([], {"OUT": "/tmp/x", "ATEOM_GPU_PACK": "/nonexistent"}, "no runsc in /nonexistent"),
])
def test_the_script_says_what_is_missing_in_one_line_exit_2(
        argv: list[str], env: dict[str, str], says: str) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ("OUT", "ATEOM_GPU_PACK")}
    done = subprocess.run(["bash", str(SCRIPT), *argv], capture_output=True, text=True,
                          timeout=60, env={**base, "PYTHON": sys.executable, **env})
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("gpu_real_turn.sh: ") and says in done.stderr
    assert len(done.stderr.splitlines()) == 1
