"""How a doctor `Report` reads: one line per check for people, JSON for machines (pure)."""

from __future__ import annotations

import json
from typing import Any

from ateom.doctor.verdict import CheckResult, Report, Status


def wire_status(status: Status) -> str:
    """The status as the gRPC Doctor's ``DoctorStatus`` names it (``DOCTOR_STATUS_FAIL``):
    ``ateom doctor --json`` and ``grpcurl … ateom.Inspect/Doctor`` print the same words."""
    return f"DOCTOR_STATUS_{status.value}"


def result_to_dict(r: CheckResult) -> dict[str, Any]:
    return {
        "name": r.name,
        "status": wire_status(r.status),
        "summary": r.summary,
        "fix": r.fix,
        "details": list(r.details),
    }


def report_to_dict(report: Report) -> dict[str, Any]:
    counts = {wire_status(s): 0 for s in Status}
    for r in report.results:
        counts[wire_status(r.status)] += 1
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
    d = {s: sum(r.status is s for r in report.results) for s in Status}
    verdict = "OK" if report.ok else "NOT OK"
    lines.append(
        f"{verdict}: {d[Status.PASS]} passed, {d[Status.WARN]} warned, {d[Status.FAIL]} failed, "
        f"{d[Status.SKIP]} skipped"
    )
    return "\n".join(lines) + "\n"
