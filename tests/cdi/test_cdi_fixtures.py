"""The bundled fixtures in cdi_specs/ and real generator output (tests/fixtures/cdi)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom.cdi.registry import Registry
from ateom.cdi.spec_file import load_spec, spec_problems
from ateom.errors import SpecError

REPO = Path(__file__).resolve().parents[2]
VALID = REPO / "cdi_specs" / "valid"
INVALID = REPO / "cdi_specs" / "invalid"
GENERATED_CDI = REPO / "tests" / "fixtures" / "cdi"

INVALID_SPECS = sorted(p for p in INVALID.iterdir() if p.suffix in (".json", ".yaml", ".yml"))
VALID_SPECS = sorted(p for p in VALID.iterdir() if p.suffix in (".json", ".yaml", ".yml"))


def test_there_are_fixtures() -> None:
    assert len(VALID_SPECS) >= 3
    assert len(INVALID_SPECS) >= 40


@pytest.mark.parametrize("path", VALID_SPECS, ids=lambda p: p.name)
def test_valid_fixture_loads_without_warnings(path: Path) -> None:
    loaded = load_spec(path)
    assert loaded.warnings == ()
    assert loaded.spec.path == str(path)


@pytest.mark.parametrize("path", INVALID_SPECS, ids=lambda p: p.name)
def test_invalid_fixture_gives_its_expected_error(path: Path) -> None:
    expected = Path(str(path) + ".expected").read_text().strip()
    assert expected
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}: ")
    problems = spec_problems(info.value)
    assert len(problems) == 1, problems  # one broken rule per fixture
    assert expected in str(problems[0])


def test_every_invalid_fixture_has_an_expectation() -> None:
    expectations = {p.name.removesuffix(".expected") for p in INVALID.glob("*.expected")}
    assert expectations == {p.name for p in INVALID_SPECS}


def test_nvidia_fixture_is_shaped_like_nvidia_ctk_output() -> None:
    spec = load_spec(VALID / "nvidia.yaml").spec
    assert spec.kind == "nvidia.com/gpu"
    names = [d.name for d in spec.devices]
    assert [n for n in names if n.isdigit()] == [str(i) for i in range(8)]
    assert len([n for n in names if n.startswith("GPU-")]) == 8
    assert {"0:0", "0:1"} <= set(names)
    assert len([n for n in names if n.startswith("MIG-")]) == 2
    all_nodes = {n.path for n in spec.device("all").container_edits.device_nodes}  # type: ignore[union-attr]
    for i in range(8):
        assert f"/dev/nvidia{i}" in all_nodes
    # `all` repeats every node of every GPU and MIG device, as nvidia-ctk writes it.
    for device in spec.devices:
        assert {n.path for n in device.container_edits.device_nodes} <= all_nodes, device.name
    edits = spec.container_edits
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= {n.path for n in edits.device_nodes}
    libraries = [m for m in edits.mounts if ".so" in m.host_path]
    assert len(libraries) >= 38
    option_sets = {m.options for m in libraries}
    assert ("ro", "nosuid", "nodev", "bind") in option_sets
    assert ("ro", "nosuid", "nodev", "rbind", "rprivate") in option_sets
    hook_verbs = {h.args[1] for h in edits.hooks}
    assert {"create-symlinks", "update-ldcache", "disable-device-node-modification"} <= hook_verbs
    assert all(h.path == "/usr/bin/nvidia-cdi-hook" for h in edits.hooks)


def test_bundled_specs_resolve_together() -> None:
    registry = Registry.load([str(VALID)])
    assert not registry.spec_errors and not registry.conflicts and not registry.warnings
    assert registry.kinds() == {
        "nvidia.com/gpu",
        "amd.com/gpu",
        "intel.com/gpu",
        "example.com/nic",
        "example.com/edge",
    }
    resolution = registry.resolve(
        ["nvidia.com/gpu=0", "nvidia.com/gpu=0:1", "amd.com/gpu=1", "intel.com/gpu=card0"]
    )
    assert [s.origin for s in resolution.steps] == [
        "nvidia.com/gpu (spec-level)",
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=0:1",
        "amd.com/gpu (spec-level)",
        "amd.com/gpu=1",
        "intel.com/gpu (spec-level)",
        "intel.com/gpu=card0",
    ]


def test_edge_fixtures_read_as_the_reference_reads_them() -> None:
    spec = load_spec(VALID / "reference-edge-cases.yaml").spec
    assert spec.container_edits.intel_rdt is not None
    assert spec.container_edits.intel_rdt.clos_id == "/"
    node = spec.device("watcher").container_edits.device_nodes[0]  # type: ignore[union-attr]
    assert (node.permissions, node.cgroup_access) == ("none", "")
    env = spec.device("tagged").container_edits.env  # type: ignore[union-attr]
    assert env == ("EDGE_MODE=tagged", "EDGE_NOTE=base64")
    json_spec = load_spec(VALID / "escaped-slash.json").spec
    assert json_spec.devices[0].container_edits.env == ("EDGE_PATH=/opt/edge",)


def test_real_nvidia_ctk_generate_output() -> None:
    loaded = load_spec(GENERATED_CDI / "nvidia-ctk-generate-default.yaml")
    assert loaded.warnings == ()
    spec = loaded.spec
    assert spec.version == "0.5.0"
    assert [d.name for d in spec.devices] == ["0", "all"]
    assert spec.container_edits.env[0].startswith("NVIDIA_CTK_LIBCUDA_DIR=")
    assert any("rprivate" in m.options for m in spec.container_edits.mounts)
    hooks = [h.args[1] for h in spec.container_edits.hooks]
    assert "disable-device-node-modification" in hooks
