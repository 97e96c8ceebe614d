"""Inject CDI devices into an OCI bundle: plan everything, then write.

The imperative shell around the pure merge (`ateom.inject.merge`):
`plan_injection` takes config.json as the caller already read and parsed it
(or reads it), stats host device nodes, reads library SONAMEs and looks at the
rootfs, then merges; it writes nothing. The plan carries the merged config
*object*, so a caller with edits of its own (the daemon) makes them and
serializes once. `stage_links` makes the SONAME links inside the rootfs
(confined: `ateom.inject.rootfs`); `apply_plan` stages them and then replaces
config.json through ateom's one writer (`ateom.safefs`). An error anywhere in
planning leaves the bundle untouched.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import structlog

from ateom import safefs
from ateom.cdi.model import Resolution
from ateom.errors import InjectionError
from ateom.inject.linkpool import LinkPool
from ateom.inject.merge import (
    DroppedHook,
    HostFacts,
    HostNode,
    merge_edits,
    node_needs_stat,
)
from ateom.inject.options import InjectOptions
from ateom.inject.plan import CONFIG_NAME, BundleConfig, InjectionPlan, serialize_config
from ateom.inject.rootfs import ConfinedRoot
from ateom.inject.soname import (
    DEFAULT_SONAME_CACHE,
    SkippedLibrary,
    SonameCache,
    SonameLink,
    SonameRead,
    is_library_destination,
    plan_soname_links,
)
from ateom.oci_config import check_shape, parse_config

__all__ = [
    "CONFIG_NAME", "BundleConfig", "InjectionPlan", "apply_plan", "gather_host_facts",
    "inject_devices", "plan_injection", "read_config", "serialize_config", "stage_links",
]

log = structlog.get_logger("ateom.inject")


@contextmanager
def _bundle_fd(bundle: str) -> Iterator[int]:
    """The bundle directory, opened as the trusted root its caller named it;
    config.json is only ever read and replaced through this fd."""
    try:
        fd = os.open(bundle, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise InjectionError(f"{bundle}: cannot open bundle: {e.strerror}") from e
    try:
        yield fd
    finally:
        os.close(fd)


def _read_config_at(dir_fd: int, path: str) -> tuple[bytes, int]:
    """config.json's bytes and mode through the bundle's fd (`safefs.read_file_at`:
    never through a symlink, never a FIFO or device)."""
    try:
        return safefs.read_file_at(dir_fd, CONFIG_NAME)
    except OSError as e:
        why = {errno.ELOOP: "is a symbolic link (ateom replaces config.json, it never "
                            "writes through a link)",
               errno.EINVAL: "not a regular file"}.get(e.errno or 0, e.strerror)
        raise InjectionError(f"{path}: cannot read OCI config: {why}") from e


def read_config(bundle_dir: str | os.PathLike[str]) -> BundleConfig:
    """The bundle's config.json: its bytes and the parsed config (reads the file).

    InjectionError when it cannot be read; ConfigError (INVALID_ARGUMENT)
    when it is not a config of the right shape (`ateom.oci_config`).
    """
    bundle = os.fspath(bundle_dir)
    path = os.path.join(bundle, CONFIG_NAME)
    with _bundle_fd(bundle) as fd:
        raw, _ = _read_config_at(fd, path)
    return raw, parse_config(raw, path)


def _rootfs_path(bundle_dir: str, config: Mapping[str, Any]) -> str:
    root = config.get("root")
    rel = "rootfs"
    if isinstance(root, Mapping) and root.get("path"):
        rel = str(root["path"])
    return os.path.join(bundle_dir, rel)  # an absolute root.path wins, as in OCI


def _open_rootfs(bundle_dir: str, rootfs: str, use_openat2: bool | None) -> ConfinedRoot:
    """The rootfs, opened once for the whole plan; a missing one is the config's error."""
    try:
        return ConfinedRoot(rootfs, use_openat2=use_openat2)
    except InjectionError as e:
        why = e.__cause__.strerror if isinstance(e.__cause__, OSError) else str(e)
        raise InjectionError(
            f"{os.path.join(bundle_dir, CONFIG_NAME)}: root.path: rootfs {rootfs}: {why}"
        ) from e


