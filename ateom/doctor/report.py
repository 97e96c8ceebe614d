"""How a doctor `Report` reads: one line per check for people, JSON for machines (pure)."""

from __future__ import annotations

import json
from typing import Any

from ateom.doctor.verdict import CheckResult, Report, Status


def result_to_dict(r: CheckResult) -> dict[str, Any]:
    return {
        "name": r.name,
        "status": r.status.value,
        "summary": r.summary,
        "fix": r.fix,
        "details": list(r.details),
    }


def report_to_dict(report: Report) -> dict[str, Any]:
    counts = {s.value: 0 for s in Status}
    for r in report.results:
        counts[r.status.value] += 1
    return {
        "ok": report.ok,
        "counts": counts,
        "checks": [result_to_dict(r) for r in report.results],
    }


def render_json(report: Report) -> str:
    return json.dumps(report_to_dict(report), indent=2) + "\n"


def render_text(report: Report, *, max_details: int = 8) -> str:
    """``STATUS  name  summary`` per check, then its details and ``fix:`` indented."""
    width = max((len(r.name) for r in report.results), default=0)
    lines = []
    for r in report.results:
        lines.append(f"{r.status.value:<4}  {r.name:<{width}}  {r.summary}")
        pad = " " * (6 + width + 2)
        shown = r.details[:max_details]
        lines.extend(f"{pad}- {d}" for d in shown)
        if len(r.details) > len(shown):
            lines.append(f"{pad}- ... and {len(r.details) - len(shown)} more (--json shows all)")
        if r.fix and r.status in (Status.FAIL, Status.WARN):
            lines.append(f"{pad}fix: {r.fix}")
    d = report_to_dict(report)["counts"]
    verdict = "OK" if report.ok else "NOT OK"
    lines.append(
        f"{verdict}: {d['PASS']} passed, {d['WARN']} warned, {d['FAIL']} failed, "
        f"{d['SKIP']} skipped"
    )
    return "\n".join(lines) + "\n"
