"""The CDI devices this daemon can hand out: one place that knows which spec
directories are in use.

Those are the configured ones (``--spec-dir``), plus the directory of the
nvidia.com/gpu spec ateom generated with nvidia-ctk when the Pod had GPUs
but no spec described them. Planning a Run, ``Inspect/ListDevices``,
``Inspect/GetStatus``, ``Inspect/PlanInjection`` and the doctor all ask here,
so each sees exactly the devices the daemon would resolve.
"""

from __future__ import annotations

import os

from ateom.cdi.registry import Registry
from ateom.daemon.bundles.devices import pod_default_devices
from ateom.daemon.calls.phases import phase
from ateom.errors import AteomError
from ateom.gpuinfo.nvidia_ctk import SpecGenerator, gpu_present
from ateom.gpuinfo.nvproxy import GPU_KIND
from ateom.settings import NodeSettings


class DeviceCatalog:
    def __init__(self, node: NodeSettings, generator: SpecGenerator) -> None:
        self.node = node
        self.generator = generator

    def spec_dirs(self) -> tuple[str, ...]:
        """The spec directories in use, lowest priority first."""
        dirs = list(self.node.spec_dirs)
        if self.generator.generated:
            dirs.append(os.path.dirname(self.generator.generated))
        return tuple(dict.fromkeys(dirs))

    def gpu_present(self) -> bool:
        """Whether the Pod has GPUs (globs its device nodes)."""
        return gpu_present(self.node.gpu_glob)

    def registry(self, *, generate_gpu_spec: bool = False) -> Registry:
        """The registry over the dirs in use (reads spec files). With
        `generate_gpu_spec`, when no spec offers nvidia.com/gpu, nvidia-ctk makes
        one first (runs it once per process; a failure is retried next time)."""
        registry = Registry.load(self.spec_dirs())
        if generate_gpu_spec and not registry.has_kind(GPU_KIND):
            with phase("cdi.generate"):
                self.generator.ensure()
            registry = Registry.load(self.spec_dirs())
        return registry

    @staticmethod
    def pod_default(registry: Registry) -> tuple[str, ...]:
        """Every whole GPU the Pod was given, by the registry's names (pure)."""
        return pod_default_devices(d.qualified_name for d in registry.devices())

    def gpu_spec_source(self) -> str:
        """Where nvidia.com/gpu comes from: ``generated:<path>``, or the spec files
        that define it (reads spec files; "" when none can be read)."""
        if self.generator.generated:
            return f"generated:{self.generator.generated}"
        try:
            registry = self.registry()
        except AteomError:
            return ""
        return ",".join(sorted({d.spec_path for d in registry.devices()
                                if d.qualified_name.startswith(GPU_KIND + "=")}))
