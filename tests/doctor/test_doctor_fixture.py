"""`ateom doctor` on a simulated GPU worker: healthy passes, each seeded breakage
fails the check that names it (real ELF, real stat, real runsc behind a shim)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ateom.doctor import CHECK_NAMES, Report, Status, render_text, run_doctor
from tests.support.doctor_worker import GpuWorker

REPO = Path(__file__).resolve().parents[2]


def statuses(report: Report) -> dict[str, Status]:
    return {r.name: r.status for r in report.results}


def assert_only_these_fail(report: Report, *failing: str, consequences: tuple[str, ...] = ()
                           ) -> None:
    """`failing` FAIL; nothing else does except the named downstream `consequences`
    (which must FAIL too: the test says where the workload would feel it)."""
    got = statuses(report)
    failed = {name for name, s in got.items() if s is Status.FAIL}
    assert failed == set(failing) | set(consequences), render_text(report)
    assert not report.ok


def test_healthy_worker_passes_every_check(gpu_worker: GpuWorker) -> None:
    report = run_doctor(gpu_worker.config())
    assert report.ok, render_text(report)
    assert set(statuses(report).values()) == {Status.PASS}, render_text(report)
    assert "indices 0,1" in report.result("gpu-nodes").summary
    assert "driver 580.65.06" in report.result("driver-root").summary
    assert "nvidia-cdi-hook.real" in " ".join(report.result("toolkit").details)
    assert "libcuda.so.1" in report.result("dry-run-injection").summary


def test_missing_control_node_fails_control_nodes(gpu_worker: GpuWorker) -> None:
    gpu_worker.remove_control_node("nvidia-uvm")
    report = run_doctor(gpu_worker.config())
    assert_only_these_fail(report, "control-nodes")
    assert "nvidia-uvm" in report.result("control-nodes").summary
    assert statuses(report)["gpu-nodes"] is Status.PASS


def test_stale_device_in_spec_fails_spec_device_nodes(gpu_worker: GpuWorker) -> None:
    gpu_worker.make_spec_stale()
    report = run_doctor(gpu_worker.config())
    # The injector stats every node too: the dry run fails on the same node.
    assert_only_these_fail(report, "spec-device-nodes", consequences=("dry-run-injection",))
    r = report.result("spec-device-nodes")
    assert any("/dev/nvidia7" in d and "missing" in d for d in r.details), r.details
    assert "nvidia-ctk cdi generate" in r.fix
    assert statuses(report)["cdi-resolve"] is Status.PASS


def test_runsc_without_nvproxy_fails_runsc_nvproxy(gpu_worker: GpuWorker) -> None:
    # Debian 12's own runsc (a 2022 build) is exactly this breakage.
    report = run_doctor(gpu_worker.config(runsc=gpu_worker.runsc_without_nvproxy()))
    assert_only_these_fail(report, "runsc-nvproxy")
    got = statuses(report)
    assert got["runsc"] is Status.PASS
    assert got["runsc-driver"] is Status.SKIP
    assert "has no --nvproxy" in report.result("runsc-nvproxy").summary


def test_configured_nvproxy_flag_is_checked_against_runsc(gpu_worker: GpuWorker) -> None:
    # The shim lists --nvproxy-driver-version the way a 2024+ runsc does.
    report = run_doctor(gpu_worker.config(nvproxy_driver_version="550.54.15"))
    assert statuses(report)["runsc-nvproxy"] is Status.PASS
    assert "--nvproxy-driver-version" in report.result("runsc-nvproxy").summary


def test_library_without_soname_fails_spec_libraries(gpu_worker: GpuWorker) -> None:
    gpu_worker.strip_libcuda_soname()
    report = run_doctor(gpu_worker.config())
    assert_only_these_fail(report, "spec-libraries", consequences=("dry-run-injection",))
    assert "libcuda.so.580.65.06" in report.result("spec-libraries").details[0]
    # The consequence shows where the workload would feel it.
    assert "libcuda.so.1" in " ".join(report.result("dry-run-injection").details)


def test_missing_toolkit_fails_toolkit(gpu_worker: GpuWorker) -> None:
    gpu_worker.remove_toolkit()
    report = run_doctor(gpu_worker.config())
    assert_only_these_fail(report, "toolkit")
    r = report.result("toolkit")
    assert str(gpu_worker.toolkit) in r.summary and "ATEOM_NVIDIA_TOOLKIT_DIR" in r.fix


def test_no_gpu_requested_fails_gpu_nodes(gpu_worker: GpuWorker) -> None:
    report = run_doctor(gpu_worker.config(gpu_glob=str(gpu_worker.dev / "nvidiaX[0-9]*")))
    assert_only_these_fail(report, "gpu-nodes")


def test_missing_spec_is_generated_with_nvidia_ctk(gpu_worker: GpuWorker) -> None:
    spec_text = gpu_worker.spec_path.read_text()
    saved = gpu_worker.root / "saved-spec.json"
    saved.write_text(spec_text)
    gpu_worker.spec_path.unlink()
    # nvidia-ctk.real that writes the node's spec where --output says, like the real one.
    ctk = gpu_worker.toolkit / "nvidia-ctk.real"
    ctk.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in --output=*) out="${a#--output=}";; esac; done\n'
        f'cp {saved} "$out"\n'
    )
    report = run_doctor(gpu_worker.config())
    assert report.ok, render_text(report)
    assert "generated by" in report.result("cdi-spec").summary
    assert str(ctk) in report.result("cdi-spec").summary


def test_missing_spec_and_failing_generator_fails_cdi_spec(gpu_worker: GpuWorker) -> None:
    gpu_worker.spec_path.unlink()
    (gpu_worker.toolkit / "nvidia-ctk.real").write_text(
        "#!/bin/sh\necho 'ERROR: failed to initialize NVML: Driver Not Loaded' >&2\nexit 1\n"
    )
    report = run_doctor(gpu_worker.config())
    r = report.result("cdi-spec")
    assert r.status is Status.FAIL
    assert "Driver Not Loaded" in r.summary
    assert statuses(report)["dry-run-injection"] is Status.SKIP


def _cli(worker: GpuWorker, *args: str, env: dict[str, str] | None = None) -> (
    subprocess.CompletedProcess[str]
):
    return subprocess.run(
        [sys.executable, "-m", "ateom", "doctor", *args],
        env={**os.environ, **(env or worker.env())},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_reads_the_daemon_env_and_exits_0_when_healthy(gpu_worker: GpuWorker) -> None:
    done = _cli(gpu_worker, "--json", "--proc-driver-version", "/nonexistent")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)  # stdout is JSON only: library logs go to stderr
    assert doc["ok"] is True
    assert [c["name"] for c in doc["checks"]] == list(CHECK_NAMES)


def test_cli_text_names_the_failed_check_and_exits_1(gpu_worker: GpuWorker) -> None:
    gpu_worker.remove_control_node("nvidiactl")
    done = _cli(gpu_worker, "--proc-driver-version", "/nonexistent")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert any(ln.startswith("FAIL  control-nodes") for ln in lines), done.stdout
    assert any(ln.strip().startswith("fix:") for ln in lines)
    assert lines[-1].startswith("NOT OK:")


def test_cli_flags_override_env(gpu_worker: GpuWorker) -> None:
    done = _cli(gpu_worker, "--json", "--runsc", gpu_worker.runsc_without_nvproxy())
    doc = json.loads(done.stdout)
    by_name = {c["name"]: c["status"] for c in doc["checks"]}
    assert done.returncode == 1 and by_name["runsc-nvproxy"] == "DOCTOR_STATUS_FAIL"


DAEMON_SIDE = """
import json, sys
from ateom.process.reaper import Reaper
from ateom.doctor import report_to_dict, run_doctor
from ateom.process.runner import reaper_runner
from tests.support.doctor_worker import GpuWorker
from pathlib import Path

