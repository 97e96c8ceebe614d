"""tests/ops/pod_to_podman.py: the manifests' container as podman flags, or a refusal."""

from __future__ import annotations

import copy
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops.pod_to_podman import HttpGet, Untranslatable, pod_of, quantity, translate
from tests.support.substrate import (
    BASE_DIR,
    CAPABILITIES,
    CAPACITY_DIR,
    EGRESS_TRUST_DIR,
    IDENTITY_DIR,
    controller_args,
)

REPO = Path(__file__).resolve().parents[2]
UID = "0c3e2b1a-9f8e-4d7c-b6a5-443322110000"


@pytest.fixture
def pod() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "deploy" / "gpu-worker-pod.yaml").read_text())
    return loaded


@pytest.fixture
def deployment() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        (REPO / "deploy" / "substrate-worker-deployment.yaml").read_text())
    return loaded


def container(pod: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = pod["spec"]["containers"][0]
    return found


def test_the_manifest_translates_to_its_security_context(pod: dict[str, Any],
                                                         tmp_path: Path) -> None:
    plan = translate(pod, "ateom", tmp_path)
    ctx = container(pod)["securityContext"]
    assert "--privileged" not in plan.flags
    assert "--user=0:0" in plan.flags
    assert "--cap-drop=all" in plan.flags
    assert [f for f in plan.flags if f.startswith("--cap-add=")] == [
        "--cap-add=" + c for c in ctx["capabilities"]["add"]]
    assert plan.caps == tuple(ctx["capabilities"]["add"])
    assert {"--security-opt=seccomp=unconfined", "--security-opt=apparmor=unconfined"} <= set(
        plan.flags)
    assert plan.args == container(pod)["args"]
    # fieldRef metadata.name, and the socket volume's subPathExpr $(POD_NAME) from it.
    assert plan.env["POD_NAME"] == "ateom-gpu-worker"
    assert f"--env=ATEOM_RUNSC_GLOBAL_FLAGS={plan.env['ATEOM_RUNSC_GLOBAL_FLAGS']}" in plan.flags
    sock = tmp_path / "host" / "run" / "ateom" / "ateom-gpu-worker"
    assert f"--volume={sock}:/run/ateom:rw,rprivate" in plan.flags
    assert plan.host_path("/run/ateom/ateom.sock") == sock / "ateom.sock"
    toolkit = tmp_path / "host" / "usr" / "local" / "nvidia" / "toolkit"
    assert f"--volume={toolkit}:/opt/nvidia-toolkit:ro,rprivate" in plan.flags
    actors = tmp_path / "host" / "var" / "lib" / "ateom" / "actors"
    assert f"--volume={actors}:/var/lib/ateom/actors:rw,rslave" in plan.flags
    assert (tmp_path / "emptydir" / "run-tmp").is_dir()
    # Exec probes are the kubelet's to run: listed, not kept.
    assert plan.probes == {}
    assert {"containers[ateom].resources", "containers[ateom].readinessProbe"} <= set(
        plan.not_applied)
    assert plan.grace == 45


def test_a_deployments_pod_is_its_template_with_the_uid_the_api_server_gives(
        deployment: dict[str, Any]) -> None:
    made = pod_of(deployment, UID)
    assert made["metadata"] == {"name": "pool-0c3e2b1a", "namespace": "default", "uid": UID,
                                "labels": {"ate.dev/worker-pool": "pool"}}
    assert made["spec"] is deployment["spec"]["template"]["spec"]
    with pytest.raises(Untranslatable, match="not a Deployment"):
        pod_of({**deployment, "kind": "StatefulSet"}, UID)


def test_the_substrate_deployment_translates_as_the_kubelet_runs_it(
        deployment: dict[str, Any], tmp_path: Path) -> None:
    base = tmp_path / "base"
    plan = translate(pod_of(deployment, UID), "ateom", tmp_path / "node",
                     host_paths={BASE_DIR: base}, limits={"cpu": "4", "memory": "8Gi"})
    # $(POD_UID) expanded from the env var, which the kubelet sets from metadata.uid.
    assert plan.env == {"POD_UID": UID}
    assert plan.args == controller_args(UID)
    assert [f for f in plan.flags if f.startswith("--env=")] == [f"--env=POD_UID={UID}"]
    # The Pod's runAsUser/runAsGroup and the container's own security context.
    assert "--user=0:0" in plan.flags and "--privileged" not in plan.flags
    assert "--cap-drop=all" in plan.flags and plan.caps == CAPABILITIES
    assert [f for f in plan.flags if f.startswith("--cap-add=")] == [
        "--cap-add=" + c for c in CAPABILITIES]
    assert {"--security-opt=seccomp=unconfined", "--security-opt=apparmor=unconfined"} <= set(
        plan.flags)
    # The Pod's sysctl that lets the ingress bind :443 without NET_BIND_SERVICE.
    assert "--sysctl=net.ipv4.ip_unprivileged_port_start=0" in plan.flags
    # The hostPath at the dir the test chose, HostToContainer as rslave.
    assert f"--volume={base}:{BASE_DIR}:rw,rslave" in plan.flags and base.is_dir()
    assert plan.host_path(f"{BASE_DIR}/ateoms/x/ateom.sock") == base / "ateoms/x/ateom.sock"
    # The downward API: the limits in millicores and bytes, read-only.
    capacity = plan.host_path(CAPACITY_DIR)
    assert f"--volume={capacity}:{CAPACITY_DIR}:ro,rprivate" in plan.flags
    assert (capacity / "cpu_milli").read_text() == "4000"
    assert (capacity / "memory_bytes").read_text() == str(8 << 30)
    assert plan.probes == {"readinessProbe": HttpGet("/readyz", 8080)}
    assert plan.ports == {"https": 443, "connect": 8443, "readyz": 8080}
    assert "containers[ateom].readinessProbe" not in plan.not_applied
    assert {"containers[ateom].ports", "containers[ateom].resources"} <= set(plan.not_applied)
    assert plan.grace == 60


def pem_blocks(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("-----BEGIN ")]


def test_projected_certificates_are_real_p256_pems_per_signer(deployment: dict[str, Any],
                                                              tmp_path: Path) -> None:
    plan = translate(pod_of(deployment, UID), "ateom", tmp_path)
    identity, egress = plan.host_path(IDENTITY_DIR), plan.host_path(EGRESS_TRUST_DIR)
    assert f"--volume={identity}:{IDENTITY_DIR}:ro,rprivate" in plan.flags
    credential = identity / "credential-bundle.pem"
    assert pem_blocks(credential) == ["-----BEGIN PRIVATE KEY-----",
                                      "-----BEGIN CERTIFICATE-----"]
    trust = (identity / "trust-bundle.pem").read_text()
    # The Pod's certificate is its signer's, the one certificate of that signer's bundle;
    # the egress gateway's bundle is another signer's.
    assert trust in credential.read_text() and trust.startswith("-----BEGIN CERTIFICATE-----")
    assert (egress / "trust-bundle.pem").read_text() not in (trust, "")
    text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(credential)],
                          capture_output=True, text=True, check=True).stdout
    assert "prime256v1" in text or "P-256" in text
    # Defaults to the manifest's own limits: 8 cores, 32 GiB.
    capacity = plan.host_path(CAPACITY_DIR)
    assert (capacity / "cpu_milli").read_text() == "8000"
    assert (capacity / "memory_bytes").read_text() == str(32 << 30)


