"""The example GPU worker manifest: parsed with PyYAML, the fields that matter checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def all_documents() -> list[tuple[Path, dict[str, Any]]]:
    docs = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path, doc))
    return docs


@pytest.fixture(scope="module")
def pod() -> dict[str, Any]:
    pods = [d for _, d in all_documents() if d.get("kind") == "Pod"]
    assert len(pods) == 1
    return pods[0]


@pytest.fixture(scope="module")
def ateom(pod: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "ateom"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_every_manifest_parses_and_names_its_kind() -> None:
    docs = all_documents()
    assert docs
    for path, doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), path


def test_gpu_requested_in_requests_and_limits_equally(ateom: dict[str, Any]) -> None:
    res = ateom["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"]
    assert int(res["limits"]["nvidia.com/gpu"]) >= 1


def test_tolerates_the_gpu_taint(pod: dict[str, Any]) -> None:
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "spec"
    ]["tolerations"]


def test_toolkit_hostpath_mounted_read_only_where_ateom_looks(
    pod: dict[str, Any], ateom: dict[str, Any]
) -> None:
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in ateom["volumeMounts"]}
    toolkit = mounts["/opt/nvidia-toolkit"]
    assert toolkit["readOnly"] is True
    assert "hostPath" in volumes[toolkit["name"]]
    assert env_of(ateom)["ATEOM_NVIDIA_TOOLKIT_DIR"] == "/opt/nvidia-toolkit"


def test_driver_root_is_configured(ateom: dict[str, Any]) -> None:
    assert env_of(ateom)["ATEOM_NVIDIA_DRIVER_ROOT"].startswith("/")


def test_socket_volume_shared_through_the_host_per_pod(
    pod: dict[str, Any], ateom: dict[str, Any]
) -> None:
    env = env_of(ateom)
    socket_dir = str(Path(env["ATEOM_SOCKET"]).parent)
    mount = next(m for m in ateom["volumeMounts"] if m["mountPath"] == socket_dir)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert "hostPath" in volume, "the node agent reaches the socket through the host"
    # One directory per Pod, named from the downward API.
    assert mount["subPathExpr"] == "$(POD_NAME)"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_health_probes_check_grpc_health_on_the_socket(ateom: dict[str, Any]) -> None:
    socket = env_of(ateom)["ATEOM_SOCKET"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = ateom[probe]["exec"]["command"]
        assert command[:2] == ["ateom", "health"], probe
        assert command[command.index("--socket") + 1] == socket


def health_timeout(command: list[str]) -> float:
    """The RPC deadline `ateom health` runs with: --timeout, else the CLI's default."""
    import argparse

    from ateom.doctor import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return float(parser.parse_args(command[1:]).timeout)


def test_probes_give_ateom_health_longer_than_its_own_deadline(ateom: dict[str, Any]) -> None:
    # Kubelet's default timeoutSeconds is 1; `ateom health` starts an interpreter and
    # then waits up to its --timeout. A shorter probe timeout turns a slow start
    # into a killed probe without the health answer (and restarts on liveness).
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        spec = ateom[probe]
        assert spec.get("timeoutSeconds", 1) > health_timeout(spec["exec"]["command"]), probe


def test_not_privileged_so_only_the_pods_gpus_are_visible(ateom: dict[str, Any]) -> None:
    sc = ateom["securityContext"]
    assert sc["privileged"] is False
    assert "SYS_ADMIN" in sc["capabilities"]["add"]
    assert sc["capabilities"]["drop"] == ["ALL"]


def test_drain_fits_in_the_termination_grace(pod: dict[str, Any], ateom: dict[str, Any]) -> None:
    grace = next(
        int(a.split("=", 1)[1]) for a in ateom["args"] if a.startswith("--shutdown-grace=")
    )
    assert pod["spec"]["terminationGracePeriodSeconds"] > grace


def test_metrics_port_matches_the_listen_address(ateom: dict[str, Any]) -> None:
    port = int(env_of(ateom)["ATEOM_METRICS_LISTEN"].rpartition(":")[2])
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in ateom["ports"]