reaper = Reaper().start()  # reaps every child, as in ateom serve
worker = GpuWorker(Path(sys.argv[1]))
report = run_doctor(worker.config(), run=reaper_runner(reaper))
print(json.dumps(report_to_dict(report)))
"""


def test_doctor_inside_a_reaping_daemon_goes_through_the_reaper(gpu_worker: GpuWorker) -> None:
    # In the daemon every child is reaped by the reaper; the doctor's runsc and
    # nvidia-ctk calls must go through it (a subprocess.run would lose its child).
    gpu_worker.spec_path.unlink()  # so nvidia-ctk runs too
    saved = gpu_worker.root / "saved.json"
    ctk = gpu_worker.toolkit / "nvidia-ctk.real"
    write_sim = (
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in --output=*) out="${a#--output=}";; esac; done\n'
        f'cp {saved} "$out"\n'
    )
    from tests.support import write_sim_gpu_spec

    libs = sorted(gpu_worker.lib64.iterdir())
    spec = write_sim_gpu_spec(gpu_worker.root / "gen-src", libs, gpus=2,
                              hook_path=str(gpu_worker.toolkit / "nvidia-cdi-hook"))
    saved.write_text(spec.read_text())
    ctk.write_text(write_sim)
    done = subprocess.run(
        [sys.executable, "-c", DAEMON_SIDE, str(gpu_worker.root)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    by_name = {c["name"]: c for c in doc["checks"]}
    assert doc["ok"], json.dumps(doc, indent=1)
    assert "generated by" in by_name["cdi-spec"]["summary"]
    assert by_name["runsc-driver"]["status"] == "DOCTOR_STATUS_PASS"  # list-supported-drivers ran


# -- odd machines: the doctor answers, it does not hang or crash ----------------

HANGING_RUNSC = """#!/bin/sh
echo "$@" >> {log}
sleep 1000
"""


def test_hanging_runsc_fails_runsc_after_one_probe_timeout(gpu_worker: GpuWorker) -> None:
    # A runsc that never answers (a wedged binary, a FUSE mount that blocks)
    # must cost one probe timeout, not one per probe command.
    log = gpu_worker.root / "runsc-calls"
    gpu_worker.runsc.write_text(HANGING_RUNSC.format(log=log))
    report = run_doctor(gpu_worker.config(probe_timeout=0.5))
    r = report.result("runsc")
    assert r.status is Status.FAIL and "timed out" in r.summary, render_text(report)
    assert statuses(report)["runsc-nvproxy"] is Status.SKIP
    assert log.read_text().splitlines() == ["--version"]


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for its reaper); reads /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_hanging_runsc_is_killed_with_its_children(gpu_worker: GpuWorker) -> None:
    # The shim's `sleep` is a grandchild of the doctor: it must not outlive the probe.
    log = gpu_worker.root / "runsc-calls"
    pids = gpu_worker.root / "runsc-pids"
    gpu_worker.runsc.write_text(HANGING_RUNSC.format(log=log).replace(
        "sleep 1000", f"echo $$ >> {pids}\nsleep 1000 &\necho $! >> {pids}\nwait"))
    run_doctor(gpu_worker.config(probe_timeout=0.5))
    shim, sleeper = (int(p) for p in pids.read_text().split())
    # SIGKILL to the group is delivered at once but acted on asynchronously:
    # wait (bounded) for the kernel to finish them rather than race it.
    deadline = time.monotonic() + 10
    while (_alive(shim) or _alive(sleeper)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(shim) and not _alive(sleeper)


def test_invalid_gpu_spec_fails_cdi_spec_naming_the_file_and_field(
    gpu_worker: GpuWorker,
) -> None:
    # The node's spec is there but broken: "no spec" alone would send the
    # operator looking for a file that exists.
    spec = json.loads(gpu_worker.spec_path.read_text())
    del spec["kind"]
    gpu_worker.spec_path.write_text(json.dumps(spec))
    report = run_doctor(gpu_worker.config())
    r = report.result("cdi-spec")
    assert r.status is Status.FAIL, render_text(report)
    assert "(1 unreadable or invalid)" in r.summary
    assert any(str(gpu_worker.spec_path) in d and "kind" in d for d in r.details), r.details


def test_dangling_toolkit_symlink_is_missing_not_a_crash(gpu_worker: GpuWorker) -> None:
    for name in ("nvidia-cdi-hook", "nvidia-cdi-hook.real"):
        (gpu_worker.toolkit / name).unlink()
    (gpu_worker.toolkit / "nvidia-cdi-hook").symlink_to(gpu_worker.root / "gone")
    report = run_doctor(gpu_worker.config())
    assert_only_these_fail(report, "toolkit")
    assert "nvidia-cdi-hook missing" in report.result("toolkit").summary


REAPER_TIMEOUT = """
import sys
from ateom.process.reaper import Reaper
from ateom.process.runner import TIMED_OUT, reaper_runner

