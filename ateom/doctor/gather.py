"""The doctor's imperative shell: look at the machine and write down `Facts`.

Every probe here stats, globs, reads ELF, runs a binary or plans an
injection, and reuses the piece of ateom that does the same for real (the
CDI registry, the injector's SONAME reader and planner, the daemon's runsc
probe and spec generator), so the doctor sees exactly what `ateom serve`
would. No probe raises for what it finds broken: a broken thing is a fact.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ateom.cdi.model import Resolution
from ateom.cdi.registry import Registry
from ateom.daemon.gpu import find_nvidia_ctk, nvidia_ctk_argv, nvidia_ctk_path_env
from ateom.daemon.runsc_probe import probe_runsc
from ateom.doctor.config import DoctorConfig
from ateom.doctor.facts import (
    DirFact,
    Facts,
    InjectionFact,
    LibraryFact,
    NodeFact,
    RunscFact,
    SpecFact,
    SpecNodeFact,
    ToolFact,
)
from ateom.errors import AteomError, ResolutionError
from ateom.inject.injector import plan_injection
from ateom.inject.options import gvisor_nvidia_options, nvidia_hook_binary
from ateom.inject.soname import file_kind, read_soname


class CommandRunner(Protocol):
    """Runs a command to completion: argv -> (exit code, stdout+stderr).

    The CLI runs commands with `subprocess`; inside the daemon, which reaps
    every child itself, the doctor must go through the daemon's reaper
    (`reaper_runner`), or its waitpid would race the reaper's.
    """

    def __call__(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60.0
    ) -> tuple[int, str]: ...


# What a runner answers for a command it gave up on (as timeout(1) does) and
# for one it could not start (as a shell does).
TIMED_OUT = 124
NOT_RUN = 127


def subprocess_runner(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60.0
) -> tuple[int, str]:
    """Run `argv` with subprocess; an exec failure or timeout is exit 127/124 with the reason.

    The command runs in its own process group, killed whole on timeout: a
    wrapper script's children (runsc shims, nvidia-ctk wrappers) would
    otherwise outlive it.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        return NOT_RUN, f"{argv[0]}: {exc.strerror or exc}"
    with proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return TIMED_OUT, f"{argv[0]}: timed out after {timeout:g}s"
        except BaseException:  # Ctrl-C: the child's session did not get the SIGINT
            _kill_group(proc)
            raise
    return proc.returncode, out


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def reaper_runner(reaper: Any) -> CommandRunner:
    """A runner over the daemon's `Reaper.run_capture` (for the Doctor RPC)."""

    def run(
        argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60.0
    ) -> tuple[int, str]:
        done = reaper.run_capture(argv, env=env, timeout=timeout)
        if getattr(done, "timed_out", False):
            return TIMED_OUT, f"{argv[0]}: timed out after {timeout:g}s"
        return int(done.returncode), str(done.output)

    return run


def give_up_after_a_timeout(run: CommandRunner, limit: float) -> CommandRunner:
    """`run` with at most `limit` seconds per command, and no command at all once
    one timed out.

    runsc is probed with several commands; a binary that hangs on the first
    hangs on all, so one timeout is the whole cost.
    """
    timed_out: list[str] = []

    def bounded(
        argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = limit
    ) -> tuple[int, str]:
        if timed_out:
            return TIMED_OUT, f"{argv[0]}: not run: {timed_out[0]}"
        code, out = run(argv, env=env, timeout=min(timeout, limit))
        if code == TIMED_OUT:
            timed_out.append(out.strip())
        return code, out

    return bounded


_DIGITS = re.compile(r"(\d+)")
_PROC_VERSION = re.compile(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s")
_DRIVER_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)?$")


def _natural(path: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in _DIGITS.split(path)]


