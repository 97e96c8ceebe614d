"""The node's records and what is made from them: the facts (driver, runtime, runsc,
nvproxy's pin), whether runsc runs here at all, the CDI spec nvidia-ctk would write,
``ateom doctor``, and the scrubbed fixtures brought back. Each is one step of turn.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from ateom.gpuinfo.gather import device_minors
from ateom.gpuinfo.inventory import SMI_ARGS, GpuInfoError, parse_driver_version
from ateom.gpuinfo.nvproxy import gpu_node_path
from scripts.gpu_real_turn.actor import App
from scripts.gpu_real_turn.node import (
    CONTROL_NODES,
    SPEC_BINARIES,
    Skip,
    StepFailed,
    add_text,
    driver_libraries,
    dump,
    find_lib_dir,
    judge_runtime,
    nearest_driver,
    node_spec,
    run,
    scrub,
)


def record_node(args: argparse.Namespace, facts: dict[str, Any], data: dict[str, Any]) -> None:
    """The node's records (kept in facts["records"] for the fixtures) and facts."""
    proc = Path(args.proc_root) / "driver" / "nvidia"
    version_text = (proc / "version").read_text() if (proc / "version").exists() else ""
    try:
        driver = parse_driver_version(version_text, source=str(proc / "version"))
    except GpuInfoError:
        driver = ""
    records: dict[str, str] = {"proc/driver/nvidia/version": version_text} if version_text else {}
    for info in sorted((proc / "gpus").glob("*/information")):
        records[f"proc/driver/nvidia/gpus/{info.parent.name}/information"] = info.read_text()
    for name, argv in (("nvidia-smi/q.txt", ["-q"]), ("nvidia-smi/plain.txt", []),
                       ("nvidia-smi/query-gpu.csv", list(SMI_ARGS))):
        r = run([args.nvidia_smi, *argv], 60)
        records[name] = r.out if r.ok else f"(failed: {r.why()})\n"
    if not driver:  # no /proc files of the module (a gVisor machine): nvidia-smi says it
        csv = records["nvidia-smi/query-gpu.csv"].splitlines()
        driver = csv[0].split(",")[-1].strip() if csv and "," in csv[0] else ""
        data["driver_version_from"] = "nvidia-smi (no /proc/driver/nvidia/version)"
    facts["driver_version"] = driver
    if not args.lib_dir:
        args.lib_dir = find_lib_dir(args.driver_root, driver, run(["ldconfig", "-p"], 30).out)
    facts["lib_dir"] = args.lib_dir
    proc_version = Path("/proc/version").read_text()
    cmdline = Path("/proc/cmdline").read_text() if Path("/proc/cmdline").exists() else ""
    runtime, judged = judge_runtime(proc_version, cmdline)
    facts.update(runtime=runtime, runtime_judged_from=judged, kernel=proc_version.strip(),
                 uname=run(["uname", "-a"], 10).out.strip())
    lib_dir = Path(args.lib_dir)
    listing = []
    for d in (lib_dir, Path(args.driver_root) / "bin"):
        for p in sorted(d.iterdir()) if d.is_dir() else []:
            kind = f"-> {os.readlink(p)}" if p.is_symlink() else f"{p.lstat().st_size} bytes"
            listing.append(f"{p} {kind}")
    records["driver-files.txt"] = "\n".join(listing) + "\n"
    data["driver_libraries"] = [p.name for p in driver_libraries(lib_dir, driver)]
    minors, problems = device_minors(args.gpu_glob)
    facts["gpu_nodes"] = [gpu_node_path(m) for m in sorted(minors)]
    if problems:
        facts["gpu_node_problems"] = problems
    facts["control_nodes"] = [f"/dev/{c}" for c in CONTROL_NODES if os.path.exists(f"/dev/{c}")]
    version = run([args.runsc, "--version"], 30)
    facts["runsc"] = version.out.strip().splitlines()[0] if version.ok else version.why()
    listed = run([args.runsc, "nvproxy", "list-supported-drivers"], 30)
    supported = listed.out.split() if listed.ok else []
    facts["nvproxy_lists_driver"] = driver in supported
    if driver and supported and driver not in supported:
        facts["nvproxy_pin"] = nearest_driver(driver, supported)
    data["records"] = sorted(records)
    facts["records"] = records
    if not data["driver_libraries"]:
        raise StepFailed(f"no driver libraries (lib*.so.{driver}) in {lib_dir}: give --lib-dir")


def can_run_runsc(args: argparse.Namespace, facts: dict[str, Any], work: Path,
                  data: dict[str, Any]) -> None:
    """One busybox sandbox through runsc alone: does this machine run runsc at all?"""
    if facts.get("runtime") == "gvisor":
        facts["runsc_runs_here"] = False
        raise Skip("this machine is itself a gVisor sandbox: runsc cannot run in it, so the"
                   " node, spec and fixtures steps only")
    probe = args.work / "probe"
    shutil.rmtree(probe, ignore_errors=True)
    probe.mkdir(parents=True)
    rootfs = probe / "bundle" / "rootfs" / "bin"
    rootfs.mkdir(parents=True)
    shutil.copy(args.busybox, rootfs / "busybox")
    (rootfs / "sh").symlink_to("busybox")
    (rootfs / "echo").symlink_to("busybox")
    r = run([args.runsc, "spec", "--bundle", str(probe / "bundle"), "--", "/bin/echo",
             "sandbox-ran"], 30)
    r = run([args.runsc, f"--root={probe / 'state'}", "--network=none", "--ignore-cgroups",
             "run", "--bundle", str(probe / "bundle"), "probe"], 90) if r.ok else r
    ran = r.ok and "sandbox-ran" in r.out
    facts["runsc_runs_here"] = ran
    data["seconds_to_run_echo"] = round(r.seconds, 2)
    if not ran:
        raise StepFailed(f"runsc could not run a busybox sandbox: {r.why() or r.out[-500:]}")


