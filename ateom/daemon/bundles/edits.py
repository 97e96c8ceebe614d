"""Pure edits of a bundle's config.json before runsc sees it.

Bundles come from another process (the node agent), so ateom decides what
in them may configure the sandbox:
- the CRI annotations that put every container into one sandbox are set by
  ateom, whatever the bundle said;
- `dev.gvisor.*` annotations configure runsc itself
  (`dev.gvisor.internal.nvproxy` alone turns GPU support on), so any the
  bundle carries are removed and reported;
- OCI hooks run as root on the host, outside the sandbox: a bundle that
  arrives with hooks is refused (the injector adds only allowlisted ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ateom import oci_config
from ateom.daemon.calls.requests import CPU_PERIOD_USEC
from ateom.errors import AteomError, ErrorCode

CONTAINER_TYPE = "io.kubernetes.cri.container-type"
SANDBOX_ID = "io.kubernetes.cri.sandbox-id"
CONTAINER_NAME = "io.kubernetes.cri.container-name"
GVISOR_PREFIX = "dev.gvisor."

# Where a GPU container finds the worker's cuda-checkpoint, bind-mounted
# read-only when it boots: runsc runs the tool inside the sandbox, at the
# path `gpus.checkpoint_policy` names in `runsc checkpoint`.
TOOL_IN_CONTAINER = "/opt/ateom/bin/cuda-checkpoint"


@dataclass(frozen=True, slots=True)
class PreparedConfig:
    config: dict[str, Any]
    removed_annotations: tuple[str, ...]


def parse_config(raw: bytes, path: str) -> dict[str, Any]:
    """config.json bytes -> the config, or INVALID_ARGUMENT naming the file and field
    (pure): the one shape checker every part of ateom uses (`ateom.oci_config`),
    plus what the daemon needs to run it at all: a process."""
    config = oci_config.parse_config(raw, path)
    if not isinstance(config.get("process"), dict):
        raise AteomError(f"{path}: process: required", code=ErrorCode.INVALID_ARGUMENT)
    return config


def foreign_hooks(config: dict[str, Any]) -> list[str]:
    """`hooks.<name>[i].path` of every hook in the config (pure)."""
    found = []
    for hook_name, hooks in sorted((config.get("hooks") or {}).items()):
        for i, hook in enumerate(hooks or []):
            path = hook.get("path", "?") if isinstance(hook, dict) else "?"
            found.append(f"hooks.{hook_name}[{i}] ({path})")
    return found


def refuse_foreign_hooks(config: dict[str, Any], path: str) -> None:
    """A bundle as the node agent wrote it must carry no hooks (pure)."""
    hooks = foreign_hooks(config)
    if hooks:
        raise AteomError(
            f"{path}: refusing OCI hooks ateom did not inject (they would run as root on the"
            f" host): {', '.join(hooks)}",
            code=ErrorCode.FAILED_PRECONDITION,
        )


def prepare_config(
    config: dict[str, Any],
    path: str,
    *,
    container: str,
    sandbox_id: str,
    is_sandbox: bool,
    cpu_milli: int = 0,
    memory_bytes: int = 0,
    extra_mounts: Sequence[dict[str, Any]] = (),
    args_prefix: Sequence[str] = (),
    netns_path: str = "",
) -> PreparedConfig:
    """The config runsc will see for `container` (pure; `config` is not changed).

    `config` is the node agent's, or that after device injection: hooks the
    injector added (allowlisted, rewritten to its trusted binary) are kept;
    check the node agent's own config with `refuse_foreign_hooks` first.

    Copies only the objects it changes (the top level, annotations, the
    sandbox's linux.resources), sharing the rest with `config`: a deep copy
    of an injected config (dozens of mounts) cost more than every other
    edit here, on every container of every actor's cold start.
    """
    out = dict(config)
    annotations = dict(out.get("annotations") or {})
    removed = tuple(sorted(k for k in annotations if k.startswith(GVISOR_PREFIX)))
    for key in removed:
        del annotations[key]
    annotations[CONTAINER_TYPE] = "sandbox" if is_sandbox else "container"
    annotations[SANDBOX_ID] = sandbox_id
    annotations[CONTAINER_NAME] = container
    out["annotations"] = annotations
    if extra_mounts:
        # ateom's own read-only tools (cuda-checkpoint), after the bundle's mounts.
        out["mounts"] = [*(out.get("mounts") or []), *extra_mounts]
    if args_prefix:
        process = dict(out["process"])
        process["args"] = [*args_prefix, *(process.get("args") or [])]
        out["process"] = process
    if netns_path:
        # The actor's own network namespace (`ateom.network`), for runsc to take over:
        # whatever network namespace the bundle named is replaced, it is ateom's to give.
        linux = dict(_object_at(out, "linux", path))
        spaces = [ns for ns in linux.get("namespaces") or []
                  if not (isinstance(ns, dict) and ns.get("type") == "network")]
        linux["namespaces"] = [*spaces, {"type": "network", "path": netns_path}]
        out["linux"] = linux
    if is_sandbox and (cpu_milli or memory_bytes):
        # Limits belong to the sandbox (its root container's cgroup); runsc
        # applies them when it manages cgroups (not with --ignore-cgroups).
        linux = dict(_object_at(out, "linux", path))
        resources = dict(_object_at(linux, "resources", f"{path}: linux"))
        linux["resources"] = resources
        out["linux"] = linux
        if cpu_milli:
            resources["cpu"] = {**resources.get("cpu", {}), "period": CPU_PERIOD_USEC,
                                "quota": cpu_milli * CPU_PERIOD_USEC // 1000}
        if memory_bytes:
            resources["memory"] = {**resources.get("memory", {}), "limit": memory_bytes}
    return PreparedConfig(out, removed)


def _object_at(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """parent[key] when it is an object, {} when absent (pure)."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AteomError(f"{where}: {key}: must be an object", code=ErrorCode.INVALID_ARGUMENT)
    return value


def tool_mount(host_path: str) -> dict[str, Any]:
    """The OCI mount putting the worker's cuda-checkpoint into a GPU container (pure)."""
    return {"destination": TOOL_IN_CONTAINER, "source": host_path, "type": "bind",
            "options": ["rbind", "ro", "nosuid", "nodev"]}


def dump_config(config: dict[str, Any], path: str) -> bytes:
    """The config as ateom writes it (`ateom.oci_config.dump_config`: compact, like
    the injector's; INVALID_ARGUMENT naming `path` if it cannot be encoded)."""
    return oci_config.dump_config(config, path)
