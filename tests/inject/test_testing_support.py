"""tests.support builds real parts: ELF libraries with SONAMEs, specs, bundles."""

from __future__ import annotations

import json
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from tests.support import (
    FakeLibrary,
    build_busybox_bundle,
    build_cuda_probe,
    read_config,
    write_sim_gpu_spec,
)


def _elf_dynamic(path: Path, tag: str) -> list[str]:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        out = []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for t in section.iter_tags():
                    if t.entry.d_tag == tag:
                        out.append(getattr(t, "soname", None) or getattr(t, "needed", ""))
        return out


def test_fake_driver_libs_carry_sonames(fake_driver: list[FakeLibrary]) -> None:
    by_name = {lib.name: lib for lib in fake_driver}
    assert _elf_dynamic(by_name["libcuda.so.580.65.06"].path, "DT_SONAME") == ["libcuda.so.1"]
    assert _elf_dynamic(by_name["libnvidia-tls.so.580.65.06"].path, "DT_SONAME") == []


def test_cuda_probe_needs_libcuda_soname(fake_driver: list[FakeLibrary], tmp_path: Path) -> None:
    probe = build_cuda_probe(tmp_path / "probe", fake_driver[0].path)
    assert "libcuda.so.1" in _elf_dynamic(probe, "DT_NEEDED")


def test_sim_gpu_spec_shape(fake_driver: list[FakeLibrary], tmp_path: Path) -> None:
    path = write_sim_gpu_spec(tmp_path / "cdi", fake_driver, gpus=3)
    spec = json.loads(path.read_text())
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "2", "all"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia0", "hostPath": "/dev/null"}
    ]
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"]
    assert len(spec["containerEdits"]["mounts"]) == len(fake_driver)
    subcommands = [h["args"][1] for h in spec["containerEdits"]["hooks"]]
    assert subcommands[:2] == ["create-symlinks", "enable-cuda-compat"]


def test_busybox_bundle(tmp_path: Path) -> None:
    bundle = build_busybox_bundle(tmp_path / "b", ["sh", "-c", "true"], env=["A=1"])
    config = read_config(bundle)
    assert config["process"]["args"] == ["sh", "-c", "true"]
    assert config["root"] == {"path": "rootfs", "readonly": False}
    assert "A=1" in config["process"]["env"]
    assert (bundle / "rootfs/bin/sh").is_symlink()
    assert (bundle / "rootfs/bin/busybox").stat().st_size > 0
