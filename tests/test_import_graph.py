"""ateom's packages form a layered graph: no package imports one that imports it back.

A package here is a directory of ateom/ with its own modules (ateom's root
modules — errors, safefs, settings... — are the package ``ateom``). An edge
P -> Q is any import, at any depth of a module in P, of a module in Q; a
cycle among packages is a defect even when no module cycle exists, because
it means two concerns each need the other (the layering the package docs
promise is broken). Also: no module may be named after a standard-library
module, so ``python3 -m ateom`` works with any ateom directory first on
``sys.path``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ateom"


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _package_of(module: str, packages: set[str]) -> str:
    while module not in packages:
        module = module.rsplit(".", 1)[0]
    return module


def _imported(module: str, path: Path, modules: set[str]) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # `from ateom.daemon import calls` imports the sub-package `calls`,
            # not the package `ateom.daemon`'s own modules.
            for alias in node.names:
                name = f"{target}.{alias.name}"
                yield name if name in modules else target


def package_graph() -> dict[str, set[str]]:
    modules = dict(_modules())
    packages = {m for m, p in modules.items() if p.name == "__init__.py"}
    graph: dict[str, set[str]] = {p: set() for p in packages}
    for module, path in modules.items():
        source = _package_of(module, packages)
        for target in _imported(module, path, set(modules)):
            if target not in modules:
                continue  # not ateom's
            dest = _package_of(target, packages)
            if dest != source:
                graph[source].add(dest)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_package_imports_one_that_imports_it_back() -> None:
    graph = package_graph()
    assert "ateom.daemon.calls" in graph and graph["ateom.daemon.rpc"], graph
    found = cycles(graph)
    detail = {p: sorted(q for q in graph[p] if q in group)
              for group in found for p in group}
    assert not found, f"package cycles: {found}; edges inside them: {detail}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_is_named_after_a_standard_library_module() -> None:
    clashes = sorted(str(p.relative_to(ROOT)) for m, p in _modules()
                     if m.rsplit(".", 1)[-1] in sys.stdlib_module_names)
    assert not clashes, clashes


@pytest.mark.parametrize("first", sorted(
    str(p.relative_to(ROOT)) for p in [PACKAGE, *PACKAGE.rglob("*")]
    if p.is_dir() and (p / "__init__.py").exists()))
def test_ateom_imports_clean_with_any_of_its_directories_first_on_the_path(first: str) -> None:
    # What `python3 -m ateom` sees when a tool or a shell puts one of ateom's
    # directories ahead of the rest: a module named like a library's would
    # shadow it there.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / first), str(ROOT)])}
    run = subprocess.run([sys.executable, "-m", "ateom", "--help"], env=env, cwd="/",
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_daemons_tests_mirror_its_sub_packages() -> None:
    daemon = PACKAGE / "daemon"
    packages = sorted(p.name for p in daemon.iterdir() if (p / "__init__.py").exists())
    tests = ROOT / "tests" / "daemon"
    missing = [p for p in packages if not list((tests / p).glob("test_*.py"))]
    assert packages and not missing, f"no tests/daemon/<package>/test_*.py for {missing}"


# gVisor's GPU vocabulary lives in one module; both the bundles and the GPU side
# import it from there (`ateom.gpuinfo.nvproxy`).
VOCABULARY = PACKAGE / "gpuinfo" / "nvproxy.py"
_VOCABULARY_NAMES = {"GPU_KIND", "ALL_GPUS_NAME", "PROXIED_VENDOR", "CONTROL_NODE_NAMES",
                     "MIG_NODE_PREFIX", "is_mig_name", "gpu_index", "control_node_paths",
                     "check_gvisor_devices", "check_resolution_for_gvisor", "check_nvproxy",
                     "check_nvproxy_driver", "DeviceView", "GpuTools"}
_VOCABULARY_WORDS = ("nvidia.com", "nvidiactl", "nvidia-uvm", "nvidia-caps")


def vocabulary_defined_in(path: Path) -> list[str]:
    """GPU names and nvproxy rules `path` defines at its top level: a def, class or
    assignment of one of the vocabulary's names, or a constant spelling one of its
    words (pure over the file's syntax tree)."""
    found = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in _VOCABULARY_NAMES:
            found.append(f"{node.name} (line {node.lineno})")
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            words = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)
                     and isinstance(c.value, str)
                     and any(w in c.value for w in _VOCABULARY_WORDS)]
            if set(names) & _VOCABULARY_NAMES or words:
                found.append(f"{', '.join(names) or '?'} (line {node.lineno})")
    return found


def test_gpu_names_and_nvproxy_rules_are_defined_in_one_module() -> None:
    assert vocabulary_defined_in(VOCABULARY)  # the module itself is found
    elsewhere = {str(p.relative_to(ROOT)): found for p in sorted(PACKAGE.rglob("*.py"))
                 if p != VOCABULARY and (found := vocabulary_defined_in(p))}
    assert not elsewhere, f"define these in ateom/gpuinfo/nvproxy.py: {elsewhere}"


def test_the_vocabulary_rule_finds_a_stray_definition(tmp_path: Path) -> None:
    stray = tmp_path / "stray.py"
    stray.write_text('KIND = "nvidia.com/gpu"\ndef is_mig_name(q):\n    return False\n')
    assert vocabulary_defined_in(stray) == ["KIND (line 1)", "is_mig_name (line 2)"]
