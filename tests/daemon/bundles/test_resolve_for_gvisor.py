"""The one resolve step a container's devices go through: RunWorkload and
Inspect/PlanInjection refuse the same devices, with the same error, counted once
under the same kind."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ateom.daemon.calls.requests import (
    DeviceChoice,
    DevicePolicy,
)
from ateom.daemon.lifecycle.service import AteomService
from ateom.daemon.rpc.inspection import Inspector
from ateom.errors import AteomError, ErrorCode
from ateom.process.reaper import Reaper
from tests.support.fake_runsc import FakeRunsc
from tests.support.world import (
    gpu_world,
    needs_busybox,
)

pytestmark = needs_busybox


def _write_mps_spec(cdi: Path) -> None:
    # As NVIDIA's DRA driver writes an MPS-shared GPU: the pipe dir env and mount.
    spec = {"cdiVersion": "0.6.0", "kind": "nvidia.com/mps", "devices": [{
        "name": "shared0", "containerEdits": {
            "env": ["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"],
            "mounts": [{"hostPath": "/run/nvidia/mps/pipe", "containerPath": "/tmp/nvidia-mps",
                        "options": ["rw", "rbind"]}],
            "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}]}}]}
    (cdi / "mps.json").write_text(json.dumps(spec))


def test_an_mps_device_is_refused_for_a_gvisor_actor_naming_it(
        tmp_path: Path, refusals: list[tuple[str, str]]) -> None:
    w = gpu_world(tmp_path)
    _write_mps_spec(tmp_path / "cdi")
    req = w.run("m", devices=DeviceChoice(DevicePolicy.EXPLICIT, ("nvidia.com/mps=shared0",)))
    with pytest.raises(AteomError) as err:
        w.service.run_workload(req)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "nvidia.com/mps=shared0" in str(err.value) and "MPS" in str(err.value)
    assert not [c for c in w.fake.commands() if c.startswith("create")]
    assert refusals == [("mps", "mps_device")]


def _refusal(call: Callable[[], object]) -> tuple[ErrorCode, str]:
    with pytest.raises(AteomError) as err:
        call()
    return err.value.code, str(err.value)


@pytest.mark.parametrize("case", ["mps", "no_nvproxy", "not_gvisor"])
def test_plan_injection_refuses_what_run_refuses_with_the_same_error(
        tmp_path: Path, refusals: list[tuple[str, str]], case: str) -> None:
    # One resolve step (`devices.resolve_for_gvisor`): an operator's dry run
    # must not show a diff RunWorkload would refuse.
    w = gpu_world(tmp_path)
    name = {"mps": "nvidia.com/mps=shared0", "no_nvproxy": "nvidia.com/gpu=0",
            "not_gvisor": "amd.com/gpu=0"}[case]
    _write_mps_spec(tmp_path / "cdi")
    if case == "no_nvproxy":  # the same worker, its runsc built without nvproxy
        w.fake = FakeRunsc(tmp_path / "bin", version="release-20260706.0", global_flags=[])
        w.service = AteomService(w.config, reaper=Reaper())
    req = w.run("p", devices=DeviceChoice(DevicePolicy.EXPLICIT, (name,)))
    bundle = Path(req.dirs.oci_bundle_dir) / "app"
    before = (bundle / "config.json").read_bytes()
    planned = _refusal(lambda: Inspector.for_service(w.service).plan_injection(
        str(bundle), [name]))
    ran = _refusal(lambda: w.service.run_workload(req))
    assert planned == ran and planned[0] is ErrorCode.FAILED_PRECONDITION, (planned, ran)
    assert name.split("=")[0] in planned[1] or "nvproxy" in planned[1]
    assert not [c for c in w.fake.commands() if c.startswith("create")]
    assert (bundle / "config.json").read_bytes() == before
    # Each refusal counted once per call, under its own kind.
    assert refusals == ([("mps", "mps_device")] * 2 if case == "mps" else [])
