"""The sandbox plan: what each of an actor's bundles will become, decided before
anything is written.

`SandboxPlanner.plan` reads each bundle's config.json once (never through a
symlink), checks it (shape, foreign hooks, rootfs and writable mounts
confined), chooses and resolves the container's CDI devices, plans their
injection over the config already parsed, makes ateom's own edits and
serializes the result once, relocated for ateom's own bundle dir (`confine.relocate`:
the node agent's config.json is read, never written). Writing is the bundle store's
job, and it writes exactly these bytes: the plan applied is the plan made. An app
container's volume mounts (`ateom.volumes`) are planned here too, each host dir
reached without a symlink before any runsc call.

Side effects: reads bundles, spec files, host device nodes and libraries;
when the Pod has GPUs but no spec for them it may run nvidia-ctk once to
generate one (the daemon's own run dir). It writes nothing into bundles.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from ateom import safefs
from ateom.cdi.model import Resolution
from ateom.daemon.bundles import confine, devices, edits
from ateom.daemon.bundles.catalog import DeviceCatalog
from ateom.daemon.calls import validation
from ateom.daemon.calls.phases import phase
from ateom.daemon.calls.requests import ActorDirs, ContainerRequest, DevicePolicy
from ateom.errors import AteomError, ErrorCode, quote
from ateom.gpuinfo.nvproxy import DeviceView, GpuTools, keep_saved_paths
from ateom.gpuinfo.record import edits_digest as digest_of_edits
from ateom.inject.injector import InjectionPlan, plan_injection, stage_links
from ateom.inject.options import InjectOptions, gvisor_nvidia_options
from ateom.runsc.commands import sandbox_root_id
from ateom.runsc.probe import RunscInfo
from ateom.settings import NodeSettings
from ateom.volumes import (
    DurableVolume,
    MountPlan,
    VolumeRoots,
    check_host_dirs,
    durable_volumes,
    merge_mounts,
    plan_mounts,
)

log = structlog.get_logger("ateom.plan")

CONFIG_NAME = "config.json"

# A bundle's config.json as read: its bytes and their parse.
BundleConfig = tuple[bytes, dict[str, Any]]


class Injector(Protocol):
    """How devices get into a bundle: plan over a parsed config (reads host facts
    and the rootfs), then stage the rootfs side (SONAME links). config.json
    itself is written by the bundle store."""

    def plan(self, bundle_dir: str, resolution: Resolution,
             config: BundleConfig) -> InjectionPlan: ...

    def stage(self, plan: InjectionPlan) -> None: ...


class CdiInjector:
    """The CDI injector with the gVisor NVIDIA profile for this node's settings."""

    def __init__(self, node: NodeSettings) -> None:
        self.node = node

    def options(self) -> InjectOptions:
        """The injector's options for this node (stats the toolkit dir for its hook)."""
        return gvisor_nvidia_options(self.node)

    def plan(self, bundle_dir: str, resolution: Resolution,
             config: BundleConfig) -> InjectionPlan:
        return plan_injection(bundle_dir, resolution, self.options(), config=config)

    def stage(self, plan: InjectionPlan) -> None:
        stage_links(plan)


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    name: str  # the bundle's directory name under oci_bundle_dir
    runsc_id: str  # its runsc container id (the sandbox root's carries the uid)
    bundle: str  # the node agent's bundle dir: read, never written
    original: bytes  # config.json as the node agent left it
    prepared: bytes  # config.json runsc sees (devices injected, ateom's edits made)
    devices: tuple[str, ...]
    injection: InjectionPlan | None  # None without devices
    is_sandbox: bool
    # The devices' resolved edits, for the checkpoint record's digest.
    resolution: Resolution | None = field(default=None, compare=False, repr=False)
    mode: int = 0o644  # the node agent's config.json's permission bits, as read
    own_bundle: str = ""  # ateom's bundle dir, holding `prepared`: runsc's -bundle
    volumes: MountPlan | None = None  # its volume mounts (app containers)

    @property
    def edits_digest(self) -> str:
        """The checkpoint record's digest of the resolved edits; "" without devices.
        Taken when a checkpoint asks: it reads every library's edits, which
        every Run would otherwise pay for before its first runsc call."""
        return digest_of_edits(self.resolution) if self.resolution is not None else ""

    @property
    def config_path(self) -> str:
        return os.path.join(self.bundle, CONFIG_NAME)


