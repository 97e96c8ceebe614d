"""Inject CDI devices into an OCI bundle: plan everything, then write.

The imperative shell around the pure merge (`ateom.inject.merge`):
`plan_injection` reads config.json, stats host device nodes, reads library
SONAMEs and looks at the rootfs, then computes the new config bytes and the
symlinks to stage; it writes nothing. `apply_plan` stages the symlinks inside
the rootfs (confined: `ateom.inject.rootfs`) and then replaces config.json
atomically. An error anywhere in planning leaves the bundle untouched.
"""

from __future__ import annotations

import difflib
import json
import os
import stat
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

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

log = structlog.get_logger("ateom.inject")

CONFIG_NAME = "config.json"


@dataclass(frozen=True)
class InjectionPlan:
    """Everything an injection will do to one bundle, computed up front.

    `config_after` equals `config_before` byte for byte when the config needs
    no change (a second injection of the same devices). `symlinks` are only
    the SONAME links not already in place.
    """

    bundle_dir: str
    rootfs: str
    devices: tuple[str, ...]
    config_before: bytes
    config_after: bytes
    symlinks: tuple[SonameLink, ...]
    dropped_hooks: tuple[DroppedHook, ...]
    skipped_libraries: tuple[SkippedLibrary, ...]

    @property
    def config_path(self) -> str:
        return os.path.join(self.bundle_dir, CONFIG_NAME)

    @property
    def changed(self) -> bool:
        return self.config_after != self.config_before or bool(self.symlinks)

    def diff(self) -> str:
        """A unified diff of config.json (both sides indented), then the symlinks to stage."""
        before = _readable(self.config_before)
        after = _readable(self.config_after)
        lines = list(difflib.unified_diff(before, after, f"a/{CONFIG_NAME}", f"b/{CONFIG_NAME}"))
        text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        rootfs = os.path.relpath(self.rootfs, self.bundle_dir)
        for link in self.symlinks:
            text += f"+symlink {rootfs}{link.path} -> {link.target}\n"
        return text


def serialize_config(config: Mapping[str, Any]) -> bytes:
    """config.json bytes as ateom writes them: compact, like Go's json.Marshal.

    Compact because json's C encoder only runs without indent, and the
    indenting pure-Python one costs more than the whole rest of the merge.
    Deterministic for a given dict, which is what makes a second injection
    byte-identical. `InjectionPlan.diff` re-indents both sides for reading.
    """
    return json.dumps(config, separators=(",", ":")).encode()


def _readable(config_bytes: bytes) -> list[str]:
    try:
        text = json.dumps(json.loads(config_bytes), indent=4) + "\n"
    except ValueError:
        text = config_bytes.decode("utf-8", "replace")
    return text.splitlines(keepends=True)


