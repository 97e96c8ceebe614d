"""An actor's directories as the node agent lays them out, for the volume tests."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from ateom.volumes import DurableVolume, VolumeKind, VolumeRequest, VolumeRoots, plan_mounts


@dataclass(frozen=True)
class Layout:
    actors: Path  # --actors-root
    actor: Path
    durable: Path
    sysinfo: Path
    volumes: Path
    checkpoint: Path
    restore: Path
    outside: Path  # what nothing may ever write to (holds a sentinel)

    def roots(self, *, with_actors_root: bool = True) -> VolumeRoots:
        return VolumeRoots(
            durable_dir_volume_mounts_dir=str(self.durable),
            system_info_volume_roots_dir=str(self.sysinfo),
            volumes_dir=str(self.volumes),
            actors_root=str(self.actors) if with_actors_root else "",
        )

    def durable_volume(self, name: str = "data", *, make: bool = True) -> DurableVolume:
        if make:
            (self.durable / name).mkdir(exist_ok=True)
        plan = plan_mounts(0, "app", [VolumeRequest(VolumeKind.DURABLE_DIR, name, "/data")],
                           self.roots())
        return plan.durable[0]

    def outside_snapshot(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in self.outside.iterdir()}


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    actors = tmp_path / "actors"
    actor = actors / "uid-1"
    paths = {name: actor / name for name in ("durable", "sysinfo", "volumes", "checkpoint",
                                             "restore")}
    for path in paths.values():
        path.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "sentinel").write_bytes(b"untouched")
    return Layout(actors=actors, actor=actor, outside=outside, **paths)


def is_root() -> bool:
    return os.geteuid() == 0


def tree(top: Path) -> dict[str, tuple[object, ...]]:
    """Everything under `top` (not `top` itself), never following a symlink:
    relative name -> (kind, mode, contents or link target, mtime_ns, uid, gid)."""
    found: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, top)
            if os.path.islink(path):
                what: tuple[object, ...] = ("link", None, os.readlink(path))
            elif os.path.isdir(path):
                what = ("dir", st.st_mode & 0o7777, None)
            else:
                what = ("file", st.st_mode & 0o7777, Path(path).read_bytes())
            found[rel] = (*what, st.st_mtime_ns, st.st_uid, st.st_gid)
    return found
