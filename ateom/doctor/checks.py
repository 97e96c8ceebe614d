"""The doctor's verdicts: pure functions from `Facts` to one `CheckResult` each.

The order of `CHECKS` is the seeds' verification chain, from the node up to
the sandbox: device nodes, driver files, the GPUs' facts and how they are
shared, toolkit, CDI spec, runsc, a dry-run injection, and last what a GPU
checkpoint needs. A check whose input could not be gathered because an
earlier link failed says SKIP and names that link, so one root cause gives
one FAIL, not a cascade.

Severity is decided per check and written down where it is decided: FAIL
when an actor that asks for a GPU would fail or run without it, WARN when it
would run but something is fragile or unverifiable. The checks live with
their nouns: `checks_node`, `checks_cdi`, `checks_runsc`, `checks_gpu`.
"""

from __future__ import annotations

from collections.abc import Callable

from ateom.doctor.checks_cdi import (
    check_cdi_mps,
    check_cdi_resolve,
    check_cdi_spec,
    check_dry_run_injection,
    check_spec_device_nodes,
    check_spec_libraries,
)
from ateom.doctor.checks_gpu import (
    check_cuda_checkpoint,
    check_cuda_checkpoint_driver,
    check_gpu_inventory,
    check_gpu_placement,
    check_runsc_gpu_checkpoint,
)
from ateom.doctor.checks_node import (
    check_control_nodes,
    check_daemon_dirs,
    check_driver_root,
    check_gpu_nodes,
    check_toolkit,
    check_worker,
)
from ateom.doctor.checks_runsc import (
    check_runsc,
    check_runsc_cgroups,
    check_runsc_driver,
    check_runsc_global_flags,
    check_runsc_network,
    check_runsc_nvproxy,
    check_user_namespaces,
)
from ateom.doctor.facts import Facts
from ateom.doctor.verdict import CheckResult, Report, Status

# (name, check), in chain order: the names are the report's stable ids.
_TABLE: tuple[tuple[str, Callable[[Facts], CheckResult]], ...] = (
    ("gpu-nodes", check_gpu_nodes),
    ("control-nodes", check_control_nodes),
    ("driver-root", check_driver_root),
    ("gpu-inventory", check_gpu_inventory),
    ("gpu-placement", check_gpu_placement),
    ("toolkit", check_toolkit),
    ("cdi-spec", check_cdi_spec),
    ("cdi-resolve", check_cdi_resolve),
    ("spec-device-nodes", check_spec_device_nodes),
    ("spec-libraries", check_spec_libraries),
    ("cdi-mps", check_cdi_mps),
    ("daemon-dirs", check_daemon_dirs),
    ("worker", check_worker),
    ("runsc", check_runsc),
    ("runsc-global-flags", check_runsc_global_flags),
    ("user-namespaces", check_user_namespaces),
    ("runsc-cgroups", check_runsc_cgroups),
    ("runsc-network", check_runsc_network),
    ("runsc-nvproxy", check_runsc_nvproxy),
    ("runsc-driver", check_runsc_driver),
    ("dry-run-injection", check_dry_run_injection),
    ("cuda-checkpoint", check_cuda_checkpoint),
    ("cuda-checkpoint-driver", check_cuda_checkpoint_driver),
    ("runsc-gpu-checkpoint", check_runsc_gpu_checkpoint),
)

CHECKS: tuple[Callable[[Facts], CheckResult], ...] = tuple(check for _, check in _TABLE)
CHECK_NAMES: tuple[str, ...] = tuple(name for name, _ in _TABLE)


def judge(facts: Facts) -> Report:
    """Run every check over `facts`, in chain order (pure)."""
    return Report(tuple(check(facts) for check in CHECKS))


__all__ = ["CHECKS", "CHECK_NAMES", "CheckResult", "Report", "Status", "judge"]
