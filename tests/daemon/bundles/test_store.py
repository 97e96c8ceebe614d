"""The bundle store: ateom's config for runsc in its own run dir, the node agent's
bundle read, never written, so nothing of ateom's lands in the actor's dirs after a
call has answered."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ateom.daemon.bundles.plan import ContainerPlan
from ateom.daemon.bundles.store import BundleStore
from ateom.inject.injector import InjectionPlan


@pytest.fixture
def store(tmp_path: Path) -> BundleStore:
    (tmp_path / "actors").mkdir()
    (tmp_path / "run").mkdir()
    return BundleStore(str(tmp_path / "actors"), str(tmp_path / "run"))


def _plan(store: BundleStore, uid: str, name: str, prepared: bytes) -> ContainerPlan:
    bundle = Path(store.actors_root) / uid / "bundles" / name
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_bytes(b'{"node agent":1}')
    return ContainerPlan(name=name, runsc_id=name, bundle=str(bundle),
                         original=b'{"node agent":1}', prepared=prepared, devices=(),
                         injection=None, is_sandbox=False,
                         own_bundle=os.path.join(store.actor_dir(uid), name))


def _no_stage(plan: InjectionPlan) -> None:
    raise AssertionError("nothing to stage without devices")


def test_apply_writes_ateoms_config_in_its_own_dir_and_never_the_node_agents(
        store: BundleStore) -> None:
    plan = _plan(store, "a", "app", b'{"ateom":1}')
    store.apply(plan, _no_stage)
    own = Path(plan.own_bundle) / "config.json"
    assert own.read_bytes() == b'{"ateom":1}'
    assert own.stat().st_mode & 0o777 == 0o600
    assert (Path(plan.bundle) / "config.json").read_bytes() == b'{"node agent":1}'
    assert str(own).startswith(store.run_dir + "/bundles/a/")
    assert store.uids_with_bundles() == ["a"]


def test_remove_takes_only_ateoms_dirs(store: BundleStore) -> None:
    plans = [_plan(store, "a", name, b"{}") for name in ("_pause", "app")]
    for plan in plans:
        store.apply(plan, _no_stage)
    assert store.remove("a")
    assert not os.path.lexists(store.actor_dir("a")) and store.uids_with_bundles() == []
    for plan in plans:  # the node agent's bundles as they were
        assert (Path(plan.bundle) / "config.json").read_bytes() == b'{"node agent":1}'
    assert store.remove("never-hosted")  # nothing there is nothing left


def test_remove_follows_no_symlink_out_of_the_run_dir(store: BundleStore,
                                                      tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_bytes(b"x")
    store.apply(_plan(store, "a", "app", b"{}"), _no_stage)
    (Path(store.actor_dir("a")) / "link").symlink_to(victim)
    assert store.remove("a")
    assert (victim / "precious").read_bytes() == b"x"


def test_writes_never_follow_a_symlink_planted_in_ateoms_dir(store: BundleStore,
                                                             tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    plan = _plan(store, "a", "app", b'{"ateom":1}')
    Path(plan.own_bundle).mkdir(parents=True)
    (Path(plan.own_bundle) / "config.json").symlink_to(victim)
    store.apply(plan, _no_stage)
    assert victim.read_bytes() == b"precious"
    assert json.loads((Path(plan.own_bundle) / "config.json").read_bytes()) == {"ateom": 1}


def test_an_own_dir_reached_through_a_symlink_is_refused(store: BundleStore,
                                                         tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    Path(store.bundles_root).mkdir(parents=True)
    Path(store.actor_dir("a")).symlink_to(outside)
    with pytest.raises(OSError):
        store.apply(_plan(store, "a", "app", b"{}"), _no_stage)
    assert list(outside.iterdir()) == []
