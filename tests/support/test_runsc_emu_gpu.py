"""The emulated releases' GPU rules: nvproxy enablement, driver checks, remapping (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.runsc_emu_gpu import (
    SimGpu,
    driver_changed_error,
    driver_check,
    driver_version_from_proc,
    gpu_requested,
    nvproxy_decision,
    proc_version_text,
    restore_remap_error,
    save_remap_error,
    sim_gpus,
)
from tests.support.runsc_release import RELEASES, FlagParse, load_release, parse_go_flags

PLAIN: dict[str, Any] = {"process": {"env": ["PATH=/bin"]}, "linux": {}}
NVIDIACTL: dict[str, Any] = {"process": {"env": []}, "linux": {"devices": [
    {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}]}}


def flags(name: str, *argv: str) -> FlagParse:
    return parse_go_flags(argv, load_release(name).flags)


def with_annotation(value: str) -> dict[str, Any]:
    return {**PLAIN, "annotations": {"dev.gvisor.internal.nvproxy": value}}


def cdi_hooked(path: str, visible: list[str]) -> dict[str, Any]:
    return {"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={v}" for v in visible]},
            "hooks": {"createContainer": [{"path": path, "args": ["nvidia-cdi-hook"]}]}}


@pytest.mark.parametrize("name", RELEASES)
def test_nvproxy_enablement_per_release(name: str) -> None:
    release = load_release(name)
    date = int(name)
    if date >= 20230529:
        assert nvproxy_decision(release, flags(name, "--nvproxy"), PLAIN)[0]
    assert not nvproxy_decision(release, flags(name), PLAIN)[0]
    # The annotation counts from 20240422 (in these files), parsed like Go's ParseBool.
    assert nvproxy_decision(release, flags(name), with_annotation("true"))[0] == (
        date >= 20240422)
    assert nvproxy_decision(release, flags(name), with_annotation("1"))[0] == (date >= 20240422)
    on, _, warning = nvproxy_decision(release, flags(name), with_annotation("yes please"))
    assert not on and (bool(warning) == (date >= 20240422))
    # /dev/nvidiactl in the spec turns it on by itself from 20260525.
    assert nvproxy_decision(release, flags(name), NVIDIACTL)[0] == (date >= 20260525)


def test_gpu_requested_by_hooks_and_visible_devices() -> None:
    new, old = load_release("20260817"), load_release("20240930")
    hooked = cdi_hooked("/usr/bin/nvidia-cdi-hook", ["all"])
    assert gpu_requested(new, hooked, flags("20260817"))
    assert not gpu_requested(old, hooked, flags("20240930"))  # the CDI hook counts from 20260406
    assert not gpu_requested(new, cdi_hooked("/usr/bin/nvidia-cdi-hook", ["void"]),
                             flags("20260817"))
    assert not gpu_requested(new, cdi_hooked("/usr/bin/nvidia-cdi-hook", []), flags("20260817"))
    # The CDI spec appends its own "void": ignored after a real value.
    assert gpu_requested(new, cdi_hooked("/usr/bin/nvidia-cdi-hook", ["0", "void"]),
                         flags("20260817"))
    # Only a path ending in the hook's own name counts (not the toolkit's .real).
    assert not gpu_requested(new, cdi_hooked("/opt/t/nvidia-cdi-hook.real", ["all"]),
                             flags("20260817"))
    legacy = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]},
              "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}}
    assert gpu_requested(old, legacy, flags("20240930"))
    docker = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
    assert gpu_requested(old, docker, flags("20240930", "--nvproxy", "--nvproxy-docker"))
    assert gpu_requested(old, NVIDIACTL, flags("20240930"))


def test_driver_check_per_release() -> None:
    r0930, r0706 = load_release("20240930"), load_release("20260706")
    assert driver_check(r0930, flags("20240930"), "550.90.07") == ("", "")
    assert driver_check(r0930, flags("20240930"), "580.65.06") == (
        "unsupported Nvidia driver version: 580.65.06", "")
    # --nvproxy-driver-version picks the ABI regardless of the host.
    assert driver_check(r0930, flags("20240930", "--nvproxy-driver-version=550.90.07"),
                        "580.65.06") == ("", "")
    assert driver_check(r0930, flags("20240930"), None)[0].startswith(
        "failed to get Nvidia driver version: ")
    # Known but unsupported: refused unless --nvproxy-allow-unsupported-driver (20260706+).
    assert driver_check(r0706, flags("20260706"), "550.90.07")[0] == (
        "unsupported Nvidia driver version: 550.90.07")
    allowed = flags("20260706", "--nvproxy-allow-unsupported-driver")
    assert driver_check(r0706, allowed, "550.90.07") == (
        "", "NVIDIA driver version 550.90.07 is not officially supported")
    assert driver_check(r0706, allowed, "999.1.1")[0]  # unknown ABI: still refused
    assert driver_check(load_release("20230529"), flags("20230529"), "550.90.07") == (
        "unknown Nvidia driver version: 550.90.07", "")


def test_driver_changed_only_where_the_release_checks() -> None:
    for name in RELEASES:
        got = driver_changed_error(load_release(name), "580.65.06", "590.48.01")
        assert bool(got) == (int(name) >= 20260525), name
    got = driver_changed_error(load_release("20260817"), "580.65.06", "590.48.01")
    assert got == "nvidia driver version changed during restore: was 580.65.06, now 590.48.01"
    assert not driver_changed_error(load_release("20260817"), "580.65.06", "580.65.06")
    assert not driver_changed_error(load_release("20260817"), None, "580.65.06")


def test_remap_rules_from_20260706() -> None:
    two, one = sim_gpus(2), sim_gpus(1)
    mixed = (*sim_gpus(1), SimGpu("GPU-x", minor=1, pci_device_id=0x2335))
    for name in ("20260608", "20260706", "20260817"):
        release = load_release(name)
        remaps = name != "20260608"
        assert bool(restore_remap_error(release, two, one)) == remaps
        assert bool(save_remap_error(release, mixed)) == remaps
        assert not restore_remap_error(release, two, sim_gpus(3))
        assert not restore_remap_error(release, (), ())  # nothing saved, nothing to remap
    release = load_release("20260817")
    assert restore_remap_error(release, two, one) == (
        "can't remap 2 saved devices to 1 restored devices")
    assert restore_remap_error(release, one, mixed).startswith(
        "can't remap with heterogeneous GPUs: devices {Minor:0 PCIVendorID:0x10de "
        "PCIDeviceID:0x2330 UUID:GPU-")
    assert save_remap_error(release, mixed).startswith(
        "nvproxy device is not remappable: can't remap with heterogeneous GPUs")


def test_proc_version_round_trip() -> None:
    assert driver_version_from_proc(proc_version_text("580.65.06")) == "580.65.06"
    assert driver_version_from_proc("garbage") is None
    assert SimGpu.from_json(sim_gpus(2)[1].to_json()) == sim_gpus(2)[1]
