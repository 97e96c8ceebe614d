"""The example Pod's container as a `podman run` command line, the way the kubelet runs it.

The image test (`test_worker_image.py`) must run the manifest, not a copy of it: the
container's security context, capabilities, env, args and volumes are read from
`deploy/gpu-worker-pod.yaml` and translated here once. A field this module does not
know how to apply is an error (`Untranslatable`), not silently dropped, so an edit of
the manifest cannot leave the test running something else. What the kubelet does that
a single podman container cannot (resources: cgroup limits, the device plugin's GPUs,
probes, ports) is listed in `Translation.not_applied` for the test to print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECURITY_KEYS = {"privileged", "runAsUser", "runAsGroup", "allowPrivilegeEscalation",
                 "capabilities", "seccompProfile", "appArmorProfile",
                 "readOnlyRootFilesystem"}
# Container keys that do not change what runs or with which rights.
NOT_APPLIED_KEYS = {"name", "image", "imagePullPolicy", "ports", "resources", "startupProbe",
                    "readinessProbe", "livenessProbe"}
PROPAGATION = {None: "rprivate", "None": "rprivate", "HostToContainer": "rslave",
               "Bidirectional": "rshared"}


class Untranslatable(ValueError):
    """The manifest asks for something this translation cannot apply faithfully."""


@dataclass
class Translation:
    flags: list[str] = field(default_factory=list)  # podman run flags, before the image
    args: list[str] = field(default_factory=list)   # after the image (the container's args)
    env: dict[str, str] = field(default_factory=dict)
    caps: tuple[str, ...] = ()                      # the capabilities the manifest adds
    mounts: dict[str, Path] = field(default_factory=dict)  # mountPath -> host dir
    not_applied: list[str] = field(default_factory=list)

    def host_path(self, path: str) -> Path:
        """Where a path the container sees lies on the host (its longest mount)."""
        for mount_path in sorted(self.mounts, key=len, reverse=True):
            if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
                return self.mounts[mount_path] / path[len(mount_path):].lstrip("/")
        raise ValueError(f"{path} is on no volume of the container")


def container_of(pod: dict[str, Any], name: str) -> dict[str, Any]:
    for container in pod["spec"]["containers"]:
        if container["name"] == name:
            return container
    raise Untranslatable(f"no container {name!r} in the Pod")


def translate(pod: dict[str, Any], container_name: str, host_root: Path) -> Translation:
    """`podman run` flags for `container_name` of `pod`, its hostPath and emptyDir volumes
    made as directories under `host_root` (hostPath P at host_root/host/P)."""
    spec = pod["spec"]
    if spec.get("securityContext"):
        raise Untranslatable("spec.securityContext: Pod-level security context not translated")
    container = container_of(pod, container_name)
    unknown = set(container) - NOT_APPLIED_KEYS - {"args", "command", "env", "securityContext",
                                                   "volumeMounts"}
    if unknown:
        raise Untranslatable(f"containers[{container_name}]: {sorted(unknown)} not translated")
    out = Translation()
    out.env = _env(container, pod)
    out.flags += [f"--env={k}={v}" for k, v in out.env.items()]
    if "command" in container:
        out.flags.append("--entrypoint=" + container["command"][0])
        out.args += container["command"][1:]
    out.args += [_expand(a, out.env) for a in container.get("args", [])]
    _security(container.get("securityContext", {}), out)
    _volumes(spec.get("volumes", []), container.get("volumeMounts", []), host_root, out)
    out.not_applied += [f"containers[{container_name}].{k}" for k in sorted(NOT_APPLIED_KEYS)
                        if k in container and k not in ("name", "image", "imagePullPolicy")]
    return out


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) references, as in args and subPathExpr."""
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in env:
            raise Untranslatable(f"$({m.group(1)}) names no env variable of the container")
        return env[m.group(1)]
    return re.sub(r"\$\((\w+)\)", one, text)


def _env(container: dict[str, Any], pod: dict[str, Any]) -> dict[str, str]:
    fields = {"metadata.name": pod["metadata"]["name"],
              "metadata.namespace": pod["metadata"].get("namespace", "default")}
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = _expand(str(var["value"]), env)
            continue
        ref = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if ref not in fields:
            raise Untranslatable(f"env {var['name']}: only values and fieldRef "
                                 f"{sorted(fields)} are translated")
        env[var["name"]] = fields[ref]
    return env


def _security(ctx: dict[str, Any], out: Translation) -> None:
    unknown = set(ctx) - SECURITY_KEYS
    if unknown:
        raise Untranslatable(f"securityContext: {sorted(unknown)} not translated")
    if ctx.get("privileged"):
        out.flags.append("--privileged")
    user = ctx.get("runAsUser")
    if user is not None:
        out.flags.append(f"--user={user}:{ctx.get('runAsGroup', 0)}")
    if ctx.get("allowPrivilegeEscalation") is False:
        out.flags.append("--security-opt=no-new-privileges")
    if ctx.get("readOnlyRootFilesystem"):
        out.flags.append("--read-only")
    caps = ctx.get("capabilities", {})
    if set(caps) - {"add", "drop"}:
        raise Untranslatable(f"securityContext.capabilities: {sorted(caps)}")
    out.flags += [f"--cap-drop={c.lower()}" for c in caps.get("drop", [])]
    out.caps = tuple(caps.get("add", []))
    out.flags += [f"--cap-add={c}" for c in out.caps]
    for key, opt in (("seccompProfile", "seccomp"), ("appArmorProfile", "apparmor")):
        kind = ctx.get(key, {}).get("type")
        if kind == "Unconfined":
            out.flags.append(f"--security-opt={opt}=unconfined")
        elif kind not in (None, "RuntimeDefault"):
            raise Untranslatable(f"securityContext.{key}.type {kind!r} not translated")


def _volumes(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]], host_root: Path,
             out: Translation) -> None:
    by_name = {v["name"]: v for v in volumes}
    for mount in mounts:
        volume = by_name[mount["name"]]
        if "hostPath" in volume:
            source = host_root / "host" / volume["hostPath"]["path"].lstrip("/")
        elif "emptyDir" in volume:
            source = host_root / "emptydir" / volume["name"]
        else:
            raise Untranslatable(f"volume {volume['name']}: only hostPath and emptyDir")
        source.mkdir(parents=True, exist_ok=True)
        sub = mount.get("subPath") or _expand(mount.get("subPathExpr", ""), out.env)
        if sub:
            source = source / sub
            source.mkdir(parents=True, exist_ok=True)
        propagation = mount.get("mountPropagation")
        if propagation not in PROPAGATION:
            raise Untranslatable(f"volumeMount {mount['name']}: mountPropagation {propagation}")
        options = ["ro" if mount.get("readOnly") else "rw", PROPAGATION[propagation]]
        out.mounts[mount["mountPath"]] = source
        out.flags.append(f"--volume={source}:{mount['mountPath']}:{','.join(options)}")
