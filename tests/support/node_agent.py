"""Substrate's node agent (`atelet`) around each ateom call, as its public source does it.

Facts from ../shared/node-agent-contract.md ("Who owns what, and when"):
- before a Run or a Restore it lays the actor's dirs out afresh (`ActorDirs`) and writes a
  fresh OCI bundle per container (the sandbox root `_pause` and one per app), from the
  image, whatever the earlier call left; for a Restore it downloads into `restore_dir`
  exactly the files the Checkpoint listed (all of them at FULL scope, the
  `data_snapshot_files` at DATA scope);
- system-info volumes are regenerated on every Run and Restore; durable-dir volumes are
  prepared empty (their data comes back from a snapshot);
- on a Checkpoint's answer, at once: it moves exactly `snapshot_files` out of
  `checkpoint_dir` (to object storage: a dir per snapshot URI here) and deletes and
  recreates the actor's dirs ("resetActorDirs"); a DATA snapshot leaves the actor
  running, so then it moves the files only;
- every Checkpoint and Restore names the snapshot by its object-storage URI
  (``gs://bucket/root/atespaces/<atespace>/actors/<uid>/snapshots/<n>``);
- the older node agent (2026-06-30) also sends ``runtime_asset_paths = {"runsc":
  <runsc_path>}`` on every call (`legacy`).

Every answer's aftermath is recorded (`NodeAgent.dirs_after_answer`): the actor's tree as
the node agent left it right after it reacted, which a test compares with the tree once
ateom is idle, so a write ateom made into the actor's dirs after answering is caught.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from tests.support.bundle import build_busybox_bundle

PAUSE = "_pause"


@dataclass(frozen=True)
class App:
    """One app container as the ActorTemplate gives it: its command, env, volumes."""

    name: str
    args: tuple[str, ...]
    env: tuple[str, ...] = ()
    durable: Mapping[str, str] = field(default_factory=dict)  # volume name -> mount path
    system_info: Mapping[str, str] = field(default_factory=dict)
    image_volumes: Mapping[str, str] = field(default_factory=dict)
    devices: pb.DeviceRequest | None = None
    wakeup: tuple[str, int, int] | None = None  # HTTP GET path, port, timeout_seconds

    def wire(self) -> pb.Container:
        probe = None
        if self.wakeup is not None:
            path, port, timeout = self.wakeup
            probe = pb.WakeupProbe(http_get=pb.HTTPGetAction(path=path, port=port),
                                   timeout_seconds=timeout)
        return pb.Container(
            wakeup_probe=probe,
            name=self.name, devices=self.devices or pb.DeviceRequest(
                policy=pb.DEVICE_POLICY_NONE),
            durable_dir_volume_mounts=[pb.DurableDirVolumeMount(volume_name=v, mount_path=p)
                                       for v, p in self.durable.items()],
            system_info_volume_mounts=[pb.SystemInfoVolumeMount(volume_name=v, mount_path=p)
                                       for v, p in self.system_info.items()],
            image_volume_mounts=[pb.ImageVolumeMount(volume_name=v, mount_path=p)
                                 for v, p in self.image_volumes.items()])


@dataclass(frozen=True)
class Actor:
    uid: str
    apps: tuple[App, ...]
    atespace: str = "demo"
    name: str = ""

    def spec(self) -> pb.WorkloadSpec:
        return pb.WorkloadSpec(containers=[a.wire() for a in self.apps])


@dataclass(frozen=True)
class Snapshot:
    """A snapshot in object storage: its URI, the files in it, those for DATA scope."""

    uri: str
    scope: pb.SnapshotScope
    files: tuple[str, ...]
    data_files: tuple[str, ...]
    stored: Path  # the object-storage stand-in's dir for this URI


def tree(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry under `root`: relative path -> (kind, mode, content digest or link).
    Reads files; follows no link."""
    out: dict[str, tuple[str, int, str]] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", 0, os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir", st.st_mode & 0o7777, "")
            else:
                out[rel] = ("file", st.st_mode & 0o7777,
                            hashlib.sha256(path.read_bytes()).hexdigest())
    return out


