"""Inspect in a GPU worker: ListDevices shows what the daemon resolves."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ateom.daemon.calls.requests import (
    GpuWish,
)
from ateom.daemon.lifecycle.service import AteomService
from ateom.daemon.rpc.inspection import Inspector
from ateom.process.reaper import Reaper
from tests.support import build_fake_driver_libs, write_sim_gpu_spec
from tests.support.world import (
    gpu_world,
    needs_busybox,
)

pytestmark = needs_busybox


def test_list_devices_shows_what_the_daemon_resolves_a_generated_spec_included(
        tmp_path: Path) -> None:
    """No spec describes the Pod's GPUs: the first GPU Run has nvidia-ctk write one;
    ListDevices, GetStatus and PlanInjection then see exactly that spec's devices."""
    w = gpu_world(tmp_path)
    prepared = tmp_path / "ctk-spec"
    write_sim_gpu_spec(prepared, build_fake_driver_libs(tmp_path / "ctk-libs"), gpus=4)
    toolkit = tmp_path / "toolkit"
    toolkit.mkdir()
    (toolkit / "nvidia-ctk").write_text(
        "#!/bin/sh\nfor a; do case \"$a\" in --output=*) "
        f"cp {prepared / 'nvidia.json'} \"${{a#--output=}}\";; esac; done\n")
    (toolkit / "nvidia-ctk").chmod(0o755)
    empty = tmp_path / "no-specs"
    empty.mkdir()
    config = replace(w.config, node=replace(w.config.node, spec_dirs=(str(empty),),
                                            toolkit_dir=str(toolkit)),
                     gpu=replace(w.config.gpu, placement="shared"))
    w.service = AteomService(config, reaper=Reaper())
    inspector = Inspector.for_service(w.service)
    assert [d.qualified_name for d in inspector.devices().devices()] == []
    w.service.run_workload(w.run("g", gpus=GpuWish(count=1)))
    generated = Path(config.run_dir) / "cdi" / "nvidia.json"
    listed = inspector.devices()
    assert str(generated.parent) in listed.spec_dirs
    assert {d.spec_path for d in listed.devices()} == {str(generated)}
    assert "nvidia.com/gpu=3" in {d.qualified_name for d in listed.devices()}
    assert inspector.status().cdi_spec_source == f"generated:{generated}"
    names, _ = inspector.plan_injection(str(w.actors_root / "g" / "bundles" / "app"),
                                        ["nvidia.com/gpu=2"])
    assert names == ("nvidia.com/gpu=2",)