@dataclass(frozen=True, slots=True)
class SandboxPlan:
    containers: tuple[ContainerPlan, ...]  # sandbox root first
    gpu_tool: str = ""  # host cuda-checkpoint mounted into the GPU containers ("" none)
    # A restore onto other GPUs: each target GPU's node -> the path the containers keep
    # seeing it at (`keep_saved_paths`); empty when every GPU is at its own path.
    saved_paths: Mapping[str, str] = field(default_factory=dict)

    @property
    def gpu(self) -> bool:
        return any(c.devices for c in self.containers)

    @property
    def runsc_ids(self) -> tuple[str, ...]:
        """runsc container ids, sandbox root first."""
        return tuple(c.runsc_id for c in self.containers)

    @property
    def root_id(self) -> str:
        return self.containers[0].runsc_id

    @property
    def container_names(self) -> tuple[str, ...]:
        """Bundle names, sandbox root first."""
        return tuple(c.name for c in self.containers)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d for c in self.containers for d in c.devices))

    @property
    def durable(self) -> tuple[DurableVolume, ...]:
        """The actor's durable-dir volumes: what a snapshot captures of its data."""
        return durable_volumes(c.volumes for c in self.containers if c.volumes is not None)


_NO_TOOLS = GpuTools()


@dataclass(frozen=True, slots=True)
class _Context:
    """What every container of one actor's plan shares."""

    bundle_root: str
    own_root: str  # <run dir>/bundles/<uid>: ateom's bundle dirs
    roots: VolumeRoots  # where each kind of volume's host dirs are
    root_id: str  # the sandbox root's runsc id
    info: RunscInfo
    actor_dirs: tuple[str, ...]  # where writable bind mounts may come from
    devices: DeviceView
    tools: GpuTools
    netns_path: str = ""  # the actor's network namespace ("" with --network=none)


def read_bundle_file(bundle: str, name: str, beneath: str) -> tuple[bytes, int]:
    """config.json of `bundle` and its permission bits, read once (never through a
    symlink, never a FIFO); errors name the container and the file."""
    path = os.path.join(bundle, CONFIG_NAME)
    try:
        return safefs.read_file(path, beneath=beneath)
    except FileNotFoundError:
        raise AteomError(
            f"container {name!r}: bundle {quote(bundle)} has no config.json (the node agent"
            " prepares one bundle per container under oci_bundle_dir)",
            code=ErrorCode.FAILED_PRECONDITION) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EINVAL, errno.EXDEV):
            raise AteomError(f"{quote(path)}: must be a regular file in a real directory"
                             f" (no symlinks): {exc.strerror}",
                             code=ErrorCode.INVALID_ARGUMENT) from None
        raise AteomError(f"{quote(path)}: cannot read: {exc.strerror}",
                         code=ErrorCode.FAILED_PRECONDITION) from None


def read_bundle_config(bundle: str, name: str, beneath: str) -> BundleConfig:
    """config.json of `bundle`, read once and parsed (see `read_bundle_file`)."""
    raw, _ = read_bundle_file(bundle, name, beneath)
    return raw, edits.parse_config(raw, os.path.join(bundle, CONFIG_NAME))


