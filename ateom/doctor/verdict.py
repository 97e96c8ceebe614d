"""The doctor's vocabulary: a check's status, its result, the whole report (pure)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Status(enum.Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"  # not checked: an earlier check it depends on failed


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str  # stable id, e.g. "control-nodes"
    status: Status
    summary: str  # one line: what was found
    fix: str = ""  # what to do about it (empty on PASS)
    details: tuple[str, ...] = ()  # one line per offending item


@dataclass(frozen=True, slots=True)
class Report:
    results: tuple[CheckResult, ...]

    @property
    def ok(self) -> bool:
        """True when nothing FAILed (WARN and SKIP-after-WARN do not fail a node)."""
        return not any(r.status is Status.FAIL for r in self.results)

    def result(self, name: str) -> CheckResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)


def passed(name: str, summary: str, details: tuple[str, ...] = ()) -> CheckResult:
    return CheckResult(name, Status.PASS, summary, details=details)


def skipped(name: str, because: str) -> CheckResult:
    return CheckResult(name, Status.SKIP, f"not checked: {because}")