def _host_node(path: str) -> HostNode | None:
    """Stat a host device node (following symlinks, like the runtime's open)."""
    if "\0" in path:
        return None  # not a path; the merge refuses it with the spec named
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise InjectionError(f"cannot stat host device node {path}: {e.strerror}") from e
    mode = st.st_mode
    if stat.S_ISCHR(mode):
        dev_type = "c"
    elif stat.S_ISBLK(mode):
        dev_type = "b"
    elif stat.S_ISFIFO(mode):
        dev_type = "p"
    else:
        dev_type = ""
    return HostNode(dev_type, os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(mode))


def gather_host_facts(resolution: Resolution) -> HostFacts:
    """Stat every host node the resolution's device nodes need; missing ones are absent."""
    nodes: dict[str, HostNode] = {}
    seen: set[str] = set()
    for step in resolution.steps:
        for node in step.edits.device_nodes:
            host = node.host
            if host in seen or not node_needs_stat(node):
                continue
            seen.add(host)
            facts = _host_node(host)
            if facts is not None:
                nodes[host] = facts
    return HostFacts(nodes=nodes)


def _by_directory(links: Iterable[SonameLink]) -> dict[str, list[SonameLink]]:
    by_dir: dict[str, list[SonameLink]] = {}
    for link in links:
        by_dir.setdefault(link.directory, []).append(link)
    return by_dir


def _links_to_stage(
    root: ConfinedRoot, links: list[SonameLink], skipped: list[SkippedLibrary]
) -> list[SonameLink]:
    """The links not already right in the rootfs (reads it, confined)."""
    todo: list[SonameLink] = []
    for directory, group in _by_directory(links).items():
        fd = root.open_dir(directory)
        if fd is None:
            todo.extend(group)  # the directory is made when staging
            continue
        try:
            for link in group:
                entry = root.entry(fd, link.name)
                if entry.kind == "symlink" and entry.link_target == link.target:
                    continue
                if entry.kind == "dir":
                    skipped.append(SkippedLibrary(
                        link.library, f"{directory}/{link.target}",
                        f"a directory sits where SONAME link {link.path} belongs"))
                    continue
                todo.append(link)
        finally:
            os.close(fd)
    return todo


def _log_refusals(bundle: str, hooks: tuple[DroppedHook, ...],
                  libraries: list[SkippedLibrary]) -> None:
    """One event per dropped hook and per skipped library, through one bound
    logger: a bind is most of what a log call costs, even a filtered one."""
    logger = log.bind(bundle=bundle)
    for hook in hooks:
        logger.info("hook_dropped", origin=hook.origin, spec=hook.spec_path,
                    hook_name=hook.hook_name, path=hook.path, args=list(hook.args),
                    reason=hook.reason)
    for lib in libraries:
        logger.warning("soname_link_skipped", library=lib.library,
                       destination=lib.destination, reason=lib.reason)


