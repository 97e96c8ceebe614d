"""`ateom doctor`: the GPU worker's verification chain, run on the machine itself.

    report = run_doctor(DoctorConfig(...))   # or config_from_env()
    print(render_text(report)); sys.exit(0 if report.ok else 1)

`gather` (the shell) looks at device nodes, driver files, the toolkit, the
CDI spec, runsc and a dry-run injection and writes down `Facts`; `judge`
(the core) turns facts into one PASS/WARN/FAIL/SKIP `CheckResult` per check,
each with the fix. The daemon's ``ateom.Inspect/Doctor`` RPC calls
`run_doctor(doctor_config_for_daemon(config), config.env, reaper_runner(reaper))`
(`ateom.doctor.gather.reaper_runner`), so the daemon's reaper stays the only
one waiting on its children.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ateom.doctor.checks import CHECK_NAMES, CheckResult, Report, Status, judge
from ateom.doctor.config import DoctorConfig, config_from_env
from ateom.doctor.report import render_json, render_text, report_to_dict

if TYPE_CHECKING:
    from ateom.daemon.config import DaemonConfig
    from ateom.doctor.gather import CommandRunner


def run_doctor(
    config: DoctorConfig,
    environ: Mapping[str, str] = os.environ,
    run: CommandRunner | None = None,
) -> Report:
    """Gather facts about this machine (stats, ELF, runsc, nvidia-ctk) and judge them.

    `run` executes runsc and nvidia-ctk: subprocess by default; inside the
    daemon pass ``reaper_runner(service.reaper)``.
    """
    from ateom.doctor.gather import gather, subprocess_runner

    return judge(gather(config, environ, run or subprocess_runner))


def doctor_config_for_daemon(config: DaemonConfig) -> DoctorConfig:
    """The doctor settings matching a running daemon's config (pure): what the
    daemon was told by flag or environment, so the report is about what it uses."""
    return DoctorConfig(
        gpu_glob=config.gpu_glob,
        driver_root=config.driver_root,
        toolkit_dir=config.toolkit_dir,
        spec_dirs=config.spec_dirs,
        runsc=config.runsc,
        nvproxy_driver_version=config.nvproxy_driver_version,
        nvproxy_capabilities=config.nvproxy_capabilities,
    )


__all__ = [
    "CHECK_NAMES",
    "CheckResult",
    "DoctorConfig",
    "Report",
    "Status",
    "config_from_env",
    "doctor_config_for_daemon",
    "judge",
    "render_json",
    "render_text",
    "report_to_dict",
    "run_doctor",
]
