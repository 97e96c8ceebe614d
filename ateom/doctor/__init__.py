"""`ateom doctor`: the GPU worker's verification chain, run on the machine itself.

    report = run_doctor(DoctorConfig(...))   # or config_from_env()
    print(render_text(report)); sys.exit(0 if report.ok else 1)

`gather` (the shell) looks at device nodes, driver files, the Pod's GPUs
(/proc and nvidia-smi, through `ateom.gpuinfo`), the toolkit, the CDI spec
(and NVIDIA MPS in it), runsc, a dry-run injection and cuda-checkpoint, and
writes down `Facts`; `judge` (the core) turns facts into one
PASS/WARN/FAIL/SKIP `CheckResult` per check, each with the fix.

Reading order: `config` (where it looks), `facts` (what it learned, plain
data), `gather` with `gather_node`, `gather_cdi` and `gather_userns` (the
shell), `verdict` (a check's status and result, the report), `checks` (the
chain, in order) over `checks_node`, `checks_cdi`, `checks_runsc` and
`checks_gpu` (one pure function per check), `report` (text and JSON), `cli`
(``ateom doctor`` and ``ateom health``), `health` (the gRPC health check).

The daemon's ``ateom.Inspect/Doctor`` RPC (`ateom.daemon.rpc.inspection`) calls
`run_doctor(config, environ, reaper_runner(reaper))`
(`ateom.process.runner.reaper_runner`), so the daemon's reaper stays the
only one waiting on its children.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ateom.doctor.checks import CHECK_NAMES, CheckResult, Report, Status, judge
from ateom.doctor.config import DoctorConfig, config_from_env
from ateom.doctor.gather import gather
from ateom.doctor.report import render_json, render_text, report_to_dict
from ateom.process.runner import Runner, subprocess_runner


def run_doctor(
    config: DoctorConfig,
    environ: Mapping[str, str] = os.environ,
    run: Runner | None = None,
) -> Report:
    """Gather facts about this machine (stats, ELF, runsc, nvidia-ctk) and judge them.

    `run` executes runsc, nvidia-ctk, nvidia-smi and cuda-checkpoint:
    subprocess by default; inside the daemon pass ``reaper_runner(service.reaper)``.
    """
    return judge(gather(config, environ, run or subprocess_runner))


__all__ = [
    "CHECK_NAMES",
    "CheckResult",
    "DoctorConfig",
    "Report",
    "Status",
    "config_from_env",
    "judge",
    "render_json",
    "render_text",
    "report_to_dict",
    "run_doctor",
]