run = reaper_runner(Reaper().start())
code, out = run(["sleep", "30"], timeout=0.3)
print(code, out)
sys.exit(0 if code == TIMED_OUT and "timed out" in out else 1)
"""


def test_reaper_runner_reports_a_timeout_as_the_subprocess_runner_does() -> None:
    # The RPC's doctor goes through the reaper: its runsc probe must stop
    # after one timeout just like the CLI's.
    done = subprocess.run([sys.executable, "-c", REAPER_TIMEOUT], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def _point_library_at(worker: GpuWorker, stem: str, replacement: Path) -> None:
    spec = json.loads(worker.spec_path.read_text())
    for mount in spec["containerEdits"]["mounts"]:
        if os.path.basename(mount["hostPath"]).startswith(stem):
            mount["hostPath"] = str(replacement)
    worker.spec_path.write_text(json.dumps(spec))


def test_library_source_that_is_a_fifo_fails_spec_libraries_without_hanging(
    gpu_worker: GpuWorker,
) -> None:
    # Reading a FIFO blocks until a writer comes: the doctor must say what it is,
    # not wait (through the CLI, so a hang is a timeout here, not a stuck suite).
    fifo = gpu_worker.root / "libcuda.so.fifo"
    os.mkfifo(fifo)
    _point_library_at(gpu_worker, "libcuda.so.", fifo)
    done = _cli(gpu_worker, "--json")
    doc = json.loads(done.stdout)
    by_name = {c["name"]: c for c in doc["checks"]}
    libs = by_name["spec-libraries"]
    assert done.returncode == 1 and libs["status"] == "DOCTOR_STATUS_FAIL", done.stdout
    assert any(str(fifo) in d and "not a regular file" in d for d in libs["details"]), libs
    assert by_name["dry-run-injection"]["status"] == "DOCTOR_STATUS_SKIP"
    assert "spec-libraries" in by_name["dry-run-injection"]["summary"]


def test_library_source_that_is_a_directory_is_named_as_such(gpu_worker: GpuWorker) -> None:
    somedir = gpu_worker.root / "libnvidia-ml.d"
    somedir.mkdir()
    _point_library_at(gpu_worker, "libnvidia-ml.so.", somedir)
    report = run_doctor(gpu_worker.config())
    r = report.result("spec-libraries")
    assert r.status is Status.FAIL
    assert any(str(somedir) in d and "directory" in d for d in r.details), r.details


def test_configured_capabilities_flag_missing_from_runsc_fails_runsc_nvproxy(
    gpu_worker: GpuWorker,
) -> None:
    # A runsc from before --nvproxy-allowed-driver-capabilities (2023 builds) with
    # ATEOM_NVPROXY_CAPABILITIES set: every GPU actor would fail at create.
    shim = gpu_worker.runsc.read_text()
    line = next(ln for ln in shim.splitlines() if "nvproxy-allowed-driver-capabilities" in ln)
    gpu_worker.runsc.write_text(shim.replace(line + "\n", ""))
    report = run_doctor(gpu_worker.config(nvproxy_capabilities="compute,utility"))
    assert_only_these_fail(report, "runsc-nvproxy")
    assert "--nvproxy-allowed-driver-capabilities" in report.result("runsc-nvproxy").summary
    # Unset, the same runsc is fine.
    assert run_doctor(gpu_worker.config()).ok


def test_unlistable_spec_dir_fails_cdi_spec_naming_it(gpu_worker: GpuWorker) -> None:
    # ATEOM_CDI_SPEC_DIRS pointing at a file (as root, the stand-in for a dir
    # this user cannot list): the same registry error, shown, not a crash.
    report = run_doctor(gpu_worker.config(spec_dirs=(str(gpu_worker.spec_path),)))
    r = report.result("cdi-spec")
    assert r.status is Status.FAIL, render_text(report)
    assert any(d.startswith(str(gpu_worker.spec_path)) and "cannot list spec directory" in d
               for d in r.details), r.details
