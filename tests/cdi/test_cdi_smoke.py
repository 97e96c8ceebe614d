"""End-to-end smoke test of the CDI layer on the benchmark-shaped fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom.cdi.registry import Registry
from ateom.cdi.spec_file import load_spec
from ateom.errors import ResolutionError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NVIDIA_CTK_YAML = FIXTURES / "cdi" / "nvidia-ctk-generate-default.yaml"


def test_real_nvidia_ctk_output_loads_and_resolves() -> None:
    loaded = load_spec(NVIDIA_CTK_YAML)
    assert loaded.spec.kind == "example.com/device"
    registry = Registry.load([str(NVIDIA_CTK_YAML.parent)])
    resolution = registry.resolve(["example.com/device=0"])
    assert resolution.devices == ("example.com/device=0",)
    assert [s.origin for s in resolution.steps] == [
        "example.com/device (spec-level)",
        "example.com/device=0",
    ]
    with pytest.raises(ResolutionError) as info:
        registry.resolve(["example.com/device=1"])
    assert "no device '1'" in info.value.failures["example.com/device=1"]
