"""The bundle store: ateom's config in, the node agent's back, across a crash too."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from ateom.daemon.bundles.plan import ContainerPlan
from ateom.daemon.bundles.store import BundleStore, KeptOriginal
from ateom.inject.injector import InjectionPlan


def _plan(bundle: Path, name: str, original: bytes, prepared: bytes) -> ContainerPlan:
    return ContainerPlan(name=name, runsc_id=name, bundle=str(bundle), original=original,
                         prepared=prepared, devices=(), injection=None, is_sandbox=False)


@pytest.fixture
def store(tmp_path: Path) -> BundleStore:
    (tmp_path / "actors").mkdir()
    (tmp_path / "run").mkdir()
    return BundleStore(str(tmp_path / "actors"), str(tmp_path / "run"))


def _bundle(store: BundleStore, uid: str, name: str, config: bytes) -> Path:
    bundle = Path(store.actors_root) / uid / "bundles" / name
    bundle.mkdir(parents=True)
    (bundle / "config.json").write_bytes(config)
    return bundle


def _no_stage(plan: InjectionPlan) -> None:
    raise AssertionError("nothing to stage without devices")


def test_apply_keeps_the_original_then_writes_the_plan(store: BundleStore) -> None:
    bundle = _bundle(store, "a", "app", b'{"orig":1}')
    store.apply("a", _plan(bundle, "app", b'{"orig":1}', b'{"ateom":1}'), _no_stage)
    assert (bundle / "config.json").read_bytes() == b'{"ateom":1}'
    record = Path(store.records_dir("a")) / "app.json"
    assert KeptOriginal.from_json(record.read_bytes()) == KeptOriginal(str(bundle),
                                                                       b'{"orig":1}')
    assert record.stat().st_mode & 0o777 == 0o600
    assert store.uids_with_records() == ["a"]


def test_the_bundles_config_mode_is_kept_through_ateoms_version_and_back(
        store: BundleStore) -> None:
    bundle = _bundle(store, "a", "app", b'{"orig":1}')
    os.chmod(bundle / "config.json", 0o600)
    plan = dataclasses.replace(_plan(bundle, "app", b'{"orig":1}', b'{"ateom":1}'), mode=0o600)
    store.apply("a", plan, _no_stage)
    assert (bundle / "config.json").stat().st_mode & 0o777 == 0o600
    assert BundleStore(store.actors_root, store.run_dir).give_back_kept("a")  # a crash
    assert (bundle / "config.json").read_bytes() == b'{"orig":1}'
    assert (bundle / "config.json").stat().st_mode & 0o777 == 0o600


def test_give_back_writes_originals_and_drops_records(store: BundleStore) -> None:
    plans = []
    for name in ("_pause", "app"):
        bundle = _bundle(store, "a", name, f'{{"{name}":0}}'.encode())
        plans.append(_plan(bundle, name, f'{{"{name}":0}}'.encode(), b"{}"))
        store.apply("a", plans[-1], _no_stage)
    assert store.give_back("a", plans)
    for c in plans:
        assert Path(c.config_path).read_bytes() == c.original
    assert not store.has_records("a") and store.uids_with_records() == []


def test_a_dead_daemons_records_give_the_bundles_back(store: BundleStore) -> None:
    bundle = _bundle(store, "a", "app", b'{"orig":1}')
    store.apply("a", _plan(bundle, "app", b'{"orig":1}', b'{"ateom":1}'), _no_stage)
    successor = BundleStore(store.actors_root, store.run_dir)  # knows nothing in memory
    assert successor.give_back_kept("a")
    assert (bundle / "config.json").read_bytes() == b'{"orig":1}'
    assert not successor.has_records("a")


def test_a_record_naming_a_bundle_outside_actors_root_is_kept_not_followed(
        store: BundleStore, tmp_path: Path) -> None:
    victim = tmp_path / "etc"
    victim.mkdir()
    (victim / "config.json").write_bytes(b"host file")
    records = Path(store.records_dir("evil"))
    records.mkdir(parents=True)
    (records / "app.json").write_bytes(KeptOriginal(str(victim), b"pwned").to_json())
    assert not store.give_back_kept("evil")
    assert (victim / "config.json").read_bytes() == b"host file"
    assert store.has_records("evil")  # kept for an operator to look at


@pytest.mark.parametrize("raw", [b"", b"{", b'{"bundle": 1, "config": ""}',
                                 b'{"bundle": "/x", "config": "not base64!"}', b"[]"])
def test_a_corrupt_record_is_logged_and_kept(store: BundleStore, raw: bytes) -> None:
    records = Path(store.records_dir("c"))
    records.mkdir(parents=True)
    (records / "app.json").write_bytes(raw)
    assert not store.give_back_kept("c")
    assert store.has_records("c")


def test_writes_never_follow_a_symlinked_config_or_temp(store: BundleStore,
                                                        tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    bundle = _bundle(store, "a", "app", b"{}")
    (bundle / "config.json.ateom-tmp").symlink_to(victim)
    os.unlink(bundle / "config.json")
    (bundle / "config.json").symlink_to(victim)
    store.apply("a", _plan(bundle, "app", b"{}", b'{"ateom":1}'), _no_stage)
    assert victim.read_bytes() == b"precious"
    assert not (bundle / "config.json").is_symlink()
    assert json.loads((bundle / "config.json").read_bytes()) == {"ateom": 1}


def test_a_bundle_dir_reached_through_a_symlink_is_refused(store: BundleStore,
                                                           tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    bundles = Path(store.actors_root) / "a" / "bundles"
    bundles.mkdir(parents=True)
    (bundles / "app").symlink_to(outside)
    with pytest.raises(OSError):
        store.apply("a", _plan(bundles / "app", "app", b"{}", b"{}"), _no_stage)
    assert list(outside.iterdir()) == []


def test_a_failed_give_back_keeps_the_records_for_a_retry(store: BundleStore) -> None:
    bundle = _bundle(store, "a", "app", b'{"orig":1}')
    plan = _plan(bundle, "app", b'{"orig":1}', b'{"ateom":1}')
    store.apply("a", plan, _no_stage)
    os.unlink(bundle / "config.json")
    os.rmdir(bundle)  # the node agent removed the bundle: nothing to write into
    assert not store.give_back("a", [plan])
    assert store.has_records("a")
