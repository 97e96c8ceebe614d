"""The operator docs stay true to the code: every setting, check and metric is in them.

The README holds the GPU path and the troubleshooting table; docs/configuration.md
every flag; docs/operations.md the image, the manifests, the doctor checks and the
metrics; docs/README.md lists every page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ateom.daemon.rpc.metrics import Metrics
from ateom.doctor import CHECK_NAMES

REPO = Path(__file__).resolve().parents[2]
DOC = "\n".join((REPO / page).read_text() for page in (
    "README.md", "docs/configuration.md", "docs/operations.md"))


def table_rows(heading: str) -> list[str]:
    """The markdown table rows under `heading` (## or ###)."""
    start = DOC.index(heading)
    rows = []
    for line in DOC[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("|") and not line.startswith("|---"):
            rows.append(line)
    return rows


def test_every_serve_flag_and_env_twin_is_documented_with_its_default() -> None:
    from ateom.daemon.lifecycle.config import _FLAGS

    rows = table_rows("## `ateom serve`")
    for flag, env, _kind, default, _help in _FLAGS:
        row = next((r for r in rows if r.startswith(f"| `{flag}` |")), None)
        assert row is not None, f"{flag} missing from the serve table"
        assert f"`{env}`" in row, f"{flag}: env twin {env} not in its row"
        if isinstance(default, int) and not isinstance(default, bool):
            assert f"`{default}`" in row, f"{flag}: default {default} not in {row}"
        elif isinstance(default, float):
            assert re.search(rf"`{default:g}`", row), f"{flag}: default {default} not in {row}"
        elif isinstance(default, str) and default:
            assert default in row, f"{flag}: default {default!r} not in {row}"


def test_every_doctor_check_is_in_the_check_table_and_troubleshooting() -> None:
    checks = table_rows("## What `ateom doctor` checks")
    trouble = "\n".join(table_rows("## Troubleshooting")
                        + table_rows("## Troubleshooting GPU checkpoints and placement"))
    for name in CHECK_NAMES:
        assert any(r.startswith(f"| `{name}` |") for r in checks), name
        assert f"`{name}`" in trouble, f"no symptom leads to {name}"


def test_every_metric_is_documented() -> None:
    text = Metrics().scrape().decode()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    types["ateom_injection_soname_cache_lookups"] = "counter"  # registered with the cache
    rows = "\n".join(table_rows("## Metrics"))
    for name, kind in types.items():
        # A counter's samples (what a query names) end in _total; its TYPE line does not.
        suffix = "_total" if kind == "counter" and not name.endswith("_total") else ""
        assert f"`{name}{suffix}`" in rows, name


def test_dockerfile_build_args_are_documented_with_their_defaults() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    rows = table_rows("## The image")
    for m in re.finditer(r"^ARG (\w+)=(.*)$", dockerfile, re.MULTILINE):
        name, default = m.group(1), m.group(2).strip('"')
        row = next((r for r in rows if r.startswith(f"| `{name}` |")), None)
        assert row is not None, name
        assert (default or "empty") in row, f"{name}: default {default!r} not in {row}"


@pytest.mark.parametrize("source", ["Dockerfile", "deploy/gpu-worker-pod.yaml"])
def test_every_ateom_variable_the_deployment_sets_is_documented(source: str) -> None:
    text = (REPO / source).read_text()
    if source.endswith(".yaml"):
        pod = yaml.safe_load(text)
        names = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
    else:
        names = set(re.findall(r"\b(ATEOM_[A-Z_]+)=", text))
    for name in sorted(n for n in names if n.startswith("ATEOM_")):
        assert f"`{name}`" in DOC, f"{source} sets {name}, which the docs do not explain"


@pytest.mark.parametrize("source", ["Dockerfile", "deploy/gpu-worker-pod.yaml"])
def test_every_ateom_variable_the_deployment_sets_is_a_serve_setting(source: str) -> None:
    """One name per setting: a variable ateom serve does not read (an old spelling,
    a typo) would be silently ignored in the Pod."""
    from ateom.daemon.lifecycle.config import _FLAGS

    text = (REPO / source).read_text()
    if source.endswith(".yaml"):
        pod = yaml.safe_load(text)
        names = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
    else:
        names = set(re.findall(r"\b(ATEOM_[A-Z_]+)=", text))
    twins = {env for _flag, env, *_ in _FLAGS}
    assert {n for n in names if n.startswith("ATEOM_")} <= twins


def test_no_retired_spelling_is_documented() -> None:
    for retired in ("ATEOM_SPEC_DIRS", "ATEOM_DRIVER_ROOT"):
        assert not re.search(rf"\b{retired}\b", DOC), retired


def test_the_docs_index_lists_every_page() -> None:
    index = (REPO / "docs" / "README.md").read_text()
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name != "README.md")
    missing = [p for p in pages if f"]({p})" not in index]
    assert pages and not missing, f"docs/README.md does not list {missing}"