def stat_node(path: str) -> NodeFact:
    """What is at `path` (stats it, following symlinks as the injector does)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return NodeFact(path, error=exc.strerror or str(exc))
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        kind = "c" if stat.S_ISCHR(st.st_mode) else "b"
        return NodeFact(path, kind, os.major(st.st_rdev), os.minor(st.st_rdev))
    return NodeFact(path, "other")


def _dir(path: str) -> DirFact:
    return DirFact(path, os.path.isdir(path))


def tool_fact(toolkit_dir: str, name: str) -> ToolFact:
    """`name` in the toolkit dir, ``name.real`` preferred (stats and reads 2 bytes).

    The hook binary is chosen by the injector's own rule, so the doctor checks
    the very file kept hooks will run.
    """
    real = os.path.join(toolkit_dir, name + ".real")
    if name == "nvidia-cdi-hook":
        path = nvidia_hook_binary(toolkit_dir)
    else:
        path = real if os.path.exists(real) else os.path.join(toolkit_dir, name)
    if not os.path.isfile(path):
        return ToolFact(name, path, exists=False)
    try:
        with open(path, "rb") as f:
            is_script = f.read(2) == b"#!"
    except OSError:
        is_script = False
    return ToolFact(
        name,
        path,
        exists=True,
        executable=os.access(path, os.X_OK),
        is_real=path == real,
        is_script=is_script,
    )


def host_driver_version(config: DoctorConfig) -> str:
    """The loaded kernel module's version, else libcuda's file name suffix (reads files)."""
    try:
        with open(config.proc_driver_version) as f:
            m = _PROC_VERSION.search(f.read())
        if m:
            return m.group(1)
    except OSError:
        pass
    for lib in sorted(glob.glob(os.path.join(config.driver_lib_dir, "libcuda.so.*"))):
        suffix = os.path.basename(lib)[len("libcuda.so.") :]
        if _DRIVER_VERSION.match(suffix):
            return suffix
    return ""


def _kind_of(config: DoctorConfig) -> str:
    return config.devices[0].partition("=")[0] if config.devices else "nvidia.com/gpu"


def generate_spec(
    config: DoctorConfig, out_dir: str, environ: Mapping[str, str], run: CommandRunner
) -> tuple[str, str]:
    """Run nvidia-ctk cdi generate as the daemon would, into `out_dir`.

    Returns (tool used, error); error is "" on success.
    """
    daemon_path = environ.get("PATH", os.defpath)
    path_env = nvidia_ctk_path_env(config.toolkit_dir, config.driver_root, daemon_path)
    tool = find_nvidia_ctk(config.toolkit_dir, config.driver_root, daemon_path)
    if tool is None:
        return "", f"no nvidia-ctk in {config.toolkit_dir}, {config.driver_bin_dir} or $PATH"
    output = os.path.join(out_dir, "nvidia.json")
    argv = nvidia_ctk_argv(tool, config.driver_root, output)
    code, out = run(argv, env={**environ, "PATH": path_env}, timeout=config.generate_timeout)
    if code != 0:
        return tool, f"{' '.join(argv)} exited {code}: {out[-1000:].strip()}"
    if not os.path.exists(output):
        return tool, f"{' '.join(argv)} exited 0 but wrote no {output}"
    return tool, ""


def gather_spec(
    config: DoctorConfig, scratch: str, environ: Mapping[str, str], run: CommandRunner
) -> SpecFact:
    """Load the spec dirs; generate a spec into `scratch` when the kind has none."""
    kind = _kind_of(config)
    registry = Registry.load(config.spec_dirs)
    generated_by = generate_error = ""
    if not registry.has_kind(kind):
        gen_dir = os.path.join(scratch, "generated-cdi")
        os.makedirs(gen_dir, exist_ok=True)
        tool, generate_error = generate_spec(config, gen_dir, environ, run)
        if not generate_error:
            generated_by = tool
            registry = Registry.load((*config.spec_dirs, gen_dir))
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
    )


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


def _supported_drivers(runsc_path: str, run: CommandRunner) -> tuple[str, ...] | None:
    """`runsc nvproxy list-supported-drivers`, or None when this runsc has no such command."""
    code, out = run([runsc_path, "nvproxy", "list-supported-drivers"])
    if code != 0:
        return None
    versions = [w for w in out.split() if _DRIVER_VERSION.match(w)]
    return tuple(versions) if versions else None


def gather_runsc(config: DoctorConfig, run: CommandRunner = subprocess_runner) -> RunscFact:
    """Probe runsc with the daemon's prober (runs the binary)."""
    path = config.runsc
    run = give_up_after_a_timeout(run, config.probe_timeout)
    try:
        info = probe_runsc(path, lambda argv: run(argv))
    except AteomError as exc:
        return RunscFact(path, found=False, error=str(exc))
    wanted = []
    if config.nvproxy_driver_version:
        wanted.append("nvproxy-driver-version")
    if config.nvproxy_capabilities:
        wanted.append("nvproxy-allowed-driver-capabilities")
    flags = tuple((f"--{flag}", info.supports(flag)) for flag in wanted)
    drivers = _supported_drivers(info.path, run) if info.supports_nvproxy else None
    return RunscFact(
        info.path,
        found=True,
        version=info.version,
        supports_nvproxy=info.supports_nvproxy,
        flags=flags,
        supported_drivers=drivers,
    )


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


