"""An actor's volumes: which host directory each container's volume mounts
come from, and its durable-dir data in and out of snapshots.

Read in this order (each module imports only those before it; below the
daemon, which translates its requests into these types):

1. `mounts`: the vocabulary (`VolumeKind`, `VolumeRequest`, `VolumeRoots`) and
   the pure plan — each mount checked and named by its wire field,
   `plan_mounts` (one container's `MountPlan`: host directories, OCI bind
   mounts, read-only for system-info and image volumes), `durable_volumes`,
   `merge_mounts` (the plan into config.json's `mounts`).
2. `confine`: `check_host_dirs`, every host directory reached from its trusted
   directory without a symlink, before any runsc call; `open_host_dir`.
3. `archive`: what a snapshot tar may hold, member by member (pure).
4. `walk`: a volume directory written into a tar, never through a symlink.
5. `extract`: a snapshot tar checked whole, then extracted into an emptied
   volume directory, confined.
6. `durable`: `capture` (one ``durable-<name>.tar`` per volume into the
   checkpoint dir) and `restore` (each volume emptied and extracted, confined,
   after every tar is checked).
"""

from ateom.volumes.confine import check_host_dirs, open_host_dir
from ateom.volumes.durable import CaptureResult, capture, restore
from ateom.volumes.mounts import (
    DurableVolume,
    MountPlan,
    PlannedVolume,
    VolumeKind,
    VolumeRequest,
    VolumeRoots,
    durable_volumes,
    merge_mounts,
    plan_mounts,
)
from ateom.volumes.walk import Skipped

__all__ = [
    "CaptureResult",
    "DurableVolume",
    "MountPlan",
    "PlannedVolume",
    "Skipped",
    "VolumeKind",
    "VolumeRequest",
    "VolumeRoots",
    "capture",
    "check_host_dirs",
    "durable_volumes",
    "merge_mounts",
    "open_host_dir",
    "plan_mounts",
    "restore",
]
