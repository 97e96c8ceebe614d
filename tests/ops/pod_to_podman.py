"""A Pod's (or a Deployment's pod template's) container as a `podman run` command line,
the way the kubelet runs it.

The image tests (`test_worker_image.py`, `test_substrate_deployment.py`) must run the
manifests, not copies of them: the container's security context (the Pod's too),
capabilities, env, args and volumes are read from `deploy/gpu-worker-pod.yaml` and
`deploy/substrate-worker-deployment.yaml` and translated here once. A field this module
does not know how to apply is an error (`Untranslatable`), not silently dropped, so an
edit of a manifest cannot leave a test running something else. What the kubelet does
that a single podman container cannot (resources: cgroup limits, the device plugin's
GPUs, exec probes, ports) is listed in `Translation.not_applied` for the test to print;
HTTP probes are kept (`Translation.probes`) for the test to make, as the kubelet does.

What the kubelet makes up itself is the test's to choose: the Pod's uid (`pod_of`), the
host dirs of hostPath volumes (`host_paths`), the limits the downward API reads
(`limits`), and the certificates of projected podCertificate and clusterTrustBundle
sources (a self-signed ECDSA P-256 key and certificate per signer, made with openssl).
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

SECURITY_KEYS = {"privileged", "runAsUser", "runAsGroup", "allowPrivilegeEscalation",
                 "capabilities", "seccompProfile", "appArmorProfile",
                 "readOnlyRootFilesystem"}
# The Pod's security context: the user and group (the container's defaults) and the
# Pod's namespaced sysctls (its network namespace's, podman's --sysctl).
POD_SECURITY_KEYS = {"runAsUser", "runAsGroup", "sysctls"}
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
# Container keys that do not change what runs or with which rights.
NOT_APPLIED_KEYS = {"name", "image", "imagePullPolicy", "ports", "resources", *PROBES}
PROPAGATION = {None: "rprivate", "None": "rprivate", "HostToContainer": "rslave",
               "Bidirectional": "rshared"}
# Kubernetes resource quantities' suffixes (apimachinery's resource.Quantity).
SUFFIXES: dict[str, int | Fraction] = {
    "": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
    "Ei": 2**60}


class Untranslatable(ValueError):
    """The manifest asks for something this translation cannot apply faithfully."""


@dataclass(frozen=True)
class HttpGet:
    """An httpGet probe, its named port resolved to the container's port number."""

    path: str
    port: int
    scheme: str = "HTTP"


@dataclass
class Translation:
    flags: list[str] = field(default_factory=list)  # podman run flags, before the image
    args: list[str] = field(default_factory=list)   # after the image (the container's args)
    env: dict[str, str] = field(default_factory=dict)
    caps: tuple[str, ...] = ()                      # the capabilities the manifest adds
    mounts: dict[str, Path] = field(default_factory=dict)  # mountPath -> host dir
    ports: dict[str, int] = field(default_factory=dict)    # port name -> containerPort
    probes: dict[str, HttpGet] = field(default_factory=dict)  # "readinessProbe" -> ...
    grace: int = 30                                 # terminationGracePeriodSeconds
    not_applied: list[str] = field(default_factory=list)

    def host_path(self, path: str) -> Path:
        """Where a path the container sees lies on the host (its longest mount)."""
        for mount_path in sorted(self.mounts, key=len, reverse=True):
            if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
                return self.mounts[mount_path] / path[len(mount_path):].lstrip("/")
        raise ValueError(f"{path} is on no volume of the container")


@dataclass
class _Context:
    """What one translation reads and makes besides the manifest."""

    pod: dict[str, Any]
    container: dict[str, Any]
    host_root: Path
    host_paths: Mapping[str, Path]
    limits: Mapping[str, str]
    signers: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (key, cert)


def container_of(pod: dict[str, Any], name: str) -> dict[str, Any]:
    for container in pod["spec"]["containers"]:
        if container["name"] == name:
            return container
    raise Untranslatable(f"no container {name!r} in the Pod")


def pod_of(deployment: dict[str, Any], uid: str, name: str = "") -> dict[str, Any]:
    """The Pod a Deployment's ReplicaSet makes from its template: the template's labels
    and spec, the Deployment's namespace, a generated name and `uid` (the API server's)."""
    if deployment.get("kind") != "Deployment":
        raise Untranslatable(f"kind {deployment.get('kind')!r}: not a Deployment")
    meta, template = deployment["metadata"], deployment["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name or f"{meta['name']}-{uid[:8]}",
                         "namespace": meta.get("namespace", "default"), "uid": uid,
                         "labels": dict(template.get("metadata", {}).get("labels", {}))},
            "spec": template["spec"]}


