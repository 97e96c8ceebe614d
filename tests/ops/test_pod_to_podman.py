"""tests/ops/pod_to_podman.py: the manifest's container as podman flags, or a refusal."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops.pod_to_podman import Untranslatable, translate

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pod() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "deploy" / "gpu-worker-pod.yaml").read_text())
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
    assert "containers[ateom].resources" in plan.not_applied


@pytest.mark.parametrize(("edit", "says"), [
    (lambda c, p: c["securityContext"].update(procMount="Unmasked"), "procMount"),
    (lambda c, p: c["securityContext"].update(seccompProfile={"type": "Localhost"}),
     "seccompProfile"),
    (lambda c, p: c.update(lifecycle={"preStop": {}}), "lifecycle"),
    (lambda c, p: c["env"].append({"name": "X", "valueFrom": {"secretKeyRef": {}}}), "env X"),
    (lambda c, p: p["spec"].update(securityContext={"runAsUser": 0}), "Pod-level"),
    (lambda c, p: c["volumeMounts"][0].update(mountPropagation="Sideways"), "Sideways"),
    (lambda c, p: p["spec"]["volumes"][0].update(hostPath=None, configMap={"name": "x"}) or
     p["spec"]["volumes"][0].pop("hostPath"), "only hostPath and emptyDir"),
])
def test_what_it_cannot_apply_is_refused_not_dropped(pod: dict[str, Any], tmp_path: Path,
                                                     edit: Any, says: str) -> None:
    edited = copy.deepcopy(pod)
    edit(container(edited), edited)
    with pytest.raises(Untranslatable, match=says):
        translate(edited, "ateom", tmp_path)