def dry_run_injection(config: DoctorConfig, resolution: Resolution, scratch: str) -> InjectionFact:
    """Plan injecting `resolution` into a scratch bundle with the daemon's options.

    Plans only: the scratch bundle is not modified (and is deleted by the caller).
    """
    options = gvisor_nvidia_options(
        {
            "ATEOM_NVIDIA_TOOLKIT_DIR": config.toolkit_dir,
            "ATEOM_NVIDIA_DRIVER_ROOT": config.driver_root,
        }
    )
    bundle = write_scratch_bundle(scratch)
    try:
        plan = plan_injection(bundle, resolution, options)
    except AteomError as exc:
        return InjectionFact(error=str(exc))
    env = tuple(json.loads(plan.config_after).get("process", {}).get("env", []))
    links = tuple((str(link.path), str(link.target)) for link in plan.symlinks)
    return InjectionFact(env=env, symlinks=links)


def gather(
    config: DoctorConfig,
    environ: Mapping[str, str] = os.environ,
    run: CommandRunner = subprocess_runner,
) -> Facts:
    """Look at the machine as `config` describes it (globs, stats, ELF, runsc, plans).

    Commands (runsc, nvidia-ctk) go through `run`.
    """
    gpu_paths = sorted(glob.glob(config.gpu_glob), key=_natural)
    scratch = tempfile.mkdtemp(prefix="ateom-doctor-")
    try:
        spec = gather_spec(config, scratch, environ, run)
        nodes: tuple[SpecNodeFact, ...] = ()
        libraries: tuple[LibraryFact, ...] = ()
        injection = None
        if spec.resolution is not None:
            nodes = gather_spec_nodes(spec.resolution)
            libraries = gather_libraries(spec.resolution)
            special = [lib.host_path for lib in libraries if lib.special]
            if special:
                # The injector reads every library's SONAME: it would block on these.
                injection = InjectionFact(skipped=f"{', '.join(special)} cannot be read as a "
                                          "library (spec-libraries)")
            else:
                injection = dry_run_injection(config, spec.resolution, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Facts(
        config=config,
        gpu_nodes=tuple(stat_node(p) for p in gpu_paths),
        control_nodes=tuple(stat_node(p) for p in config.control_node_paths),
        driver_root=_dir(config.driver_root),
        driver_lib_dir=_dir(config.driver_lib_dir),
        driver_bin_dir=_dir(config.driver_bin_dir),
        toolkit_dir=_dir(config.toolkit_dir),
        tools=tuple(tool_fact(config.toolkit_dir, n) for n in ("nvidia-cdi-hook", "nvidia-ctk")),
        spec=spec,
        spec_nodes=nodes,
        libraries=libraries,
        runsc=gather_runsc(config, run),
        host_driver_version=host_driver_version(config),
        injection=injection,
    )