def translate(pod: dict[str, Any], container_name: str, host_root: Path, *,
              host_paths: Mapping[str, Path] | None = None,
              limits: Mapping[str, str] | None = None) -> Translation:
    """`podman run` flags for `container_name` of `pod`. hostPath P is the host dir
    `host_paths[P]` if given, else host_root/host/P; emptyDir, downwardAPI and projected
    volumes are made under host_root. The downward API reads `limits` ({"cpu": "4",
    "memory": "8Gi"}, the container's effective limits) if given, else the manifest's."""
    spec = pod["spec"]
    pod_ctx = spec.get("securityContext") or {}
    if set(pod_ctx) - POD_SECURITY_KEYS:
        raise Untranslatable(f"spec.securityContext: Pod-level {sorted(set(pod_ctx))} not "
                             f"translated (only {sorted(POD_SECURITY_KEYS)})")
    container = container_of(pod, container_name)
    unknown = set(container) - NOT_APPLIED_KEYS - {"args", "command", "env", "securityContext",
                                                   "volumeMounts"}
    if unknown:
        raise Untranslatable(f"containers[{container_name}]: {sorted(unknown)} not translated")
    out = Translation(grace=int(spec.get("terminationGracePeriodSeconds", 30)))
    out.env = _env(container, pod)
    out.flags += [f"--env={k}={v}" for k, v in out.env.items()]
    if "command" in container:
        out.flags.append("--entrypoint=" + container["command"][0])
        out.args += container["command"][1:]
    out.args += [_expand(a, out.env) for a in container.get("args", [])]
    for sysctl in pod_ctx.get("sysctls", []):
        if set(sysctl) != {"name", "value"}:
            raise Untranslatable(f"spec.securityContext.sysctls: {sysctl}")
        out.flags.append(f"--sysctl={sysctl['name']}={sysctl['value']}")
    user_ctx = {k: v for k, v in pod_ctx.items() if k != "sysctls"}
    _security({**user_ctx, **container.get("securityContext", {})}, out)
    ctx = _Context(pod, container, host_root, host_paths or {},
                   limits if limits is not None else
                   container.get("resources", {}).get("limits", {}))
    _volumes(spec.get("volumes", []), container.get("volumeMounts", []), ctx, out)
    _ports_and_probes(container, out)
    out.not_applied += [f"containers[{container_name}].{k}" for k in sorted(NOT_APPLIED_KEYS)
                        if k in container and k not in ("name", "image", "imagePullPolicy")
                        and k not in out.probes]
    return out


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) references, as in args and subPathExpr."""
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in env:
            raise Untranslatable(f"$({m.group(1)}) names no env variable of the container")
        return env[m.group(1)]
    return re.sub(r"\$\((\w+)\)", one, text)


def _fields(pod: dict[str, Any]) -> dict[str, str]:
    """The Pod's fields a fieldRef may name (those this translation knows)."""
    meta = pod["metadata"]
    fields = {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace",
                                                                            "default")}
    if "uid" in meta:
        fields["metadata.uid"] = meta["uid"]
    return fields


def _env(container: dict[str, Any], pod: dict[str, Any]) -> dict[str, str]:
    fields = _fields(pod)
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


def _ports_and_probes(container: dict[str, Any], out: Translation) -> None:
    """The container's named ports, and its httpGet probes (named ports resolved)."""
    for port in container.get("ports", []):
        if port.get("protocol", "TCP") != "TCP" or "hostPort" in port:
            raise Untranslatable(f"port {port}: only TCP container ports without hostPort")
        out.ports[port.get("name", str(port["containerPort"]))] = int(port["containerPort"])
    for kind in PROBES:
        get = container.get(kind, {}).get("httpGet")
        if get is None:
            continue
        if set(get) - {"path", "port", "scheme"}:
            raise Untranslatable(f"{kind}.httpGet: {sorted(set(get))} not translated")
        port = get["port"]
        if isinstance(port, str) and port not in out.ports:
            raise Untranslatable(f"{kind}.httpGet.port {port!r} names no port of the container")
        number = out.ports[port] if isinstance(port, str) else int(port)
        out.probes[kind] = HttpGet(get.get("path", "/"), number, get.get("scheme", "HTTP"))


def _volumes(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]], ctx: _Context,
             out: Translation) -> None:
    by_name = {v["name"]: v for v in volumes}
    for mount in mounts:
        volume = by_name[mount["name"]]
        source = _volume_source(volume, ctx)
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


