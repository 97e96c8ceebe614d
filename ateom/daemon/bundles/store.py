"""The bundle store: ateom's config.json in an actor's bundles while its sandbox
lives, the node agent's own given back when it goes, even across a crash.

For each container, in this order:
1. keep the node agent's config.json under ``<run dir>/bundles/<uid>/`` (a
   crash record: a daemon that dies leaves it for its successor);
2. stage the rootfs side of the injection (SONAME links, confined);
3. write the planned config.json: the commit point.
Giving back writes each kept original over ateom's config and then drops the
records. Every write goes through `ateom.safefs`: beneath --actors-root (the
bundles) or --run-dir (the records), never through a symlink, old-or-new
after ``kill -9``. No fsync: a bundle's life is its sandbox's, which power
loss ends too (see `ateom.safefs`).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from ateom import safefs
from ateom.daemon.bundles.plan import CONFIG_NAME, ContainerPlan
from ateom.daemon.calls.validation import check_path_on_disk
from ateom.errors import AteomError
from ateom.inject.injector import InjectionPlan

log = structlog.get_logger("ateom.bundles")

_RECORD_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class KeptOriginal:
    """A crash record: the bundle and the config.json (and its mode) it had before
    ateom wrote it."""

    bundle: str
    config: bytes
    mode: int = 0o644

    def to_json(self) -> bytes:
        return json.dumps({"bundle": self.bundle, "mode": self.mode,
                           "config": base64.b64encode(self.config).decode()}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> KeptOriginal:
        record = json.loads(raw)
        if not isinstance(record, dict) or not isinstance(record.get("bundle"), str) \
                or not isinstance(record.get("config"), str):
            raise ValueError("not a kept-original record")
        mode = record.get("mode", 0o644)
        if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o777:
            raise ValueError("not a kept-original record: mode")
        return cls(record["bundle"], base64.b64decode(record["config"], validate=True), mode)


class BundleStore:
    def __init__(self, actors_root: str, run_dir: str) -> None:
        self.actors_root = actors_root
        self.run_dir = run_dir

    @property
    def records_root(self) -> str:
        return os.path.join(self.run_dir, "bundles")

    def records_dir(self, uid: str) -> str:
        return os.path.join(self.records_root, uid)

    def apply(self, uid: str, c: ContainerPlan,
              stage: Callable[[InjectionPlan], None]) -> None:
        """Keep the original, stage the injection's rootfs links, write the planned
        config (writes files). Raises OSError or AteomError; the caller gives back
        every container it asked to apply, this one included."""
        safefs.write_atomic(os.path.join(self.records_dir(uid), c.name + _RECORD_SUFFIX),
                            KeptOriginal(c.bundle, c.original, c.mode).to_json(),
                            beneath=self.run_dir, mode=0o600, make_parents=True)
        if c.injection is not None:
            stage(c.injection)
        self._write_config(c.bundle, c.prepared, c.mode)

    def _write_config(self, bundle: str, data: bytes, mode: int) -> None:
        safefs.write_atomic(os.path.join(bundle, CONFIG_NAME), data, beneath=self.actors_root,
                            mode=mode)

    def give_back(self, uid: str, applied: Iterable[ContainerPlan]) -> bool:
        """Write back each bundle's original config.json, last applied first (writes
        files). True when all were; the records go only then, so a later
        Terminate (or the next daemon) tries the rest again."""
        ok = True
        for c in reversed(list(applied)):
            try:
                self._write_config(c.bundle, c.original, c.mode)
            except OSError as exc:
                ok = False
                log.warning("bundle_restore_failed", container=c.name, error=str(exc))
        if ok:
            self.drop_records(uid)
        return ok

    def drop_records(self, uid: str) -> None:
        shutil.rmtree(self.records_dir(uid), ignore_errors=True)

    def has_records(self, uid: str) -> bool:
        return os.path.isdir(self.records_dir(uid))

    def uids_with_records(self) -> list[str]:
        """Actors whose bundles a dead daemon left edited (reads the run dir)."""
        try:
            return sorted(os.listdir(self.records_root))
        except FileNotFoundError:
            return []

    def give_back_kept(self, uid: str) -> bool:
        """Give back the originals a dead daemon recorded for `uid` (reads records,
        writes bundles). A record that cannot be read or names a bundle outside
        --actors-root is logged and kept; True when every record was given back."""
        directory = self.records_dir(uid)
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return True
        ok = True
        for name in names:
            try:
                raw, _ = safefs.read_file(os.path.join(directory, name), beneath=self.run_dir)
                kept = KeptOriginal.from_json(raw)
                # Only ever a bundle a request could have named.
                check_path_on_disk("kept bundle", kept.bundle, self.actors_root)
                self._write_config(kept.bundle, kept.config, kept.mode)
            except (OSError, ValueError, binascii.Error, AteomError) as exc:
                ok = False
                log.warning("bundle_restore_failed", kept=name, error=str(exc))
                continue
            log.info("bundle_given_back", bundle=kept.bundle)
        if ok:
            self.drop_records(uid)
        return ok