class SandboxPlanner:
    def __init__(self, *, actors_root: str, pause_container: str, catalog: DeviceCatalog,
                 injector: Injector, bundles_root: str) -> None:
        self.actors_root = actors_root
        self.bundles_root = bundles_root
        self.pause = pause_container
        self.catalog = catalog
        self.injector = injector

    def devices(self, containers: Sequence[ContainerRequest]) -> DeviceView:
        """The registry and the Pod's GPUs, when any container may get devices (reads
        spec files; may run nvidia-ctk once when the Pod has GPUs but no spec)."""
        present = self.catalog.gpu_present()
        wants_default = present and any(
            c.devices.policy is DevicePolicy.POD_DEFAULT for c in containers)
        if not wants_default and not any(
                c.devices.policy is DevicePolicy.EXPLICIT for c in containers):
            return DeviceView(None, present, ())
        registry = self.catalog.registry(generate_gpu_spec=wants_default)
        pod = self.catalog.pod_default(registry)
        return DeviceView(registry, present, pod, pod)

    def plan(self, uid: str, dirs: ActorDirs, containers: Sequence[ContainerRequest],
             info: RunscInfo, devices: DeviceView, *, tools: GpuTools = _NO_TOOLS,
             cpu_milli: int = 0, memory_bytes: int = 0, netns_path: str = "") -> SandboxPlan:
        """Plan every bundle of the actor, sandbox root first (see the module doc)."""
        roots = VolumeRoots(
            durable_dir_volume_mounts_dir=dirs.durable_dir_volume_mounts_dir,
            system_info_volume_roots_dir=dirs.system_info_volume_roots_dir,
            volumes_dir=dirs.volumes_dir, actors_root=self.actors_root)
        ctx = _Context(bundle_root=dirs.oci_bundle_dir,
                       own_root=os.path.join(self.bundles_root, uid), roots=roots,
                       root_id=sandbox_root_id(uid, self.pause),
                       info=info, actor_dirs=tuple(path for _, path in dirs.items() if path),
                       devices=devices, tools=tools, netns_path=netns_path)
        plans = [self._container(ctx, self.pause, None, cpu_milli, memory_bytes)]
        plans += [self._container(ctx, c.name, c, 0, 0, index=i)
                  for i, c in enumerate(containers)]
        gpu = any(c.devices for c in plans)
        return SandboxPlan(tuple(plans), gpu_tool=tools.cuda_checkpoint if gpu else "",
                           saved_paths=dict(devices.saved_paths) if gpu else {})

    def _container(self, ctx: _Context, name: str, request: ContainerRequest | None,
                   cpu_milli: int, memory_bytes: int, *, index: int = 0) -> ContainerPlan:
        bundle = os.path.join(ctx.bundle_root, name)
        config_path = os.path.join(bundle, CONFIG_NAME)
        # Named plainly here; the read below refuses any symlink again, in case
        # the bundle changes in between.
        validation.check_path_on_disk(f"container {name!r}: bundle", bundle, self.actors_root)
        original, mode = read_bundle_file(bundle, name, self.actors_root)
        parsed = edits.parse_config(original, config_path)
        edits.refuse_foreign_hooks(parsed, config_path)
        confine.check_bundle_config(bundle, parsed, config_path, ctx.actor_dirs)
        volumes = None
        if request is not None and request.volume_requests():
            volumes = plan_mounts(index, name, request.volume_requests(), ctx.roots)
            check_host_dirs(volumes)  # stats: each host dir, no symlink followed
            parsed = {**parsed, "mounts": merge_mounts(parsed.get("mounts") or [],
                                                       volumes.oci_mounts())}
        names = self._choose(ctx, name, request)
        injection, resolution = None, None
        extra: dict[str, Any] = {}
        if names:
            injection, resolution = self._injection(ctx, name, bundle, names,
                                                    (original, parsed))
            parsed = injection.merged
            if ctx.tools.cuda_checkpoint:
                extra = {"extra_mounts": [edits.tool_mount(ctx.tools.cuda_checkpoint)],
                         "args_prefix": ctx.tools.args_prefix}
        prepared = edits.prepare_config(
            parsed, config_path, container=name, sandbox_id=ctx.root_id,
            is_sandbox=request is None, cpu_milli=cpu_milli, memory_bytes=memory_bytes,
            netns_path=ctx.netns_path, **extra,
        )
        if prepared.removed_annotations:
            log.warning("foreign_annotations_removed", container=name,
                        annotations=list(prepared.removed_annotations))
        # runsc reads ateom's copy from ateom's own dir: root and relative binds
        # name the node agent's bundle, as runsc would have joined them.
        relocated = confine.relocate(prepared.config, bundle)
        return ContainerPlan(name, ctx.root_id if request is None else name, bundle, original,
                             edits.dump_config(relocated, config_path), names, injection,
                             request is None, resolution, mode,
                             own_bundle=os.path.join(ctx.own_root, name), volumes=volumes)

    @staticmethod
    def _choose(ctx: _Context, name: str, request: ContainerRequest | None) -> tuple[str, ...]:
        """The container's devices: the sandbox root none; a restore's per-container
        choice; else its request among the actor's granted GPUs (pure)."""
        if request is None:
            return ()
        view = ctx.devices
        if name in view.per_container:
            return view.per_container[name]
        names = devices.choose_devices(request, gpu_present=view.gpu_present,
                                       pod_default=view.pod_default)
        if request.devices.policy is DevicePolicy.EXPLICIT and view.registry is not None:
            devices.check_within_grant(name, names, view.pod_default, view.pod_gpus)
        return names

    def _injection(self, ctx: _Context, name: str, bundle: str, names: tuple[str, ...],
                   config: BundleConfig) -> tuple[InjectionPlan, Resolution]:
        """The container's injection plan and the resolution it was made from (reads
        host facts)."""
        registry = ctx.devices.registry
        assert registry is not None
        resolution = keep_saved_paths(devices.resolve_for_gvisor(name, names, registry, ctx.info),
                                      ctx.devices.saved_paths)
        with phase("inject.plan", container=name):
            return self.injector.plan(bundle, resolution, config), resolution
