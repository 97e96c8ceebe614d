"""The bundle store: the config.json runsc reads for each of an actor's containers,
in ateom's own run dir, never in the node agent's bundles.

The node agent owns the actor's dirs: it writes a fresh bundle per container for
every Run and Restore, and deletes and recreates the dirs the moment a Checkpoint
answers (docs/daemon.md, "The actor's dirs are the node agent's"). A config ateom wrote
into the node agent's bundle had to be given back after the sandbox went, and that
came after the Checkpoint's answer, over dirs the node agent had already reset (or
over the fresh bundles of the next Restore). So ateom's version of each config is
its own file, ``<run dir>/bundles/<uid>/<container>/config.json``, whose root and
relative mount sources name the node agent's bundle (`edits.relocate`), and runsc
is given that directory as ``-bundle``. The node agent's config.json is read once
(`plan`), never written; the only writes into an actor's dirs are the injection's
SONAME links in a rootfs (staged here, before the call answers).

For each container, in this order:
1. stage the rootfs side of the injection (SONAME links, confined);
2. write the planned config.json into ateom's bundle dir: the commit point.
`remove` deletes ateom's bundle dirs of an actor (its run dir only); a daemon that
dies leaves them for its successor's `remove`. Every write goes through
`ateom.safefs` beneath --run-dir, never through a symlink. No fsync: a bundle's
life is its sandbox's, which power loss ends too (see `ateom.safefs`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import structlog

from ateom import safefs
from ateom.daemon.bundles.plan import CONFIG_NAME, ContainerPlan
from ateom.inject.injector import InjectionPlan

log = structlog.get_logger("ateom.bundles")


class BundleStore:
    def __init__(self, actors_root: str, run_dir: str) -> None:
        self.actors_root = actors_root
        self.run_dir = run_dir

    @property
    def bundles_root(self) -> str:
        """Where ateom's bundle dirs of every actor live (under --run-dir)."""
        return bundles_root(self.run_dir)

    def actor_dir(self, uid: str) -> str:
        return os.path.join(self.bundles_root, uid)

    def apply(self, c: ContainerPlan, stage: Callable[[InjectionPlan], None]) -> None:
        """Stage the injection's rootfs links, then write the planned config into
        ateom's bundle dir for the container (writes files). Raises OSError or
        AteomError; the caller removes the actor's bundle dirs on any failure."""
        if c.injection is not None:
            stage(c.injection)
        safefs.write_atomic(os.path.join(c.own_bundle, CONFIG_NAME), c.prepared,
                            beneath=self.run_dir, mode=0o600, make_parents=True)

    def remove(self, uid: str) -> bool:
        """Delete ateom's bundle dirs of `uid` (its own run dir: never the node agent's
        bundles; shutil.rmtree follows no symlink). True when none is left."""
        path = self.actor_dir(uid)
        errors: list[str] = []
        shutil.rmtree(path, onerror=lambda _f, p, exc: errors.append(f"{p}: {exc[1]}"))
        if errors and os.path.lexists(path):
            log.warning("bundle_dir_left", uid=uid, errors=errors[:5])
            return False
        return True

    def uids_with_bundles(self) -> list[str]:
        """Actors whose bundle dirs a dead daemon left (reads the run dir)."""
        try:
            return sorted(os.listdir(self.bundles_root))
        except FileNotFoundError:
            return []


def bundles_root(run_dir: str) -> str:
    """``<run dir>/bundles``: ateom's bundle dir per actor and container (pure)."""
    return os.path.join(run_dir, "bundles")