def write_spec(args: argparse.Namespace, facts: dict[str, Any], app: App, env: dict[str, str],
               data: dict[str, Any]) -> None:
    """The spec ateom reads: nvidia-ctk is what would write one, and it is not here."""
    driver = facts["driver_version"]
    lib_dir = Path(args.lib_dir)
    binaries = [Path(args.driver_root) / "bin" / b for b in SPEC_BINARIES
                if (Path(args.driver_root) / "bin" / b).is_file()]
    # Again: the app's run on the host may have made /dev/nvidia-uvm.
    facts["control_nodes"] = [f"/dev/{c}" for c in CONTROL_NODES
                                     if os.path.exists(f"/dev/{c}")]
    spec = node_spec(facts["gpu_nodes"], facts["control_nodes"],
                     driver_libraries(lib_dir, driver), binaries, str(lib_dir))
    ctk = shutil.which("nvidia-ctk")
    data["why"] = (f"nvidia-ctk at {ctk}, yet the spec is written here so the run does not"
                   " depend on it" if ctk else
                   "no nvidia-ctk on this machine: ateom would generate nothing and refuse GPU"
                   " actors, so the spec nvidia-ctk would write is made from the node's own"
                   " device nodes and driver libraries")
    cdi = args.work / "cdi"
    cdi.mkdir(parents=True, exist_ok=True)
    (cdi / "nvidia.json").write_text(dump(spec))
    facts["records"]["cdi/nvidia.json"] = dump(spec)
    ateom = [sys.executable, "-m", "ateom"]
    valid = run([*ateom, "cdi", "validate", "--json", str(cdi)], 60)
    data["validate"] = json.loads(valid.out) if valid.out.strip().startswith("{") else valid.why()
    if not valid.ok:
        raise StepFailed(f"ateom cdi validate: {valid.why()}")
    bundle = args.work / "inject-probe"
    shutil.rmtree(bundle, ignore_errors=True)
    app.bundle(bundle, ["/turn/turn_app"])
    inject = run([*ateom, "inject", "--dry-run", "--json", "--bundle", str(bundle),
                  "--device", "nvidia.com/gpu=all", "--spec-dir", str(cdi)], 60,
                 env={**env, "ATEOM_NVIDIA_DRIVER_ROOT": args.driver_root})
    facts["records"]["inject-dry-run.json"] = inject.out or inject.err
    if not inject.ok:
        raise StepFailed(f"ateom inject --dry-run: {inject.why()}")
    data["links"] = json.loads(inject.out).get("links")


def doctor(args: argparse.Namespace, facts: dict[str, Any], env: dict[str, str],
           data: dict[str, Any]) -> None:
    """`ateom doctor --json` with the daemon's settings: every check's status."""
    argv = [sys.executable, "-m", "ateom", "doctor", "--json", "--spec-dir",
            str(args.work / "cdi"), "--runsc", args.runsc, "--driver-root", args.driver_root,
            "--proc-root", args.proc_root, "--gpu-glob", args.gpu_glob,
            "--nvidia-smi", args.nvidia_smi, "--cuda-checkpoint", args.cuda_checkpoint,
            "--gpu-placement", "exclusive", "--max-actors", "2"]
    if facts.get("nvproxy_pin"):
        argv += ["--nvproxy-driver-version", facts["nvproxy_pin"]]
    r = run(argv, 180, env=env)
    facts["records"]["doctor.json"] = r.out or r.err
    try:
        checks = json.loads(r.out).get("checks", [])
    except ValueError as exc:
        raise StepFailed(f"ateom doctor --json printed no JSON: {r.why()}") from exc
    data["checks"] = {c.get("name"): c.get("status") for c in checks}
    data["exit"] = r.rc


def pack_fixtures(args: argparse.Namespace, facts: dict[str, Any], data: dict[str, Any]) -> None:
    """The node's records, scrubbed, as tests/fixtures/gpu/<name>/ (with provenance)."""
    gpus = len(facts.get("gpu_nodes", []))
    name = f"{args.fixture_name}-{gpus}gpu-{facts.get('driver_version') or 'unknown'}"
    uuids: dict[str, str] = {}
    out = Path(args.out) / "fixtures.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for rel, text in sorted(facts["records"].items()):
            add_text(tar, f"{name}/{rel}", scrub(text, uuids))
        add_text(tar, f"{name}/PROVENANCE.md", (
            f"# {name}\n\nRecorded by scripts/gpu_real_turn.sh on {time.strftime('%Y-%m-%d')}"
            f" ({facts.get('uname', '')}); runtime {facts.get('runtime')}"
            f" ({facts.get('runtime_judged_from')}). GPU UUIDs replaced by"
            f" GPU-f0000000-0000-4000-8000-<n> ({len(uuids)} distinct), serial numbers"
            " zeroed; nothing else changed.\n"))
    data["fixture"] = name
    data["uuids_scrubbed"] = len(uuids)