def _volume_source(volume: dict[str, Any], ctx: _Context) -> Path:
    """The host dir that backs `volume`, made (and filled, for the kubelet's own kinds)."""
    name = volume["name"]
    if "hostPath" in volume:
        path = volume["hostPath"]["path"]
        source = ctx.host_paths.get(path) or ctx.host_root / "host" / path.lstrip("/")
    elif "emptyDir" in volume:
        source = ctx.host_root / "emptydir" / name
    elif "downwardAPI" in volume:
        source = ctx.host_root / "downward" / name
        source.mkdir(parents=True, exist_ok=True)
        for item in volume["downwardAPI"].get("items", []):
            _write(source, item["path"], _downward_value(item, ctx))
    elif "projected" in volume:
        source = ctx.host_root / "projected" / name
        source.mkdir(parents=True, exist_ok=True)
        for projection in volume["projected"].get("sources", []):
            _project(projection, source, ctx)
    else:
        raise Untranslatable(f"volume {name}: only hostPath, emptyDir, downwardAPI and "
                             "projected (podCertificate, clusterTrustBundle)")
    source.mkdir(parents=True, exist_ok=True)
    return source


def _write(directory: Path, relative: str, text: str) -> None:
    if relative.startswith("/") or ".." in relative.split("/"):
        raise Untranslatable(f"volume item path {relative!r}: must be relative, without '..'")
    path = directory / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)


def quantity(text: str) -> Fraction:
    """A Kubernetes resource quantity ("4", "500m", "8Gi", "1e3") as an exact number."""
    m = re.fullmatch(r"([0-9.]+(?:[eE][-+]?\d+)?)([a-zA-Z]*)", str(text).strip())
    if not m or m.group(2) not in SUFFIXES:
        raise Untranslatable(f"resource quantity {text!r} not understood")
    return Fraction(m.group(1)) * SUFFIXES[m.group(2)]


def _downward_value(item: dict[str, Any], ctx: _Context) -> str:
    """A downward-API item's file content, as the kubelet writes it."""
    if set(item) - {"path", "fieldRef", "resourceFieldRef"}:
        raise Untranslatable(f"downwardAPI item {item.get('path')}: {sorted(item)}")
    if "fieldRef" in item:
        fields = _fields(ctx.pod)
        ref = item["fieldRef"].get("fieldPath")
        if ref not in fields:
            raise Untranslatable(f"downwardAPI item {item['path']}: fieldRef {ref!r}")
        return fields[ref]
    ref = item["resourceFieldRef"]
    if ref.get("containerName", ctx.container["name"]) != ctx.container["name"]:
        raise Untranslatable(f"downwardAPI item {item['path']}: another container's resource")
    kind, _, resource = ref["resource"].partition(".")
    if kind != "limits" or resource not in ("cpu", "memory"):
        raise Untranslatable(f"downwardAPI item {item['path']}: resource {ref['resource']!r}")
    if resource not in ctx.limits:
        raise Untranslatable(f"downwardAPI item {item['path']}: no {resource} limit given "
                             "(the kubelet would write the node's allocatable)")
    # The kubelet rounds up: ceil(limit / divisor), as a whole number.
    return str(math.ceil(quantity(ctx.limits[resource]) / quantity(ref.get("divisor", "1"))))


def _project(projection: dict[str, Any], directory: Path, ctx: _Context) -> None:
    """One projected source's files: the Pod's certificate, or a signer's trust bundle."""
    if "podCertificate" in projection:
        cert = projection["podCertificate"]
        if cert.get("keyType") != "ECDSAP256" or "credentialBundlePath" not in cert:
            raise Untranslatable("podCertificate: only keyType ECDSAP256 with "
                                 "credentialBundlePath")
        key, chain = _signer(cert["signerName"], ctx)
        _write(directory, cert["credentialBundlePath"], key + chain)
    elif "clusterTrustBundle" in projection:
        bundle = projection["clusterTrustBundle"]
        if "signerName" not in bundle:
            raise Untranslatable("clusterTrustBundle: only by signerName")
        _write(directory, bundle["path"], _signer(bundle["signerName"], ctx)[1])
    else:
        raise Untranslatable(f"projected source {sorted(projection)}: only podCertificate and "
                             "clusterTrustBundle")


def _signer(name: str, ctx: _Context) -> tuple[str, str]:
    """A self-signed ECDSA P-256 key and certificate (PEM) standing in for signer `name`:
    it issues the Pod's certificate and is the one certificate of its trust bundle."""
    if name not in ctx.signers:
        work = ctx.host_root / "signers" / re.sub(r"[^A-Za-z0-9.-]", "_", name)
        work.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
             f"/CN={ctx.pod['metadata']['name']}", "-addext",
             f"subjectAltName=URI:spiffe://cluster.local/ns/"
             f"{ctx.pod['metadata'].get('namespace', 'default')}/pod/"
             f"{ctx.pod['metadata']['name']}",
             "-keyout", str(work / "key.pem"), "-out", str(work / "cert.pem")],
            capture_output=True, text=True, timeout=60, check=True)
        ctx.signers[name] = ((work / "key.pem").read_text(), (work / "cert.pem").read_text())
    return ctx.signers[name]
