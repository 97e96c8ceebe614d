"""What the run says: every step's outcome (`Report`, rewritten to report.json after
each step, so a run cut short keeps what it did) and the figures as a table (`summary`)."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from scripts.gpu_real_turn.node import Skip, StepFailed, dump


@dataclass
class Report:
    """Every step's outcome, written to `path` after each step."""

    path: Path
    started: float = field(default_factory=time.monotonic)
    steps: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def step(self, name: str, fn: Callable[[dict[str, Any]], None]) -> bool:
        """Run `fn(data)`; record ok / failed (with why) / skipped and its time."""
        data: dict[str, Any] = {}
        began = time.monotonic()
        status, why = "ok", ""
        print(f"== {name}", flush=True)
        try:
            fn(data)
        except Skip as exc:
            status, why = "skipped", str(exc)
        except grpc.RpcError as exc:
            status, why = "failed", f"{exc.code().name}: {exc.details()}"
        except StepFailed as exc:
            status, why = "failed", str(exc)
        except Exception as exc:  # noqa: BLE001 - a step's failure is reported, not raised
            # Unforeseen: where it broke comes back too (the first real run is the test).
            status, why = "failed", f"{type(exc).__name__}: {exc}"
            data["traceback"] = traceback.format_exc()[-3000:]
        seconds = round(time.monotonic() - began, 2)
        self.steps.append({"step": name, "status": status, "why": why, "seconds": seconds,
                           **data})
        print(f"   {status} in {seconds} s{': ' + why if why else ''}", flush=True)
        self.write()
        return status == "ok"

    def write(self) -> None:
        self.path.write_text(dump({"facts": self.facts, "steps": self.steps,
                                   "elapsed_s": round(time.monotonic() - self.started, 1)}))

    def ok(self) -> bool:
        return all(s["status"] != "failed" for s in self.steps)


def summary(report: Report) -> str:
    rows = ["| MiB | run s | checkpoint s | GPU released after s | image MB | ckpt MB/s |"
            " restore s | restore MB/s | first tick after restore s |",
            "|---|---|---|---|---|---|---|---|---|"]
    for s in report.steps:
        if s["step"].startswith("turn ") and s["status"] == "ok":
            rows.append(f"| {s['mib']} | {s['run_s']} | {s['checkpoint_s']} |"
                        f" {s['gpu_released_after_s']} | {s['image_bytes'] / 1e6:.0f} |"
                        f" {s['checkpoint_mb_s']} | {s['restore_s']} | {s['restore_mb_s']} |"
                        f" {s['first_tick_after_restore_s']} |")
    steps = "\n".join(f"- {s['step']}: **{s['status']}** ({s['seconds']} s)"
                      f"{': ' + s['why'] if s['why'] else ''}" for s in report.steps)
    facts = {k: v for k, v in report.facts.items() if k != "records"}
    return (f"# A real CUDA actor's turn\n\n{steps}\n\n{chr(10).join(rows)}\n\n"
            f"```json\n{dump(facts)}```\n")
