"""Fixtures for the gpuinfo tests: the recorded GPU nodes, as simulated nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.gpu_node import GpuNode, recorded_fixture, write_gpu_node

RECORDED = ("h200-8gpu", "t4-1gpu-525", "mixed-5090-4090")


@pytest.fixture(params=RECORDED)
def recorded(request: pytest.FixtureRequest) -> Path:
    return recorded_fixture(request.param)


@pytest.fixture
def h200_node(tmp_path: Path) -> GpuNode:
    return write_gpu_node(tmp_path / "node", recorded_fixture("h200-8gpu"))