def plan_injection(
    bundle_dir: str | os.PathLike[str],
    resolution: Resolution,
    options: InjectOptions,
    *,
    config: BundleConfig | None = None,
    soname_cache: SonameCache | None = None,
    use_openat2: bool | None = None,
) -> InjectionPlan:
    """Compute what injecting `resolution` into the bundle does; writes nothing.

    `config` is the bundle's config.json as the caller already read it: its
    bytes and what `ateom.oci_config.parse_config` made of them (then
    config.json is not read here; its shape is checked again, cheaply, so the
    merge's assumptions never rest on a caller's own parser); without it,
    config.json is read and parsed (`read_config`). Stats host device nodes, reads library SONAMEs
    (through `soname_cache`, default the process-wide one) and inspects the
    rootfs. Raises InjectionError, naming the file and field, for an
    unreadable config, a missing rootfs, a missing or mismatched host device
    node or a mount destination with ``..``; ConfigError for a config that is
    not JSON or of the wrong shape. Dropped hooks and skipped libraries are
    logged here, once per plan.
    """
    bundle = os.fspath(bundle_dir)
    cache = DEFAULT_SONAME_CACHE if soname_cache is None else soname_cache
    if config is None:
        before, parsed = read_config(bundle)
    else:
        before, parsed = config
        check_shape(parsed, os.path.join(bundle, CONFIG_NAME))
    rootfs = _rootfs_path(bundle, parsed)
    with _open_rootfs(bundle, rootfs, use_openat2) as root:
        merged = merge_edits(parsed, resolution, gather_host_facts(resolution), options)
        sonames: dict[str, SonameRead] = {}
        for destination, source, mount_type in merged.mounts:
            if is_library_destination(destination, mount_type) and source not in sonames:
                sonames[source] = cache.lookup(source)
        links, skipped = plan_soname_links(merged.mounts, sonames)
        todo = _links_to_stage(root, links, skipped)

    if merged.dropped_hooks or skipped:
        _log_refusals(bundle, merged.dropped_hooks, skipped)
    return InjectionPlan(
        bundle_dir=bundle,
        rootfs=rootfs,
        devices=resolution.devices,
        config_before=before,
        merged=merged.config,
        symlinks=tuple(todo),
        dropped_hooks=merged.dropped_hooks,
        skipped_libraries=tuple(skipped),
        config_changed=merged.config != parsed,
    )


def stage_links(plan: InjectionPlan, *, use_openat2: bool | None = None,
                link_pool: LinkPool | None = None) -> None:
    """Make the plan's SONAME links inside its rootfs (writes, confined); nothing else.

    Missing directories are made. With `link_pool`, links are hard links to
    pooled symlink inodes (fast; see `ateom.inject.linkpool` for the
    trade-off). A failure leaves the links made so far: they are what a
    retry would make.
    """
    if not plan.symlinks:
        return
    with ConfinedRoot(plan.rootfs, use_openat2=use_openat2) as root:
        for directory, group in _by_directory(plan.symlinks).items():
            fd = root.open_dir(directory, create=True)
            assert fd is not None
            try:
                for link in group:
                    try:
                        root.place_symlink(fd, link.name, link.target, link_pool)
                    except OSError as e:
                        raise InjectionError(
                            f"{plan.rootfs}: cannot stage SONAME link {link.path} -> "
                            f"{link.target}: {e.strerror}") from e
            finally:
                os.close(fd)


def apply_plan(plan: InjectionPlan, *, use_openat2: bool | None = None,
               link_pool: LinkPool | None = None, durable: bool = False) -> None:
    """Carry out `plan`: `stage_links`, then replace config.json with `config_after`.

    The config is written last, so it is the commit point: a failure while
    staging links leaves the old config. A config changed since planning is
    refused rather than overwritten. The write is `safefs.write_atomic_at`
    (a reader sees the old or the new file, whole, whenever ateom is killed),
    keeping the old file's mode; `durable` adds its fsyncs, which a bundle
    does not need (docs/inject.md, "Durability").
    """
    if not plan.changed:
        return
    after = plan.config_after
    with _bundle_fd(plan.bundle_dir) as fd:
        current, mode = _read_config_at(fd, plan.config_path)
        if current != plan.config_before:
            raise InjectionError(f"{plan.config_path}: changed since the injection was planned")
        stage_links(plan, use_openat2=use_openat2, link_pool=link_pool)
        if after != plan.config_before:
            try:
                safefs.write_atomic_at(fd, CONFIG_NAME, after, mode=mode, durable=durable)
            except OSError as e:
                raise InjectionError(
                    f"{plan.config_path}: cannot write OCI config: {e.strerror}") from e


def inject_devices(
    bundle_dir: str | os.PathLike[str],
    resolution: Resolution,
    options: InjectOptions,
    *,
    dry_run: bool = False,
    soname_cache: SonameCache | None = None,
    link_pool: LinkPool | None = None,
    durable: bool = False,
) -> InjectionPlan:
    """Plan the injection and, unless `dry_run`, apply it; returns the plan."""
    plan = plan_injection(bundle_dir, resolution, options, soname_cache=soname_cache)
    if not dry_run:
        apply_plan(plan, link_pool=link_pool, durable=durable)
    return plan
