"""Injecting CDI devices into OCI bundles: where a GPU gets into a sandbox.

- `options`: `InjectOptions`, every vendor choice; `gvisor_nvidia_options()`.
- `editor`: `ConfigEditor`, copy-on-write edits of a config's sections.
- `entries`: what each CDI value becomes in an OCI config (pure).
- `merge`: the pure merge of CDI edits into an OCI config, one function per edit kind.
- `soname`: DT_SONAME reads (pyelftools), their cache, the links they need.
- `rootfs`: filesystem access confined to a rootfs (openat2 RESOLVE_IN_ROOT).
- `linkpool`: opt-in pooled symlink inodes, hard-linked in (fast staging).
- `plan`: `InjectionPlan`, what an injection will do (the merged config, links to stage).
- `injector`: `plan_injection` / `stage_links` / `apply_plan` / `inject_devices`, the shell.
- `cli`: ``ateom inject``.
"""

from ateom.inject.injector import (
    BundleConfig,
    InjectionPlan,
    apply_plan,
    inject_devices,
    plan_injection,
    read_config,
    serialize_config,
    stage_links,
)
from ateom.inject.linkpool import LinkPool
from ateom.inject.merge import (
    ANNOTATION_KEY,
    DroppedHook,
    HostFacts,
    HostNode,
    MergeResult,
    merge_edits,
)
from ateom.inject.options import InjectOptions, gvisor_nvidia_options
from ateom.inject.soname import (
    DEFAULT_SONAME_CACHE,
    SkippedLibrary,
    SonameCache,
    SonameLink,
    SonameRead,
    read_soname,
)

__all__ = [
    "ANNOTATION_KEY",
    "BundleConfig",
    "DEFAULT_SONAME_CACHE",
    "DroppedHook",
    "HostFacts",
    "HostNode",
    "InjectOptions",
    "InjectionPlan",
    "LinkPool",
    "MergeResult",
    "SkippedLibrary",
    "SonameCache",
    "SonameLink",
    "SonameRead",
    "apply_plan",
    "gvisor_nvidia_options",
    "inject_devices",
    "merge_edits",
    "plan_injection",
    "read_config",
    "read_soname",
    "serialize_config",
    "stage_links",
]
