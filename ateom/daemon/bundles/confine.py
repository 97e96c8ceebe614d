"""Where a bundle may point runsc: its rootfs inside its own bundle directory, its
writable bind mounts inside the actor's own directories.

The node agent writes bundles; images (and so every rootfs) are untrusted.
runsc, as root, creates directories in the rootfs (``dev``, ``proc``,
``sys``, ``tmp``, mode 0777) and ateom stages SONAME links there, so a
rootfs that resolves to ``/etc`` or ``/`` would have both write onto the
host; a writable bind of ``/`` would hand the host to the workload. Paths are
resolved the way the kernel will resolve them when runsc opens them
(`os.path.realpath`: every symlink followed) and the result must lie inside.
Each refusal is INVALID_ARGUMENT naming the file and the field.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ateom.errors import AteomError, ErrorCode, quote

DEFAULT_ROOTFS = "rootfs"  # when a config names no root.path, as the injector assumes
_READ_ONLY = frozenset({"ro", "rdonly"})
_BIND = frozenset({"bind", "rbind"})


def _invalid(message: str) -> AteomError:
    return AteomError(message, code=ErrorCode.INVALID_ARGUMENT)


def _inside(path: str, top: str) -> bool:
    return path.startswith(top.rstrip("/") + "/")


def rootfs_relpath(config: Mapping[str, Any], config_path: str) -> str:
    """root.path, which must be a relative, normalized path below the bundle (pure)."""
    root = config.get("root") or {}
    rel = root.get("path") if isinstance(root, Mapping) else None
    if rel is None:
        return DEFAULT_ROOTFS
    if not isinstance(rel, str) or not rel:
        raise _invalid(f"{config_path}: root.path: must be a non-empty string")
    if os.path.isabs(rel):
        raise _invalid(f"{config_path}: root.path {quote(rel)}: must be relative to the"
                       " bundle (an absolute rootfs would let runsc and ateom write onto"
                       " the host)")
    parts = rel.split("/")
    if ".." in parts or os.path.normpath(rel) in (".", "") or "\0" in rel:
        raise _invalid(f"{config_path}: root.path {quote(rel)}: must name a directory"
                       " inside the bundle (no '..', not the bundle itself)")
    return rel


def check_rootfs(bundle: str, config: Mapping[str, Any], config_path: str) -> str:
    """The rootfs path, once its resolved location is inside `bundle` (stats, follows
    symlinks as runsc will). Returns the unresolved path runsc is given."""
    rootfs = os.path.join(bundle, rootfs_relpath(config, config_path))
    resolved = os.path.realpath(rootfs)
    if not _inside(resolved, os.path.realpath(bundle)):
        raise _invalid(f"{config_path}: root.path: rootfs {quote(rootfs)} resolves to"
                       f" {quote(resolved)}, outside the bundle directory")
    return rootfs


def _option_names(mount: Mapping[str, Any]) -> set[str]:
    return {o for o in mount.get("options") or [] if isinstance(o, str)}


def _is_bind(mount: Mapping[str, Any]) -> bool:
    return mount.get("type") == "bind" or bool(_option_names(mount) & _BIND)


def _is_writable_bind(mount: Mapping[str, Any]) -> bool:
    return _is_bind(mount) and not _option_names(mount) & _READ_ONLY


def relocate(config: Mapping[str, Any], bundle: str) -> dict[str, Any]:
    """The config as runsc reads it from `bundle`, for runsc to read from another
    directory (ateom's own: `ateom.daemon.bundles.store`): root.path and every bind
    mount's relative source joined with `bundle`, as runsc itself joins them when it
    reads a bundle (pure; `config` is not changed; its root.path was checked by
    `check_rootfs`)."""
    out = dict(config)
    root = dict(out.get("root") or {})
    root["path"] = os.path.join(bundle, rootfs_relpath(config, os.path.join(bundle,
                                                                            "config.json")))
    out["root"] = root
    mounts = out.get("mounts")
    if mounts:
        out["mounts"] = [
            {**m, "source": os.path.join(bundle, m["source"])}
            if isinstance(m, Mapping) and _is_bind(m) and isinstance(m.get("source"), str)
            and m["source"] and not os.path.isabs(m["source"]) else m
            for m in mounts]
    return out


def check_bind_mounts(config: Mapping[str, Any], config_path: str,
                      actor_dirs: Iterable[str]) -> None:
    """Every writable bind mount's source resolves inside one of `actor_dirs` (stats).

    Read-only binds are the node agent's to choose (resolv.conf, image
    volumes); a writable one outside the actor's own directories would let
    the untrusted workload write on the host.
    """
    mounts = config.get("mounts") or []
    tops = [os.path.realpath(d) for d in actor_dirs if d]
    for i, mount in enumerate(mounts):
        if not isinstance(mount, Mapping) or not _is_writable_bind(mount):
            continue
        source = mount.get("source")
        where = f"{config_path}: mounts[{i}].source"
        if not isinstance(source, str) or not os.path.isabs(source) or "\0" in source:
            raise _invalid(f"{where} {quote(source)}: a bind mount needs an absolute path")
        resolved = os.path.realpath(source)
        if not any(resolved == top or _inside(resolved, top) for top in tops):
            raise _invalid(f"{where} {quote(source)} (resolves to {quote(resolved)}): a"
                           " writable bind mount must come from the actor's own directories;"
                           " mount it read-only (\"ro\") or from under the actor's dirs")


def check_bundle_config(bundle: str, config: Mapping[str, Any], config_path: str,
                        actor_dirs: Sequence[str]) -> None:
    """`check_rootfs` and `check_bind_mounts` (stats)."""
    check_rootfs(bundle, config, config_path)
    check_bind_mounts(config, config_path, actor_dirs)
