"""Spec directories and resolution: priorities, conflicts, broken specs, ordering."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ateom.cdi.registry import Registry, SpecCache, default_spec_dirs
from ateom.cdi.testing import spec_document, write_spec
from ateom.errors import ResolutionError, SpecError
from ateom.settings import DEFAULT_SPEC_DIRS


def spec(kind: str, *devices: str, spec_env: str | None = None, env: str = "X") -> dict[str, Any]:
    return spec_document(
        kind,
        {name: {"env": [f"{env}_{name.replace(':', '_')}=1"]} for name in devices},
        spec_edits={"env": [spec_env]} if spec_env else None,
    )


write = write_spec


def failure(registry: Registry, *names: str) -> dict[str, str]:
    with pytest.raises(ResolutionError) as info:
        registry.resolve(list(names))
    return info.value.failures


# -- directories -------------------------------------------------------------------


def test_default_spec_dirs() -> None:
    assert default_spec_dirs({}) == ("/etc/cdi", "/var/run/cdi") == DEFAULT_SPEC_DIRS
    assert default_spec_dirs({"ATEOM_CDI_SPEC_DIRS": "/a:/b::/c"}) == ("/a", "/b", "/c")
    assert default_spec_dirs({"ATEOM_CDI_SPEC_DIRS": ""}) == DEFAULT_SPEC_DIRS


def test_missing_directories_are_empty(tmp_path: Path) -> None:
    registry = Registry.load([str(tmp_path / "nope"), str(tmp_path / "also-nope")])
    assert registry.devices() == []
    assert dict(registry.spec_errors) == {}


def test_a_file_given_as_directory_is_reported(tmp_path: Path) -> None:
    not_a_dir = write(tmp_path, "file", "x")
    registry = Registry.load([not_a_dir])
    assert "cannot list spec directory" in str(registry.spec_errors[not_a_dir])


def test_only_spec_extensions_are_read(tmp_path: Path) -> None:
    write(tmp_path, "a.json", spec("v.com/a", "0"))
    write(
        tmp_path,
        "b.yaml",
        "cdiVersion: 0.5.0\nkind: v.com/b\ndevices:\n"
        "  - name: '0'\n    containerEdits: {env: [A=1]}\n",
    )
    write(tmp_path, "c.YML", spec("v.com/c", "0"))  # JSON is YAML too
    write(tmp_path, "d.txt", spec("v.com/d", "0"))
    write(tmp_path, "e.json.bak", spec("v.com/e", "0"))
    (tmp_path / "sub.json").mkdir()
    registry = Registry.load([str(tmp_path)])
    assert [d.qualified_name for d in registry.devices()] == ["v.com/a=0", "v.com/b=0", "v.com/c=0"]
    assert registry.kinds() == {"v.com/a", "v.com/b", "v.com/c"}
    assert registry.has_kind("v.com/a") and not registry.has_kind("v.com/d")


def test_later_directory_overrides_earlier(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    write(etc, "gpu.json", spec("v.com/gpu", "0", "1", env="ETC"))
    run_path = write(run, "gpu.json", spec("v.com/gpu", "1", "2", env="RUN"))
    registry = Registry.load([str(etc), str(run)])
    by_name = {d.qualified_name: d for d in registry.devices()}
    assert sorted(by_name) == ["v.com/gpu=0", "v.com/gpu=1", "v.com/gpu=2"]
    assert by_name["v.com/gpu=1"].spec_path == run_path
    assert by_name["v.com/gpu=1"].priority == 1
    assert by_name["v.com/gpu=0"].priority == 0
    resolution = registry.resolve(["v.com/gpu=1"])
    assert resolution.steps[-1].edits.env == ("RUN_1=1",)
    assert not registry.conflicts


def test_same_directory_duplicate_is_a_conflict_naming_both_files(tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", spec("v.com/gpu", "0", "1"))
    b = write(tmp_path, "b.json", spec("v.com/gpu", "1", "2"))
    registry = Registry.load([str(tmp_path)])
    assert [d.qualified_name for d in registry.devices()] == ["v.com/gpu=0", "v.com/gpu=2"]
    assert dict(registry.conflicts) == {"v.com/gpu=1": (a, b)}
    why = failure(registry, "v.com/gpu=1")["v.com/gpu=1"]
    assert a in why and b in why and "same directory" in why
    # The other devices of both specs are unaffected.
    registry.resolve(["v.com/gpu=0", "v.com/gpu=2"])


def test_a_conflict_also_names_a_broken_spec_of_its_kind(tmp_path: Path) -> None:
    a = write(tmp_path / "etc", "a.json", spec("v.com/gpu", "1"))
    b = write(tmp_path / "etc", "b.json", spec("v.com/gpu", "1"))
    fix = spec("v.com/gpu", "1")
    fix["devices"][0]["containerEdits"]["majr"] = 1
    broken = write(tmp_path / "run", "fix.json", fix)
    registry = Registry.load([str(tmp_path / "etc"), str(tmp_path / "run")])
    why = failure(registry, "v.com/gpu=1")["v.com/gpu=1"]
    assert why == (
        f"defined by more than one spec in the same directory ({a} and {b}); "
        f"remove or rename one of them; also spec {broken} (kind v.com/gpu) failed to load: "
        "devices[0].containerEdits.majr: unknown field"
    )


def test_higher_directory_settles_a_lower_conflict(tmp_path: Path) -> None:
    write(tmp_path / "etc", "a.json", spec("v.com/gpu", "1"))
    write(tmp_path / "etc", "b.json", spec("v.com/gpu", "1"))
    run = write(tmp_path / "run", "c.json", spec("v.com/gpu", "1"))
    registry = Registry.load([str(tmp_path / "etc"), str(tmp_path / "run")])
    assert registry.device("v.com/gpu=1").spec_path == run  # type: ignore[union-attr]
    assert not registry.conflicts


def test_broken_spec_hides_nothing_and_is_explained(tmp_path: Path) -> None:
    good = write(tmp_path, "good.json", spec("v.com/gpu", "0"))
    broken_doc = spec("v.com/nic", "eth0")
    broken_doc["devices"][0]["containerEdits"]["majr"] = 1
    broken = write(tmp_path, "broken.json", broken_doc)
    garbage = write(tmp_path, "garbage.yaml", "{{{{")
    registry = Registry.load([str(tmp_path)])
    assert [d.qualified_name for d in registry.devices()] == ["v.com/gpu=0"]
    assert set(registry.spec_errors) == {broken, garbage}
    assert "majr: unknown field" in str(registry.spec_errors[broken])
    failures = failure(registry, "v.com/nic=eth0", "v.com/gpu=0", "v.com/other=x")
    assert set(failures) == {"v.com/nic=eth0", "v.com/other=x"}
    assert f"spec {broken} (kind v.com/nic) failed to load" in failures["v.com/nic=eth0"]
    assert "majr: unknown field" in failures["v.com/nic=eth0"]
    assert registry.resolve(["v.com/gpu=0"]).steps[0].spec_path == good


def test_broken_spec_of_a_loaded_kind_is_mentioned(tmp_path: Path) -> None:
    write(tmp_path, "a.json", spec("v.com/gpu", "0"))
    bad = spec("v.com/gpu", "1")
    bad["cdiVersion"] = "9.9.9"
    write(tmp_path, "b.json", bad)
    why = failure(Registry.load([str(tmp_path)]), "v.com/gpu=1")["v.com/gpu=1"]
    assert "no device '1'" in why and "devices there: 0" in why
    assert "unknown CDI version '9.9.9'" in why


def test_unresolvable_reasons_list_every_name(tmp_path: Path) -> None:
    write(tmp_path, "gpu.json", spec("v.com/gpu", "0", "1", "10", "2", "all"))
    registry = Registry.load([str(tmp_path)])
    failures = failure(registry, "v.com/gpu=3", "v.com/tpu=0", "nonsense", "v.com/gpu=0")
    assert list(failures) == ["v.com/gpu=3", "v.com/tpu=0", "nonsense"]
    assert failures["v.com/gpu=3"].endswith("devices there: 0, 1, 2, 10, all")
    assert "no CDI spec for kind 'v.com/tpu'" in failures["v.com/tpu=0"]
    assert "kinds available: v.com/gpu" in failures["v.com/tpu=0"]
    assert "invalid qualified device name 'nonsense'" in failures["nonsense"]
    with pytest.raises(ResolutionError) as info:
        registry.resolve(["v.com/gpu=3", "v.com/tpu=0"])
    assert "unresolvable CDI devices:" in str(info.value)


def test_long_device_lists_are_elided(tmp_path: Path) -> None:
    write(tmp_path, "gpu.json", spec("v.com/gpu", *[str(i) for i in range(40)]))
    why = failure(Registry.load([str(tmp_path)]), "v.com/gpu=x")["v.com/gpu=x"]
    assert why.endswith("22, 23, ... (16 more)")


# -- resolution order ---------------------------------------------------------------


def test_resolution_order_and_dedup(tmp_path: Path) -> None:
    gpu = write(tmp_path, "gpu.json", spec("v.com/gpu", "0", "1", spec_env="GPU_SPEC=1"))
    nic = write(tmp_path, "nic.json", spec("v.com/nic", "a", spec_env="NIC_SPEC=1"))
    plain = write(tmp_path, "plain.json", spec("v.com/plain", "p"))
    registry = Registry.load([str(tmp_path)])
    resolution = registry.resolve(
        ["v.com/gpu=1", "v.com/nic=a", "v.com/gpu=0", "v.com/gpu=1", "v.com/plain=p"]
    )
    assert resolution.devices == ("v.com/gpu=1", "v.com/nic=a", "v.com/gpu=0", "v.com/plain=p")
    assert [(s.origin, s.spec_path, s.edits.env) for s in resolution.steps] == [
        ("v.com/gpu (spec-level)", gpu, ("GPU_SPEC=1",)),
        ("v.com/gpu=1", gpu, ("X_1=1",)),
        ("v.com/nic (spec-level)", nic, ("NIC_SPEC=1",)),
        ("v.com/nic=a", nic, ("X_a=1",)),
        ("v.com/gpu=0", gpu, ("X_0=1",)),
        # plain has no spec-level edits: no empty step for it
        ("v.com/plain=p", plain, ("X_p=1",)),
    ]


def test_empty_request_resolves_to_nothing(tmp_path: Path) -> None:
    registry = Registry.load([str(tmp_path)])
    resolution = registry.resolve([])
    assert resolution.devices == () and resolution.steps == ()


def test_a_lone_string_is_one_name(tmp_path: Path) -> None:
    write(tmp_path, "gpu.json", spec("v.com/gpu", "0"))
    assert Registry.load([str(tmp_path)]).resolve("v.com/gpu=0").devices == ("v.com/gpu=0",)


def test_resolve_is_pure_over_the_snapshot(tmp_path: Path) -> None:
    path = write(tmp_path, "gpu.json", spec("v.com/gpu", "0"))
    registry = Registry.load([str(tmp_path)])
    os.unlink(path)
    assert registry.resolve(["v.com/gpu=0"]).devices == ("v.com/gpu=0",)
    assert Registry.load([str(tmp_path)]).devices() == []


def test_warnings_are_collected(tmp_path: Path) -> None:
    doc = spec("v.com/gpu", "0")
    doc["devices"][0]["containerEdits"]["deviceNodes"] = [{"path": "dev/x"}]
    path = write(tmp_path, "gpu.json", doc)
    registry = Registry.load([str(tmp_path)])
    assert registry.warnings == (
        f"{path}: warning: devices[0].containerEdits.deviceNodes[0].path: "
        "device node path 'dev/x' is not absolute",
    )
    assert [d.qualified_name for d in registry.devices()] == ["v.com/gpu=0"]


# -- the spec cache ---------------------------------------------------------------


def test_unchanged_specs_come_from_the_cache(tmp_path: Path) -> None:
    cache = SpecCache()
    write(tmp_path, "gpu.json", spec("v.com/gpu", "0"))
    first = Registry.load([str(tmp_path)], cache=cache)
    second = Registry.load([str(tmp_path / "other"), str(tmp_path)], cache=cache)
    assert len(cache) == 1
    assert second.device("v.com/gpu=0").spec is first.device("v.com/gpu=0").spec  # type: ignore[union-attr]
    assert second.device("v.com/gpu=0").priority == 1  # type: ignore[union-attr]
    uncached = Registry.load([str(tmp_path)], cache=None)
    assert uncached.device("v.com/gpu=0").spec is not first.device("v.com/gpu=0").spec  # type: ignore[union-attr]
    assert uncached.device("v.com/gpu=0").spec == first.device("v.com/gpu=0").spec  # type: ignore[union-attr]


def test_a_rewritten_spec_is_read_again_even_with_the_same_size_and_mtime(tmp_path: Path) -> None:
    cache = SpecCache()
    path = write(tmp_path, "gpu.json", spec("v.com/gpu", "0"))
    before = os.stat(path)
    assert Registry.load([str(tmp_path)], cache=cache).device("v.com/gpu=0")
    write(tmp_path, "gpu.json", spec("v.com/gpu", "1"))  # same length
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size
    registry = Registry.load([str(tmp_path)], cache=cache)
    assert [d.qualified_name for d in registry.devices()] == ["v.com/gpu=1"]


def test_broken_specs_are_cached_until_fixed(tmp_path: Path) -> None:
    cache = SpecCache()
    path = write(tmp_path, "gpu.json", "{")
    assert path in Registry.load([str(tmp_path)], cache=cache).spec_errors
    assert path in Registry.load([str(tmp_path)], cache=cache).spec_errors
    write(tmp_path, "gpu.json", spec("v.com/gpu", "0", "1"))
    registry = Registry.load([str(tmp_path)], cache=cache)
    assert not registry.spec_errors and len(registry.devices()) == 2


def test_cache_is_bounded(tmp_path: Path) -> None:
    cache = SpecCache(max_entries=3)
    for i in range(5):
        write(tmp_path, f"s{i}.json", spec(f"v.com/c{i}", "0"))
    assert len(Registry.load([str(tmp_path)], cache=cache).devices()) == 5
    assert len(cache) == 3
    cache.clear()
    assert len(cache) == 0


def test_testing_helpers_write_yaml_and_json(tmp_path: Path) -> None:
    doc = spec_document(
        "v.com/gpu",
        {"0": {"deviceNodes": [{"path": "/dev/null"}]}},
        version="0.6.0",
        annotations={"v.com/a": "b"},
    )
    write_spec(tmp_path, "a.yaml", doc)
    write_spec(tmp_path, "b.json", spec_document("v.com/nic", {"x": {"env": ["A=1"]}}))
    registry = Registry.load([str(tmp_path)])
    assert not registry.spec_errors
    assert [d.qualified_name for d in registry.devices()] == ["v.com/gpu=0", "v.com/nic=x"]
    assert registry.device("v.com/gpu=0").spec.annotations == {"v.com/a": "b"}  # type: ignore[union-attr]


# -- files that are not plain spec files ---------------------------------------------


def test_a_fifo_with_a_spec_name_is_an_error_not_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.json")
    write(tmp_path, "gpu.json", spec("v.com/gpu", "0"))
    registry = Registry.load([str(tmp_path)], cache=None)
    assert str(registry.spec_errors[str(tmp_path / "pipe.json")]).endswith("not a regular file")
    assert [d.qualified_name for d in registry.devices()] == ["v.com/gpu=0"]


@pytest.mark.parametrize("cache", [None, SpecCache()], ids=["uncached", "cached"])
def test_unreadable_links_and_devices_are_spec_errors(tmp_path: Path, cache: Any) -> None:
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    good = write(tmp_path / "elsewhere", "gpu.json", spec("v.com/gpu", "0"))
    (tmp_path / "linked.json").symlink_to(good)
    registry = Registry.load([str(tmp_path)], cache=cache)
    errors = {os.path.basename(p): e.reason for p, e in registry.spec_errors.items()}
    assert errors == {
        "zero.yaml": "not a regular file",
        "dangling.json": "cannot read: No such file or directory",
        "loop.yaml": "cannot read: Too many levels of symbolic links",
    }
    linked = registry.device("v.com/gpu=0")
    assert linked is not None and linked.spec_path == str(tmp_path / "linked.json")


def test_a_spec_over_the_size_limit_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ateom.cdi import spec_file

    text = json.dumps(spec("v.com/gpu", "0"))
    monkeypatch.setattr(spec_file, "MAX_SPEC_BYTES", len(text) + 10)
    at_limit = write(tmp_path, "at.json", text + " " * 10)
    over = write(tmp_path, "over.json", text + " " * 11)
    assert spec_file.load_spec(at_limit).spec.kind == "v.com/gpu"
    with pytest.raises(SpecError) as info:
        spec_file.load_spec(over)
    assert str(info.value) == f"{over}: file is larger than {len(text) + 10} bytes"
    assert set(Registry.load([str(tmp_path)], cache=None).spec_errors) == {over}


def test_a_file_that_stats_as_empty_is_read_whole_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ateom.cdi import spec_file

    proc = "/proc/self/cmdline"  # a regular file whose st_size is 0
    with open(proc, "rb") as f:
        whole = f.read()
    assert os.stat(proc).st_size == 0 and len(whole) > 1
    assert spec_file.read_spec_bytes(proc) == whole
    monkeypatch.setattr(spec_file, "MAX_SPEC_BYTES", len(whole) - 1)
    with pytest.raises(SpecError, match="file is larger than"):
        spec_file.read_spec_bytes(proc)


def test_no_spec_for_a_kind_names_specs_too_broken_to_tell_their_kind(tmp_path: Path) -> None:
    write(tmp_path, "gpu.json", spec("v.com/gpu", "0"))
    garbage = write(tmp_path, "nic.yaml", "kind: v.com/nic\ndevices: [\n")
    why = failure(Registry.load([str(tmp_path)]), "v.com/nic=0")["v.com/nic=0"]
    assert "no CDI spec for kind 'v.com/nic'" in why
    assert f"failed to load, any of which may be it: {garbage}: invalid YAML: line 3" in why
    # A broken spec whose kind is known is not offered as a guess for other kinds.
    write(tmp_path, "nic.yaml", "cdiVersion: 9.9.9\nkind: v.com/nic\ndevices: []\n")
    why = failure(Registry.load([str(tmp_path)]), "v.com/tpu=0")["v.com/tpu=0"]
    assert why.endswith("kinds available: v.com/gpu")
