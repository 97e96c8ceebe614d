"""Docs that cannot drift.

- Every module is named in its package's reading order: each package's
  ``__init__`` docstring says what its modules are, in the order to read them; a
  module it leaves out is one a reader never finds. The daemon's own ``__init__``
  names every module of each of its sub-packages too (the one page a newcomer
  starts from). A module counts as named when it appears as `name`.
- No timing figure in the code: measurements go stale in docstrings; they live in
  docs/performance.md ("Figures behind the code"), with how they were made.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ateom"
PACKAGES = sorted(p.parent for p in PACKAGE.rglob("__init__.py")
                  if p.parent.name != "_proto" and p.parent != PACKAGE)


def _docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


def _modules(package: Path) -> list[str]:
    found = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    found += [p.parent.name for p in package.glob("*/__init__.py")]
    return sorted(found)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_module_is_in_its_package_s_reading_order(package: Path) -> None:
    doc = _docstring(package)
    missing = [m for m in _modules(package) if f"`{m}`" not in doc]
    assert not missing, f"{package.relative_to(PACKAGE.parent)}/__init__.py leaves out {missing}"


def test_the_daemon_names_every_module_of_its_sub_packages() -> None:
    daemon = PACKAGE / "daemon"
    doc = _docstring(daemon)
    missing = [f"{sub.name}/{m}" for sub in sorted(p.parent for p in daemon.glob("*/__init__.py"))
               for m in _modules(sub) if f"`{m}`" not in doc]
    assert not missing, f"ateom/daemon/__init__.py leaves out {missing}"


_TIMING = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|us|µs|ns)\b|~\d+(?:\.\d+)?\s?%|\b\d+x slower")


def test_no_timing_figure_is_written_into_the_code() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py")) if "_proto" not in path.parts
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if _TIMING.search(line)]
    assert not found, "figures belong in docs/performance.md:\n" + "\n".join(found)