def _read_file(path: str) -> tuple[bytes, int]:
    """The bytes and permission bits of `path`: one open, one fstat, the reads.

    (Python's buffered ``open`` adds an ioctl, two lseeks and a second fstat.)
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        chunks = []
        size = max(st.st_size, 0) + 1  # +1: a file that grew is still read whole
        while chunk := os.read(fd, size):
            chunks.append(chunk)
        return b"".join(chunks), stat.S_IMODE(st.st_mode)
    finally:
        os.close(fd)


def _read_config(bundle_dir: str) -> tuple[bytes, dict[str, Any]]:
    path = os.path.join(bundle_dir, CONFIG_NAME)
    try:
        raw, _ = _read_file(path)
    except OSError as e:
        raise InjectionError(f"{path}: cannot read OCI config: {e.strerror}") from e
    try:
        config = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise InjectionError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(config, dict):
        raise InjectionError(f"{path}: top level is {type(config).__name__}, not an object")
    _check_shape(config, path)
    return raw, config


# The parts of an OCI config the merge reads or extends, and the JSON type
# each must have: a wrong type is the config's fault, reported as such, not a
# TypeError from deep inside the merge (nor a hook list made of a string's
# characters).
_SHAPE: tuple[tuple[tuple[str, ...], type], ...] = (
    (("process",), dict), (("process", "env"), list), (("process", "user"), dict),
    (("process", "user", "uid"), int), (("process", "user", "gid"), int),
    (("process", "user", "additionalGids"), list), (("root",), dict), (("root", "path"), str),
    (("mounts",), list), (("hooks",), dict), (("linux",), dict), (("linux", "devices"), list),
    (("linux", "resources"), dict), (("linux", "resources", "devices"), list),
    (("linux", "netDevices"), dict), (("annotations",), dict),
)
# The arrays among them, and the type of each element.
_ITEMS: tuple[tuple[tuple[str, ...], type], ...] = (
    (("mounts",), dict), (("process", "env"), str), (("process", "user", "additionalGids"), int),
    (("linux", "devices"), dict), (("linux", "resources", "devices"), dict),
)
_KIND_NAMES = {dict: "an object", list: "an array", str: "a string", int: "an integer"}


def _is(value: Any, kind: type) -> bool:
    # JSON's true is not an integer, whatever Python's bool says.
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def _at(config: dict[str, Any], keys: tuple[str, ...]) -> Any:
    node: Any = config
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _wrong(path: str, field: str, value: Any, kind: type) -> InjectionError:
    return InjectionError(f"{path}: {field}: is {type(value).__name__}, not {_KIND_NAMES[kind]}")


def _check_shape(config: dict[str, Any], path: str) -> None:
    for keys, kind in _SHAPE:
        node = _at(config, keys)
        if node is not None and not _is(node, kind):
            raise _wrong(path, ".".join(keys), node, kind)
    for keys, kind in _ITEMS:
        for i, item in enumerate(_at(config, keys) or ()):
            if not _is(item, kind):
                raise _wrong(path, f"{'.'.join(keys)}[{i}]", item, kind)
    for name, hooks in (config.get("hooks") or {}).items():
        if hooks is None:
            continue
        if not isinstance(hooks, list):
            raise _wrong(path, f"hooks.{name}", hooks, list)
        for i, hook in enumerate(hooks):
            if not isinstance(hook, dict):
                raise _wrong(path, f"hooks.{name}[{i}]", hook, dict)


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


def _links_to_stage(
    root: ConfinedRoot, links: list[SonameLink], skipped: list[SkippedLibrary]
) -> list[SonameLink]:
    """The links not already right in the rootfs (reads it, confined)."""
    todo: list[SonameLink] = []
    by_dir: dict[str, list[SonameLink]] = {}
    for link in links:
        by_dir.setdefault(link.directory, []).append(link)
    for directory, group in by_dir.items():
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


def plan_injection(
    bundle_dir: str | os.PathLike[str],
    resolution: Resolution,
    options: InjectOptions,
    *,
    soname_cache: SonameCache | None = None,
    use_openat2: bool | None = None,
) -> InjectionPlan:
    """Compute what injecting `resolution` into the bundle does; writes nothing.

    Reads config.json, stats host device nodes, reads library SONAMEs (through
    `soname_cache`, default the process-wide one) and inspects the rootfs.
    Raises InjectionError, naming the file and field, for a missing or
    unparsable config, a missing rootfs, a missing or mismatched host device
    node or a mount destination with ``..``. Dropped hooks and skipped
    libraries are logged here, once per plan.
    """
    bundle = os.fspath(bundle_dir)
    cache = DEFAULT_SONAME_CACHE if soname_cache is None else soname_cache
    before, config = _read_config(bundle)
    rootfs = _rootfs_path(bundle, config)
    with _open_rootfs(bundle, rootfs, use_openat2) as root:
        merged = merge_edits(config, resolution, gather_host_facts(resolution), options)
        after = before if merged.config == config else serialize_config(merged.config)

        sonames: dict[str, SonameRead] = {}
        for destination, source, mount_type in merged.mounts:
            if is_library_destination(destination, mount_type) and source not in sonames:
                sonames[source] = cache.lookup(source)
        links, skipped = plan_soname_links(merged.mounts, sonames)
        todo = _links_to_stage(root, links, skipped)

    for hook in merged.dropped_hooks:
        log.info("hook_dropped", bundle=bundle, origin=hook.origin, spec=hook.spec_path,
                 hook_name=hook.hook_name, path=hook.path, args=list(hook.args),
                 reason=hook.reason)
    for lib in skipped:
        log.warning("soname_link_skipped", bundle=bundle, library=lib.library,
                    destination=lib.destination, reason=lib.reason)
    return InjectionPlan(
        bundle_dir=bundle,
        rootfs=rootfs,
        devices=resolution.devices,
        config_before=before,
        config_after=after,
        symlinks=tuple(todo),
        dropped_hooks=merged.dropped_hooks,
        skipped_libraries=tuple(skipped),
    )


def _write_atomically(path: str, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data`: temp file in the same dir, fsync, rename, fsync dir.

    A crash leaves either the old or the new config, never a torn one. The
    new file gets `mode` (the caller passes the old file's).
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.ateom-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not narrow the old file's mode
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def apply_plan(plan: InjectionPlan, *, use_openat2: bool | None = None,
               link_pool: LinkPool | None = None) -> None:
    """Carry out `plan`: stage its symlinks in the rootfs, then replace config.json.

    The config is written last, so it is the commit point: a failure while
    staging links leaves the old config (and links that a retry keeps). A
    config changed since planning is refused rather than overwritten. With
    `link_pool`, links are hard links to pooled symlink inodes (fast; see
    `ateom.inject.linkpool` for the trade-off).
    """
    if not plan.changed:
        return
    try:
        current, mode = _read_file(plan.config_path)
    except OSError as e:
        raise InjectionError(f"{plan.config_path}: cannot read OCI config: {e.strerror}") from e
    if current != plan.config_before:
        raise InjectionError(f"{plan.config_path}: changed since the injection was planned")
    if plan.symlinks:
        with ConfinedRoot(plan.rootfs, use_openat2=use_openat2) as root:
            by_dir: dict[str, list[SonameLink]] = {}
            for link in plan.symlinks:
                by_dir.setdefault(link.directory, []).append(link)
            for directory, group in by_dir.items():
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
    if plan.config_after != plan.config_before:
        try:
            _write_atomically(plan.config_path, plan.config_after, mode)
        except OSError as e:
            raise InjectionError(f"{plan.config_path}: cannot write OCI config: {e}") from e


def inject_devices(
    bundle_dir: str | os.PathLike[str],
    resolution: Resolution,
    options: InjectOptions,
    *,
    dry_run: bool = False,
    soname_cache: SonameCache | None = None,
    link_pool: LinkPool | None = None,
) -> InjectionPlan:
    """Plan the injection and, unless `dry_run`, apply it; returns the plan."""
    plan = plan_injection(bundle_dir, resolution, options, soname_cache=soname_cache)
    if not dry_run:
        apply_plan(plan, link_pool=link_pool)
        log.debug("devices_injected", bundle=plan.bundle_dir, devices=list(plan.devices),
                  links=len(plan.symlinks), changed=plan.changed)
    return plan