class NodeAgent:
    """Drives one ateom as Substrate's node agent does (module doc)."""

    def __init__(self, channel_target: str, actors_root: Path, storage: Path, *,
                 runsc_path: str = "", legacy: bool = False,
                 pause_args: Sequence[str] = ("sleep", "100000")) -> None:
        import grpc

        self.channel = grpc.insecure_channel(channel_target)
        self.stub = pb_grpc.AteomStub(self.channel)
        self.actors_root = actors_root
        self.storage = storage
        self.runsc_path = runsc_path
        self.legacy = legacy
        self.pause_args = tuple(pause_args)
        self.snapshots = 0
        self.dirs_after_answer: dict[str, dict[str, tuple[str, int, str]]] = {}

    # -- the actor's dirs --------------------------------------------------------------

    def dirs(self, uid: str) -> pb.ActorDirs:
        root = self.actors_root / uid
        return pb.ActorDirs(
            root_dir=str(root), oci_bundle_dir=str(root / "bundles"),
            checkpoint_dir=str(root / "checkpoint"), restore_dir=str(root / "restore"),
            durable_dir_volume_mounts_dir=str(root / "durable"),
            system_info_volume_roots_dir=str(root / "sysinfo"),
            volumes_dir=str(root / "volumes"))

    def reset(self, uid: str) -> None:
        """resetActorDirs: delete the actor's dirs and make them again, empty."""
        shutil.rmtree(self.actors_root / uid, ignore_errors=True)
        d = self.dirs(uid)
        for path in (d.oci_bundle_dir, d.checkpoint_dir, d.restore_dir,
                     d.durable_dir_volume_mounts_dir, d.system_info_volume_roots_dir,
                     d.volumes_dir):
            os.makedirs(path, exist_ok=True)

    def lay_out(self, actor: Actor) -> None:
        """Fresh dirs, fresh bundles from the image, every volume's dir prepared."""
        self.reset(actor.uid)
        d = self.dirs(actor.uid)
        build_busybox_bundle(Path(d.oci_bundle_dir) / PAUSE, self.pause_args)
        for app in actor.apps:
            build_busybox_bundle(Path(d.oci_bundle_dir) / app.name, app.args, env=app.env)
            for volume in app.durable:
                os.makedirs(Path(d.durable_dir_volume_mounts_dir) / volume, exist_ok=True)
            for volume in app.system_info:
                info = Path(d.system_info_volume_roots_dir) / volume
                info.mkdir(parents=True, exist_ok=True)
                (info / "actor").write_text(f"{actor.atespace}/{actor.uid}\n")
            for volume in app.image_volumes:
                image = Path(d.volumes_dir) / volume
                image.mkdir(parents=True, exist_ok=True)
                (image / "weights").write_text("image volume content\n")

    def _assets(self) -> dict[str, str]:
        return {"runsc": self.runsc_path} if self.legacy and self.runsc_path else {}

    def _common(self, actor: Actor) -> dict[str, Any]:
        return dict(atespace=actor.atespace, actor_name=actor.name or actor.uid,
                    actor_uid=actor.uid, runsc_path=self.runsc_path, spec=actor.spec(),
                    actor_dirs=self.dirs(actor.uid))

    def _answered(self, uid: str) -> None:
        self.dirs_after_answer[uid] = tree(self.actors_root / uid)

    # -- the calls -------------------------------------------------------------------

    def run(self, actor: Actor, timeout: float = 120, **kw: Any) -> None:
        self.lay_out(actor)
        self.stub.RunWorkload(pb.RunWorkloadRequest(
            **self._common(actor), runtime_asset_paths=self._assets(), **kw), timeout=timeout)
        self._answered(actor.uid)

    def snapshot_uri(self, actor: Actor) -> str:
        self.snapshots += 1
        return (f"gs://bucket/root/atespaces/{actor.atespace}/actors/{actor.uid}/snapshots/"
                f"{5677 + self.snapshots}")

    def checkpoint(self, actor: Actor, scope: pb.SnapshotScope = pb.SNAPSHOT_SCOPE_FULL,
                   timeout: float = 120) -> Snapshot:
        """Checkpoint, then at once what the node agent does on the answer: the listed
        files moved to object storage, the dirs reset (not at DATA scope: the actor
        keeps running)."""
        uri = self.snapshot_uri(actor)
        answer = self.stub.CheckpointWorkload(pb.CheckpointWorkloadRequest(
            **self._common(actor), snapshot_uri=uri, scope=scope,
            runtime_asset_paths=self._assets()), timeout=timeout)
        stored = self.storage / uri.removeprefix("gs://")
        stored.mkdir(parents=True)
        checkpoint_dir = Path(self.dirs(actor.uid).checkpoint_dir)
        for name in answer.snapshot_files:
            target = stored / name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(checkpoint_dir / name, target)  # a missing file fails the test here
        if scope != pb.SNAPSHOT_SCOPE_DATA:
            self.reset(actor.uid)
        self._answered(actor.uid)
        return Snapshot(uri, scope, tuple(answer.snapshot_files),
                        tuple(answer.data_snapshot_files), stored)

    def restore(self, actor: Actor, snapshot: Snapshot, *,
                scope: pb.SnapshotScope | None = None,
                timeout: float = 120, **kw: Any) -> None:
        """Fresh dirs and bundles, the snapshot's files downloaded into restore_dir (all
        of them at FULL, the DATA ones at DATA scope), then RestoreWorkload."""
        scope = snapshot.scope if scope is None else scope
        self.lay_out(actor)
        restore_dir = Path(self.dirs(actor.uid).restore_dir)
        wanted = snapshot.data_files if scope == pb.SNAPSHOT_SCOPE_DATA else snapshot.files
        for name in wanted:
            (restore_dir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(snapshot.stored / name, restore_dir / name)
        self.stub.RestoreWorkload(pb.RestoreWorkloadRequest(
            **self._common(actor), snapshot_uri=snapshot.uri, scope=scope,
            runtime_asset_paths=self._assets(), **kw), timeout=timeout)
        self._answered(actor.uid)

    def terminate(self, actor: Actor, timeout: float = 60) -> None:
        self.stub.TerminateWorkload(pb.TerminateWorkloadRequest(
            atespace=actor.atespace, actor_uid=actor.uid, runsc_path=self.runsc_path,
            spec=actor.spec(), actor_dirs=self.dirs(actor.uid)), timeout=timeout)
        self._answered(actor.uid)

    def close(self) -> None:
        self.channel.close()