def test_pod_monitor_selects_the_worker_and_its_metrics_port(
    pod: dict[str, Any], ateom: dict[str, Any]
) -> None:
    (monitor,) = [d for _, d in all_documents() if d.get("kind") == "PodMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    ports = {p["name"] for p in ateom["ports"]}
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        assert endpoint["port"] in ports


# The Kubernetes versions the example Pod is written for: the oldest supported and the
# newest the pinned validator knows.
SCHEMA_VERSIONS = ("1.30", "1.37")
CUSTOM_KINDS = {"PodMonitor"}  # prometheus-operator's CRD: no Kubernetes schema
# Manifests that need a newer Kubernetes than the oldest above: Substrate's worker
# Deployment projects the Pod's certificate (podCertificate volumes, Kubernetes 1.34+).
NEWEST_ONLY = {"substrate-worker-deployment.yaml": ("1.34", "podCertificate")}


def test_the_worker_runs_in_a_namespace_that_admits_it(pod: dict[str, Any]) -> None:
    # SYS_ADMIN, hostPath and Unconfined profiles are outside "baseline": the Pod's own
    # namespace must enforce "privileged", or the API server rejects the Pod.
    namespaces = {d["metadata"]["name"]: d for _, d in all_documents() if d["kind"] == "Namespace"}
    ns = namespaces[pod["metadata"]["namespace"]]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    (monitor,) = [d for _, d in all_documents() if d.get("kind") == "PodMonitor"]
    assert monitor["metadata"]["namespace"] == pod["metadata"]["namespace"]


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schema_strictly(version: str) -> None:
    import kubernetes_validate

    checked = []
    for path, doc in all_documents():
        if doc["kind"] in CUSTOM_KINDS:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(doc, version, strict=True)
            continue
        since, feature = NEWEST_ONLY.get(path.name, ("", ""))
        if since and tuple(map(int, version.split("."))) < tuple(map(int, since.split("."))):
            # Refused there for exactly the feature that needs the newer version.
            with pytest.raises(kubernetes_validate.ValidationError, match=feature):
                kubernetes_validate.validate(doc, version, strict=True)
            kubernetes_validate.validate(doc, since, strict=True)
        else:
            kubernetes_validate.validate(doc, version, strict=True)  # raises naming the field
        checked.append((path.name, doc["kind"]))
    assert ("gpu-worker-pod.yaml", "Pod") in checked
    assert ("substrate-worker-deployment.yaml", "Deployment") in checked


def test_a_broken_edit_fails_the_schema_check(pod: dict[str, Any]) -> None:
    import copy

    import kubernetes_validate

    broken = copy.deepcopy(pod)
    broken["spec"]["containers"][0]["securityContxt"] = {"privileged": False}  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError, match="securityContxt"):
        kubernetes_validate.validate(broken, SCHEMA_VERSIONS[-1], strict=True)


def test_the_substrate_deployment_is_the_controllers_shape_field_for_field() -> None:
    from tests.support import substrate

    (deployment,) = [d for p, d in all_documents()
                     if p.name == "substrate-worker-deployment.yaml"]
    spec = deployment["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["name"] == "ateom"
    assert c["args"] == list(substrate.CONTROLLER_ARGS)
    assert c["env"] == [{"name": "POD_UID",
                         "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {
        "https": 443, "connect": 8443, "readyz": substrate.READYZ_PORT}
    assert c["readinessProbe"] == {"httpGet": {"path": "/readyz", "port": "readyz"}}
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": list(substrate.CAPABILITIES)}
    assert (sc["privileged"], sc["runAsUser"]) == (False, 0)
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts[substrate.BASE_DIR]["mountPropagation"] == "HostToContainer"
    assert {substrate.CAPACITY_DIR, substrate.IDENTITY_DIR, substrate.EGRESS_TRUST_DIR} \
        <= {path for path, m in mounts.items() if m.get("readOnly")}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["run-ateom"]["hostPath"] == {"path": substrate.BASE_DIR,
                                                "type": "DirectoryOrCreate"}
    items = {i["path"]: i["resourceFieldRef"] for i in
             volumes["ateom-capacity"]["downwardAPI"]["items"]}
    assert (items["cpu_milli"]["resource"], items["cpu_milli"]["divisor"]) == ("limits.cpu", "1m")
    assert items["memory_bytes"]["resource"] == "limits.memory"
