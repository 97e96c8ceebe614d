"""The doctor's verdicts, from hand-written facts (no machine probed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ateom.cdi.model import ContainerEdits, DeviceNode, EditStep, Resolution
from ateom.doctor import CHECK_NAMES, Status, judge
from ateom.doctor.checks import CHECKS
from ateom.doctor.config import DoctorConfig, config_from_env
from ateom.doctor.facts import (
    DirFact,
    Facts,
    InjectionFact,
    LibraryFact,
    NodeFact,
    RunscFact,
    SpecFact,
    SpecNodeFact,
    ToolFact,
)
from ateom.doctor.report import render_json, render_text, report_to_dict

RESOLUTION = Resolution(
    ("nvidia.com/gpu=all",),
    (EditStep("nvidia.com/gpu=all", "/etc/cdi/nvidia.json", ContainerEdits()),),
)
GPU0 = DeviceNode("/dev/nvidia0", type="c", major=195, minor=0)


def healthy() -> Facts:
    config = DoctorConfig()
    return Facts(
        config=config,
        gpu_nodes=(NodeFact("/dev/nvidia0", "c", 195, 0), NodeFact("/dev/nvidia3", "c", 195, 3)),
        control_nodes=(NodeFact("/dev/nvidiactl", "c", 195, 255),
                       NodeFact("/dev/nvidia-uvm", "c", 510, 0)),
        driver_root=DirFact("/usr/local/nvidia", True),
        driver_lib_dir=DirFact("/usr/local/nvidia/lib64", True),
        driver_bin_dir=DirFact("/usr/local/nvidia/bin", True),
        toolkit_dir=DirFact("/opt/nvidia-toolkit", True),
        tools=(
            ToolFact("nvidia-cdi-hook", "/opt/nvidia-toolkit/nvidia-cdi-hook.real", True, True,
                     is_real=True),
            ToolFact("nvidia-ctk", "/opt/nvidia-toolkit/nvidia-ctk.real", True, True,
                     is_real=True),
        ),
        spec=SpecFact(files=("/etc/cdi/nvidia.json",), devices=("nvidia.com/gpu=all",),
                      resolution=RESOLUTION),
        spec_nodes=(SpecNodeFact("nvidia.com/gpu=all", GPU0, NodeFact("/dev/nvidia0", "c", 195,
                                                                        0)),),
        libraries=(
            LibraryFact("x", "/usr/local/nvidia/lib64/libcuda.so.580.65.06",
                        "/usr/local/nvidia/lib64/libcuda.so.580.65.06", True, "libcuda.so.1"),
            LibraryFact("x", "/usr/local/nvidia/lib64/libnvidia-tls.so.580.65.06",
                        "/usr/local/nvidia/lib64/libnvidia-tls.so.580.65.06", True,
                        "libnvidia-tls.so.580.65.06"),
        ),
        runsc=RunscFact("/usr/local/bin/runsc", True, "release-20250407.0",
                        supports_nvproxy=True, supported_drivers=("580.65.06",)),
        host_driver_version="580.65.06",
        injection=InjectionFact(
            env=("PATH=/bin", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64"),
            symlinks=(("/usr/local/nvidia/lib64/libcuda.so.1", "libcuda.so.580.65.06"),
                      ("/usr/local/nvidia/lib64/libnvidia-ml.so.1", "libnvidia-ml.so.580.65.06")),
        ),
    )


def status(facts: Facts, name: str) -> Status:
    return judge(facts).result(name).status


def test_healthy_facts_pass_every_check() -> None:
    report = judge(healthy())
    assert [r.name for r in report.results] == list(CHECK_NAMES)
    assert len(CHECKS) == len(CHECK_NAMES)
    assert {r.status for r in report.results} == {Status.PASS}, render_text(report)
    assert report.ok
    assert "indices 0,3" in report.result("gpu-nodes").summary


def test_no_gpu_nodes_fails_with_the_resource_request_fix() -> None:
    r = judge(replace(healthy(), gpu_nodes=())).result("gpu-nodes")
    assert r.status is Status.FAIL
    assert "nvidia.com/gpu" in r.fix


def test_a_gpu_path_that_is_not_a_char_device_fails() -> None:
    f = replace(healthy(), gpu_nodes=(NodeFact("/dev/nvidia0", "other"),))
    assert status(f, "gpu-nodes") is Status.FAIL


def test_missing_control_node_fails() -> None:
    f = replace(healthy(), control_nodes=(NodeFact("/dev/nvidiactl", "c", 195, 255),
                                          NodeFact("/dev/nvidia-uvm", error="No such file")))
    r = judge(f).result("control-nodes")
    assert r.status is Status.FAIL
    assert "/dev/nvidia-uvm" in r.summary and "nvidia-modprobe" in r.fix


@pytest.mark.parametrize(
    ("field", "expected"),
    [("driver_root", Status.FAIL), ("driver_lib_dir", Status.FAIL),
     ("driver_bin_dir", Status.WARN)],
)
def test_driver_root_parts(field: str, expected: Status) -> None:
    f = healthy()
    f = replace(f, **{field: DirFact(getattr(f, field).path, False)})
    r = judge(f).result("driver-root")
    assert r.status is expected
    assert "ATEOM_NVIDIA_DRIVER_ROOT" in r.fix


def test_toolkit_missing_dir_or_hook_fails_missing_ctk_or_wrapper_warns() -> None:
    f = healthy()
    assert status(replace(f, toolkit_dir=DirFact("/opt/nvidia-toolkit", False)),
                  "toolkit") is Status.FAIL
    no_exec = (ToolFact("nvidia-cdi-hook", "/x", True, executable=False), f.tools[1])
    r = judge(replace(f, tools=no_exec)).result("toolkit")
    assert r.status is Status.FAIL and "not executable" in r.summary
    no_ctk = (f.tools[0], ToolFact("nvidia-ctk", "/opt/nvidia-toolkit/nvidia-ctk", False))
    assert status(replace(f, tools=no_ctk), "toolkit") is Status.WARN
    wrapper = (ToolFact("nvidia-cdi-hook", "/opt/nvidia-toolkit/nvidia-cdi-hook", True, True,
                        is_real=False, is_script=True), f.tools[1])
    r = judge(replace(f, tools=wrapper)).result("toolkit")
    assert r.status is Status.WARN and "wrapper" in r.summary


def test_no_spec_fails_and_skips_what_depends_on_it() -> None:
    f = replace(healthy(), spec=SpecFact(generate_error="no nvidia-ctk"), spec_nodes=(),
                libraries=(), injection=None)
    report = judge(f)
    assert report.result("cdi-spec").status is Status.FAIL
    assert "no nvidia-ctk" in report.result("cdi-spec").summary
    for name in ("cdi-resolve", "spec-device-nodes", "spec-libraries", "dry-run-injection"):
        assert report.result(name).status is Status.SKIP, name
    assert not report.ok


def test_only_invalid_specs_fail_cdi_spec_naming_them_and_the_kind() -> None:
    error = "/etc/cdi/nvidia.json: kind: missing"
    f = replace(healthy(), config=DoctorConfig(devices=("example.com/fpga=0",)),
                spec=SpecFact(errors=(error,)), spec_nodes=(), libraries=(), injection=None)
    r = judge(f).result("cdi-spec")
    assert r.status is Status.FAIL
    assert "example.com/fpga" in r.summary and "(1 unreadable or invalid)" in r.summary
    assert r.details == (error,) and "ateom cdi validate" in r.fix


def test_generated_spec_is_named_and_other_broken_specs_warn() -> None:
    f = healthy()
    gen = replace(f.spec, generated_by="/opt/nvidia-toolkit/nvidia-ctk.real")
    assert "generated by" in judge(replace(f, spec=gen)).result("cdi-spec").summary
    bad = replace(f.spec, errors=("/etc/cdi/x.yaml: kind: missing",))
    r = judge(replace(f, spec=bad)).result("cdi-spec")
    assert r.status is Status.WARN and r.details == ("/etc/cdi/x.yaml: kind: missing",)


def test_unresolvable_default_devices_fail() -> None:
    spec = replace(healthy().spec, resolution=None,
                   resolve_error="unresolvable CDI device:\n  nvidia.com/gpu=all: no device")
    report = judge(replace(healthy(), spec=spec, injection=None))
    assert report.result("cdi-resolve").status is Status.FAIL
    assert report.result("spec-device-nodes").status is Status.SKIP


@pytest.mark.parametrize(
    "host",
    [
        NodeFact("/dev/nvidia0", error="No such file or directory"),
        NodeFact("/dev/nvidia0", "b", 195, 0),
        NodeFact("/dev/nvidia0", "c", 195, 1),
        NodeFact("/dev/nvidia0", "other"),
    ],
)
def test_stale_spec_device_nodes_fail(host: NodeFact) -> None:
    f = replace(healthy(), spec_nodes=(SpecNodeFact("nvidia.com/gpu=0", GPU0, host),))
    r = judge(f).result("spec-device-nodes")
    assert r.status is Status.FAIL
    assert "regenerate" in r.fix and "/dev/nvidia0" in r.details[0]


def test_spec_node_without_numbers_only_needs_to_exist() -> None:
    node = DeviceNode("/dev/nvidiactl")
    f = replace(healthy(), spec_nodes=(SpecNodeFact("x", node, NodeFact(node.path, "c", 1, 3)),))
    assert status(f, "spec-device-nodes") is Status.PASS


def test_libraries_missing_source_fails_core_without_soname_fails_other_warns() -> None:
    f = healthy()
    cuda, tls = f.libraries
    missing = replace(cuda, exists=False, soname=None)
    assert status(replace(f, libraries=(missing, tls)), "spec-libraries") is Status.FAIL
    core = replace(cuda, soname=None)
    r = judge(replace(f, libraries=(core, tls))).result("spec-libraries")
    assert r.status is Status.FAIL and "libcuda" in r.details[0]
    other = replace(tls, soname=None, error="ELFError: magic number does not match")
    r = judge(replace(f, libraries=(cuda, other))).result("spec-libraries")
    assert r.status is Status.WARN and "ELFError" in r.details[0]


def test_a_library_source_that_is_not_a_file_says_what_it_is_and_skips_the_dry_run() -> None:
    f = healthy()
    cuda, tls = f.libraries
    fifo = replace(cuda, exists=False, soname=None, error="a FIFO, not a regular file",
                   special=True)
    skipped = InjectionFact(skipped=f"{cuda.host_path} cannot be read as a library")
    report = judge(replace(f, libraries=(fifo, tls), injection=skipped))
    r = report.result("spec-libraries")
    assert r.status is Status.FAIL and r.details[0].endswith(": a FIFO, not a regular file")
    inj = report.result("dry-run-injection")
    assert inj.status is Status.SKIP and cuda.host_path in inj.summary


def test_runsc_missing_fails_and_skips_its_dependents() -> None:
    report = judge(replace(healthy(), runsc=RunscFact("runsc", False, error="not found")))
    assert report.result("runsc").status is Status.FAIL
    assert report.result("runsc-nvproxy").status is Status.SKIP
    assert report.result("runsc-driver").status is Status.SKIP


def test_runsc_without_nvproxy_fails_naming_the_version() -> None:
    f = replace(healthy(), runsc=RunscFact("/usr/bin/runsc", True, "0.0~20221219.0"))
    r = judge(f).result("runsc-nvproxy")
    assert r.status is Status.FAIL
    assert "0.0~20221219.0" in r.summary and "RUNSC_FROM=binary" in r.fix


def test_configured_nvproxy_flag_unsupported_fails() -> None:
    runsc = replace(healthy().runsc, flags=(("--nvproxy-driver-version", False),))
    r = judge(replace(healthy(), runsc=runsc)).result("runsc-nvproxy")
    assert r.status is Status.FAIL and "--nvproxy-driver-version" in r.summary


def test_host_driver_outside_runsc_list() -> None:
    f = replace(healthy(), host_driver_version="999.1")
    assert status(f, "runsc-driver") is Status.FAIL
    pinned = replace(f, config=replace(f.config, nvproxy_driver_version="580.65.06"))
    assert status(pinned, "runsc-driver") is Status.WARN
    unlisted = replace(healthy(), runsc=replace(healthy().runsc, supported_drivers=None))
    assert status(unlisted, "runsc-driver") is Status.WARN
    assert status(replace(healthy(), host_driver_version=""), "runsc-driver") is Status.WARN


def test_injection_that_keeps_nvidia_visible_devices_or_lacks_links_fails() -> None:
    f = healthy()
    assert f.injection is not None
    kept = replace(f.injection, env=(*f.injection.env, "NVIDIA_VISIBLE_DEVICES=all"))
    r = judge(replace(f, injection=kept)).result("dry-run-injection")
    assert r.status is Status.FAIL and "0 GPUs" in r.details[0]
    no_links = replace(f.injection, symlinks=f.injection.symlinks[1:])
    r = judge(replace(f, injection=no_links)).result("dry-run-injection")
    assert r.status is Status.FAIL and "libcuda.so.1" in r.details[0]
    broken = InjectionFact(error="config.json: process.env: not a list")
    r = judge(replace(f, injection=broken)).result("dry-run-injection")
    assert r.status is Status.FAIL and r.details == ("config.json: process.env: not a list",)


def test_text_report_one_line_per_check_with_fix_and_verdict() -> None:
    f = replace(healthy(), gpu_nodes=())
    text = render_text(judge(f))
    lines = text.splitlines()
    assert lines[0].startswith("FAIL  gpu-nodes")
    assert any(line.strip().startswith("fix: request nvidia.com/gpu") for line in lines)
    assert lines[-1] == "NOT OK: 11 passed, 0 warned, 1 failed, 0 skipped"
    for name in CHECK_NAMES:
        assert sum(1 for ln in lines if ln[6:].startswith(name + " ")) == 1, name


def test_json_report_round_trips() -> None:
    import json

    doc = json.loads(render_json(judge(healthy())))
    assert doc == report_to_dict(judge(healthy()))
    assert doc["ok"] is True and doc["counts"]["PASS"] == len(CHECK_NAMES)
    assert doc["checks"][0] == {"name": "gpu-nodes", "status": "PASS",
                                "summary": doc["checks"][0]["summary"], "fix": "",
                                "details": []}


def test_config_from_env_uses_the_daemons_variables() -> None:
    cfg = config_from_env({
        "ATEOM_GPU_GLOB": "/x/nvidia[0-9]*",
        "ATEOM_NVIDIA_DRIVER_ROOT": "/drv",
        "ATEOM_NVIDIA_TOOLKIT_DIR": "/tk",
        "ATEOM_CDI_SPEC_DIRS": "/a::/b",
        "ATEOM_RUNSC": "/bin/runsc",
        "ATEOM_NVPROXY_DRIVER_VERSION": "550.54.15",
    })
    assert cfg.spec_dirs == ("/a", "/b")
    assert cfg.control_node_paths == ("/x/nvidiactl", "/x/nvidia-uvm")
    assert (cfg.driver_lib_dir, cfg.toolkit_dir, cfg.runsc) == ("/drv/lib64", "/tk", "/bin/runsc")
    assert cfg.nvproxy_driver_version == "550.54.15"
    defaults = config_from_env({})
    assert defaults.gpu_glob == "/dev/nvidia[0-9]*"
    assert defaults.driver_root == "/usr/local/nvidia"
    assert defaults.toolkit_dir == "/opt/nvidia-toolkit"
    assert defaults.control_node_paths == ("/dev/nvidiactl", "/dev/nvidia-uvm")
    # One name per setting: the daemon's old spellings are not read.
    old_names = config_from_env({"ATEOM_DRIVER_ROOT": "/d2", "ATEOM_SPEC_DIRS": "/s"})
    assert (old_names.driver_root, old_names.spec_dirs) == (defaults.driver_root,
                                                            defaults.spec_dirs)


def test_doctor_config_for_daemon_is_what_serve_resolved() -> None:
    import argparse

    from ateom.daemon import config as daemon_config
    from ateom.daemon.inspect import doctor_config

    parser = argparse.ArgumentParser()
    daemon_config.add_flags(parser)
    env = {"ATEOM_ACTORS_ROOT": "/r", "ATEOM_NVIDIA_DRIVER_ROOT": "/env-drv",
           "ATEOM_NVIDIA_TOOLKIT_DIR": "/env-tk", "ATEOM_CDI_SPEC_DIRS": "/env-a:/env-b"}
    served = daemon_config.from_args(parser.parse_args(
        ["--driver-root", "/flag-drv", "--gpu-glob", "/g/nvidia[0-9]*", "--runsc", "/bin/rs",
         "--nvproxy-driver-version", "550.54.15"]), env)
    cfg = doctor_config(served, served.spec_dirs)
    # Flags beat env in the daemon, so they do in its doctor too.
    assert (cfg.driver_root, cfg.toolkit_dir, cfg.spec_dirs) == (
        "/flag-drv", "/env-tk", ("/env-a", "/env-b"))
    assert (cfg.gpu_glob, cfg.runsc, cfg.nvproxy_driver_version) == (
        "/g/nvidia[0-9]*", "/bin/rs", "550.54.15")
    assert cfg.devices == ("nvidia.com/gpu=all",)
