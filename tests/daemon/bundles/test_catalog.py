"""The devices a daemon hands out (`bundles.catalog`): the configured spec dirs, plus
the spec nvidia-ctk generated when the Pod has GPUs and no spec describes them —
generated only when asked, once per process, a failure retried next time."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom.daemon.bundles.catalog import DeviceCatalog
from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.nvidia_ctk import SpecGenerator
from ateom.process.reaper import Reaper
from ateom.settings import NodeSettings
from tests.support import build_fake_driver_libs, write_sim_gpu_spec


def _catalog(tmp_path: Path, *, ctk: str = "ok") -> tuple[DeviceCatalog, Path]:
    prepared = tmp_path / "ctk-spec"
    write_sim_gpu_spec(prepared, build_fake_driver_libs(tmp_path / "libs"), gpus=2)
    toolkit = tmp_path / "toolkit"
    toolkit.mkdir()
    calls = tmp_path / "ctk-calls"
    body = {"ok": f"cp {prepared / 'nvidia.json'} \"${{a#--output=}}\"",
            "fails": "echo 'no driver' >&2; exit 3"}[ctk]
    (toolkit / "nvidia-ctk").write_text(
        f"#!/bin/sh\necho run >> {calls}\n"
        f"for a; do case \"$a\" in --output=*) {body};; esac; done\n")
    (toolkit / "nvidia-ctk").chmod(0o755)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    node = NodeSettings(driver_root=str(tmp_path / "drv"), toolkit_dir=str(toolkit),
                        spec_dirs=(str(tmp_path / "empty"),),
                        gpu_glob=str(tmp_path / "dev" / "nvidia[0-9]*"))
    run = tmp_path / "run"
    run.mkdir()
    generator = SpecGenerator(Reaper().start(reap_all=False), node, str(run / "cdi"),
                              {"PATH": "/usr/bin:/bin"}, beneath=str(run))
    return DeviceCatalog(node, generator), calls


def test_the_gpu_spec_is_generated_only_when_asked_and_once(tmp_path: Path) -> None:
    catalog, calls = _catalog(tmp_path)
    assert catalog.gpu_present()
    assert catalog.pod_default(catalog.registry()) == ()  # not asked: nothing generated
    assert not calls.exists() and catalog.gpu_spec_source() == ""
    registry = catalog.registry(generate_gpu_spec=True)
    generated = tmp_path / "run" / "cdi" / "nvidia.json"
    assert catalog.pod_default(registry) == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")
    assert catalog.spec_dirs() == (str(tmp_path / "empty"), str(generated.parent))
    assert catalog.gpu_spec_source() == f"generated:{generated}"
    catalog.registry(generate_gpu_spec=True)
    assert calls.read_text().splitlines() == ["run"]  # once per process


def test_a_failed_generation_names_the_tool_and_is_tried_again(tmp_path: Path) -> None:
    catalog, calls = _catalog(tmp_path, ctk="fails")
    for _ in range(2):
        with pytest.raises(AteomError, match=r"nvidia-ctk cdi generate failed \(exit 3\)") as err:
            catalog.registry(generate_gpu_spec=True)
        assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert calls.read_text().splitlines() == ["run", "run"]
    assert catalog.spec_dirs() == (str(tmp_path / "empty"),)