@pytest.mark.parametrize(("text", "value"), [
    ("4", 4), ("500m", Fraction(1, 2)), ("8Gi", 8 << 30), ("1e3", 1000), ("1.5k", 1500)])
def test_quantities(text: str, value: Fraction) -> None:
    assert quantity(text) == value


def first_volume(p: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(v for v in p["spec"]["volumes"] if kind in v)
    return found


@pytest.mark.parametrize(("edit", "says"), [
    (lambda c, p: p["spec"]["securityContext"].update(fsGroup=0), "Pod-level"),
    (lambda c, p: first_volume(p, "projected")["projected"]["sources"][0]["podCertificate"]
     .update(keyType="RSA3072"), "ECDSAP256"),
    (lambda c, p: first_volume(p, "projected")["projected"]["sources"].append(
        {"secret": {"name": "x"}}), "only podCertificate and clusterTrustBundle"),
    (lambda c, p: first_volume(p, "downwardAPI")["downwardAPI"]["items"][0]
     ["resourceFieldRef"].update(resource="requests.cpu"), "requests.cpu"),
    (lambda c, p: first_volume(p, "downwardAPI")["downwardAPI"]["items"][0]
     ["resourceFieldRef"].update(containerName="sidecar"), "another container"),
    (lambda c, p: first_volume(p, "downwardAPI")["downwardAPI"]["items"].append(
        {"path": "../x", "fieldRef": {"fieldPath": "metadata.uid"}}), "without '..'"),
    (lambda c, p: c["readinessProbe"]["httpGet"].update(port="metrics"), "names no port"),
    (lambda c, p: c["env"].append({"name": "X", "valueFrom": {"fieldRef": {
        "fieldPath": "status.podIP"}}}), "env X"),
])
def test_what_it_cannot_apply_of_the_deployment_is_refused(
        deployment: dict[str, Any], tmp_path: Path, edit: Any, says: str) -> None:
    edited = pod_of(copy.deepcopy(deployment), UID)
    edit(container(edited), edited)
    with pytest.raises(Untranslatable, match=says):
        translate(edited, "ateom", tmp_path, limits={"cpu": "1", "memory": "1Gi"})


@pytest.mark.parametrize(("edit", "says"), [
    (lambda c, p: c["securityContext"].update(procMount="Unmasked"), "procMount"),
    (lambda c, p: c["securityContext"].update(seccompProfile={"type": "Localhost"}),
     "seccompProfile"),
    (lambda c, p: c.update(lifecycle={"preStop": {}}), "lifecycle"),
    (lambda c, p: c["env"].append({"name": "X", "valueFrom": {"secretKeyRef": {}}}), "env X"),
    (lambda c, p: p["spec"].update(securityContext={"runAsUser": 0, "sysctls": [
        {"name": "net.ipv4.ip_unprivileged_port_start"}]}), "sysctls"),
    (lambda c, p: c["volumeMounts"][0].update(mountPropagation="Sideways"), "Sideways"),
    (lambda c, p: p["spec"]["volumes"][0].update(hostPath=None, configMap={"name": "x"}) or
     p["spec"]["volumes"][0].pop("hostPath"), "only hostPath, emptyDir"),
])
def test_what_it_cannot_apply_is_refused_not_dropped(pod: dict[str, Any], tmp_path: Path,
                                                     edit: Any, says: str) -> None:
    edited = copy.deepcopy(pod)
    edit(container(edited), edited)
    with pytest.raises(Untranslatable, match=says):
        translate(edited, "ateom", tmp_path)
