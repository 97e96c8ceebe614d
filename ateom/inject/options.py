"""Every vendor-specific choice the injector makes, in one value.

The merge itself knows no vendor: which hooks may run, from which binary,
which env keys must go and which library dirs the loader must search all come
from an `InjectOptions`. `gvisor_nvidia_options` is the profile the daemon
uses for NVIDIA GPUs under gVisor; ``ateom inject`` defaults to it so the CLI
reproduces exactly what the daemon does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ateom.gpuinfo.nvproxy import PROXIED_VENDOR
from ateom.settings import NodeSettings

# Subcommands of nvidia-cdi-hook that are safe and useful under gVisor.
# An allowlist, not a blocklist, because the generator's version is not ours to
# choose: a hook newer than this list (disable-device-node-modification, ...)
# must not run just because nobody thought to forbid it. update-ldcache is left
# out on purpose: it needs /proc, which the Pod masks; SONAME staging and
# LD_LIBRARY_PATH do its job instead.
NVIDIA_ALLOWED_HOOKS = frozenset({"create-symlinks", "enable-cuda-compat"})

# runsc's nvproxy runs nvidia-container-cli when it sees this key; the devices
# are already injected by us, so the key must not reach the container.
NVIDIA_DROP_ENV = ("NVIDIA_VISIBLE_DEVICES",)


@dataclass(frozen=True)
class InjectOptions:
    """How to apply CDI edits to a bundle.

    allowed_hooks: ``createContainer`` hook subcommands (the hook's ``args[1]``)
        that are kept; every other hook is dropped and logged.
    hook_binary: the trusted binary kept hooks are rewritten to run (their
        ``path`` and ``args[0]``); None drops every hook.
    library_dirs: container directories prepended to ``LD_LIBRARY_PATH``.
    drop_env: env keys removed from the container's env after the edits.
    vendor: the vendor (``nvidia.com``) whose devices the hooks and library
        dirs are for: another vendor's hooks are dropped (the trusted binary
        is not theirs), and `library_dirs` lead ``LD_LIBRARY_PATH`` only when
        one of this vendor's devices is injected. Empty: every vendor's.
    """

    allowed_hooks: frozenset[str] = frozenset()
    hook_binary: str | None = None
    library_dirs: tuple[str, ...] = ()
    drop_env: tuple[str, ...] = ()
    vendor: str = ""

    def serves(self, vendor: str) -> bool:
        """Whether the hooks and library dirs are for `vendor`'s devices."""
        return not self.vendor or vendor == self.vendor


def nvidia_hook_binary(toolkit_dir: str) -> str:
    """The trusted ``nvidia-cdi-hook`` in `toolkit_dir`; stats the filesystem.

    Prefers ``nvidia-cdi-hook.real`` when it exists next to it: the plain name
    is often the toolkit installer's shell wrapper, which needs a shell and
    env the runtime does not promise.
    """
    real = os.path.join(toolkit_dir, "nvidia-cdi-hook.real")
    if os.path.exists(real):
        return real
    return os.path.join(toolkit_dir, "nvidia-cdi-hook")


def gvisor_nvidia_options(node: NodeSettings | None = None) -> InjectOptions:
    """The daemon's profile for NVIDIA GPUs under gVisor; stats the toolkit dir.

    Hooks run from `node`'s toolkit dir; the library dir is the driver root's
    ``lib64`` (default: the ``ATEOM_*`` settings, `NodeSettings.from_env`).
    """
    node = node or NodeSettings.from_env()
    return InjectOptions(
        allowed_hooks=NVIDIA_ALLOWED_HOOKS,
        hook_binary=nvidia_hook_binary(node.toolkit_dir),
        library_dirs=(node.driver_lib_dir,),
        drop_env=NVIDIA_DROP_ENV,
        vendor=PROXIED_VENDOR,
    )
