from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.doctor_worker import GpuWorker, build_gpu_worker


@pytest.fixture
def gpu_worker(tmp_path: Path) -> GpuWorker:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed: the fake driver libraries are compiled")
    if shutil.which("runsc") is None:
        pytest.skip("runsc not installed: the runsc shim runs the real binary")
    return build_gpu_worker(tmp_path / "worker")
