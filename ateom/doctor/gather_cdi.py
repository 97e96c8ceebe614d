"""The doctor's look at the CDI side: the spec dirs (or a spec generated now with
nvidia-ctk), the nodes and libraries the resolved spec names, NVIDIA MPS in any
device, and a dry-run injection with the daemon's own options.

Every probe reuses the piece of ateom that does the same for real (the CDI
registry, the injector's SONAME reader and planner, the daemon's spec
generator), so the doctor sees what `ateom serve` would.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping

from ateom.cdi.model import Resolution
from ateom.cdi.registry import Registry
from ateom.doctor.config import DoctorConfig
from ateom.doctor.facts import InjectionFact, LibraryFact, MpsFact, SpecFact, SpecNodeFact
from ateom.doctor.gather_node import stat_node
from ateom.errors import AteomError, ResolutionError
from ateom.gpuinfo.mps import MpsFinding, MpsVerdict, mps_in_resolution
from ateom.gpuinfo.nvidia_ctk import find_nvidia_ctk, nvidia_ctk_argv, nvidia_ctk_path_env
from ateom.inject.injector import plan_injection
from ateom.inject.options import gvisor_nvidia_options
from ateom.inject.soname import file_kind, read_soname
from ateom.process.runner import Runner


def _kind_of(config: DoctorConfig) -> str:
    return config.devices[0].partition("=")[0] if config.devices else "nvidia.com/gpu"


def generate_spec(
    config: DoctorConfig, out_dir: str, environ: Mapping[str, str], run: Runner
) -> tuple[str, str]:
    """Run nvidia-ctk cdi generate as the daemon would, into `out_dir`.

    Returns (tool used, error); error is "" on success.
    """
    daemon_path = environ.get("PATH", os.defpath)
    path_env = nvidia_ctk_path_env(config.node.toolkit_dir, config.node.driver_root, daemon_path)
    tool = find_nvidia_ctk(config.node.toolkit_dir, config.node.driver_root, daemon_path)
    if tool is None:
        return "", (f"no nvidia-ctk in {config.node.toolkit_dir},"
                    f" {config.node.driver_bin_dir} or $PATH")
    output = os.path.join(out_dir, "nvidia.json")
    argv = nvidia_ctk_argv(tool, config.node.driver_root, output)
    code, out = run(argv, env={**environ, "PATH": path_env}, timeout=config.generate_timeout)
    if code != 0:
        return tool, f"{' '.join(argv)} exited {code}: {out[-1000:].strip()}"
    if not os.path.exists(output):
        return tool, f"{' '.join(argv)} exited 0 but wrote no {output}"
    return tool, ""


def gather_spec(
    config: DoctorConfig, scratch: str, environ: Mapping[str, str], run: Runner
) -> SpecFact:
    """Load the spec dirs; generate a spec into `scratch` when the kind has none."""
    kind = _kind_of(config)
    registry = Registry.load(config.node.spec_dirs)
    generated_by = generate_error = ""
    if not registry.has_kind(kind):
        gen_dir = os.path.join(scratch, "generated-cdi")
        os.makedirs(gen_dir, exist_ok=True)
        tool, generate_error = generate_spec(config, gen_dir, environ, run)
        if not generate_error:
            generated_by = tool
            registry = Registry.load((*config.node.spec_dirs, gen_dir))
    files = tuple(
        s.path for s in registry.sources if s.loaded is not None and s.loaded.spec.kind == kind
    )
    errors = tuple(str(e) for e in registry.spec_errors.values())
    devices = tuple(d.qualified_name for d in registry.devices())
    resolution: Resolution | None = None
    resolve_error = ""
    if files:
        try:
            resolution = registry.resolve(list(config.devices))
        except ResolutionError as exc:
            resolve_error = str(exc)
    return SpecFact(
        files=files,
        errors=errors,
        generated_by=generated_by,
        generate_error=generate_error,
        devices=devices,
        resolution=resolution,
        resolve_error=resolve_error,
        mps=gather_mps(registry, resolution),
    )


def gather_mps(registry: Registry, default: Resolution | None) -> MpsFact:
    """NVIDIA MPS in the default devices' edits and in every other device's
    (each resolved alone, as an actor asking for it would get it)."""
    mine = mps_in_resolution(default) if default is not None else MpsVerdict()
    seen = {(f.origin, f.edit) for f in mine.findings}
    others: list[MpsFinding] = []
    devices = registry.devices()
    for d in devices:
        try:
            verdict = mps_in_resolution(registry.resolve([d.qualified_name]))
        except ResolutionError:
            continue  # cdi-resolve and `ateom cdi resolve` say why
        for finding in verdict.findings:
            # A spec-level edit is found once per device of its spec: name it once.
            if (finding.origin, finding.edit) not in seen:
                seen.add((finding.origin, finding.edit))
                others.append(finding)
    return MpsFact(mine, MpsVerdict(tuple(others)), len(devices))


def gather_spec_nodes(resolution: Resolution) -> tuple[SpecNodeFact, ...]:
    seen: set[tuple[str, str]] = set()
    out = []
    for step in resolution.steps:
        for node in step.edits.device_nodes:
            key = (node.path, node.host)
            if key in seen:  # "all" repeats every GPU's node
                continue
            seen.add(key)
            out.append(SpecNodeFact(step.origin, node, stat_node(node.host)))
    return tuple(out)


def gather_libraries(resolution: Resolution) -> tuple[LibraryFact, ...]:
    """Each mounted library's source and SONAME (reads ELF with the injector's reader)."""
    out = []
    for step in resolution.steps:
        for mount in step.edits.mounts:
            if ".so" not in os.path.basename(mount.container_path):
                continue
            try:
                mode = os.stat(mount.host_path).st_mode
            except OSError as exc:
                out.append(LibraryFact(step.origin, mount.host_path, mount.container_path,
                                       False, error=exc.strerror or str(exc)))
                continue
            if not stat.S_ISREG(mode):
                # Never opened: a FIFO or a tty would block the read.
                out.append(LibraryFact(step.origin, mount.host_path, mount.container_path,
                                       False, error=f"{file_kind(mode)}, not a regular file",
                                       special=not stat.S_ISDIR(mode)))
                continue
            read = read_soname(mount.host_path)
            out.append(
                LibraryFact(
                    step.origin,
                    mount.host_path,
                    mount.container_path,
                    True,
                    soname=read.soname,
                    error=read.error or "",
                )
            )
    return tuple(out)


# The image env a GPU workload typically brings: NVIDIA's CUDA images set it.
_SCRATCH_ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
]


def write_scratch_bundle(directory: str) -> str:
    """A minimal OCI bundle (config.json + empty rootfs) under `directory`; writes files."""
    bundle = os.path.join(directory, "bundle")
    os.makedirs(os.path.join(bundle, "rootfs"), exist_ok=True)
    config = {
        "ociVersion": "1.0.0",
        "process": {"user": {"uid": 0, "gid": 0}, "args": ["sh"], "env": _SCRATCH_ENV,
                    "cwd": "/"},
        "root": {"path": "rootfs", "readonly": True},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]},
    }
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return bundle


def dry_run_injection(config: DoctorConfig, resolution: Resolution,
                      scratch: str) -> InjectionFact:
    """Plan injecting `resolution` into a scratch bundle with the daemon's options.

    Plans only: the scratch bundle is not modified (and is deleted by the caller).
    """
    options = gvisor_nvidia_options(config.node)
    bundle = write_scratch_bundle(scratch)
    try:
        plan = plan_injection(bundle, resolution, options)
    except AteomError as exc:
        return InjectionFact(error=str(exc))
    env = tuple((plan.merged.get("process") or {}).get("env") or [])
    links = tuple((str(link.path), str(link.target)) for link in plan.symlinks)
    return InjectionFact(env=env, symlinks=links)


def gather_cdi(
    config: DoctorConfig, environ: Mapping[str, str], run: Runner
) -> tuple[SpecFact, tuple[SpecNodeFact, ...], tuple[LibraryFact, ...], InjectionFact | None]:
    """The spec, what its resolution names on this host, and a dry-run injection of it
    (reads spec files, stats, reads ELF, maybe runs nvidia-ctk; a scratch dir is
    made and removed)."""
    scratch = tempfile.mkdtemp(prefix="ateom-doctor-")
    try:
        spec = gather_spec(config, scratch, environ, run)
        if spec.resolution is None:
            return spec, (), (), None
        nodes = gather_spec_nodes(spec.resolution)
        libraries = gather_libraries(spec.resolution)
        special = [lib.host_path for lib in libraries if lib.special]
        if special:
            # The injector reads every library's SONAME: it would block on these.
            return spec, nodes, libraries, InjectionFact(
                skipped=f"{', '.join(special)} cannot be read as a library (spec-libraries)")
        return spec, nodes, libraries, dry_run_injection(config, spec.resolution, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
