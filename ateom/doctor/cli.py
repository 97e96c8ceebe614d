"""``ateom doctor`` and ``ateom health``: the operator's questions about this worker."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from typing import Any

from ateom.doctor.config import DoctorConfig, config_from_env
from ateom.errors import AteomError, UnreachableError, UsageError

_DEFAULT_SOCKET = "/run/ateom/ateom.sock"


def register(subparsers: Any) -> None:
    doctor = subparsers.add_parser(
        "doctor",
        help="check this machine can run GPU actors (PASS/WARN/FAIL per check, with the fix)",
        description="Run the GPU worker's verification chain here: device nodes, driver "
        "root, the GPUs' facts and placement, toolkit, CDI spec (and NVIDIA MPS in it), "
        "runsc/nvproxy, a dry-run injection, and what GPU checkpoints need (cuda-checkpoint, "
        "the driver, runsc). Defaults come from the daemon's ATEOM_* environment. Exit 0 "
        "when no check FAILs.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--gpu-glob", help="GPU device nodes [$ATEOM_GPU_GLOB; /dev/nvidia[0-9]*]")
    doctor.add_argument(
        "--control-node",
        action="append",
        help="a control node nvproxy needs (repeatable) [nvidiactl, nvidia-uvm next to the GPUs]",
    )
    doctor.add_argument(
        "--driver-root", help="driver root with lib64/ and bin/ "
        "[$ATEOM_NVIDIA_DRIVER_ROOT; /usr/local/nvidia]"
    )
    doctor.add_argument(
        "--toolkit-dir", help="NVIDIA container toolkit binaries "
        "[$ATEOM_NVIDIA_TOOLKIT_DIR; /opt/nvidia-toolkit]"
    )
    doctor.add_argument(
        "--spec-dir", action="append",
        help="CDI spec directory (repeatable) [$ATEOM_CDI_SPEC_DIRS; /etc/cdi:/var/run/cdi]"
    )
    doctor.add_argument("--runsc", help="runsc binary [$ATEOM_RUNSC; runsc on PATH]")
    doctor.add_argument(
        "--nvproxy-driver-version", help="as given to ateom serve [$ATEOM_NVPROXY_DRIVER_VERSION]"
    )
    doctor.add_argument(
        "--nvproxy-capabilities", help="as given to ateom serve [$ATEOM_NVPROXY_CAPABILITIES]"
    )
    doctor.add_argument(
        "--device", action="append",
        help="qualified CDI device to resolve and dry-run inject (repeatable) "
        "[nvidia.com/gpu=all]",
    )
    doctor.add_argument(
        "--proc-driver-version",
        help="kernel module version file [<proc root>/driver/nvidia/version]",
    )
    doctor.add_argument(
        "--proc-root",
        help="where the NVIDIA module's /proc files are read [$ATEOM_PROC_ROOT; /proc]"
    )
    doctor.add_argument(
        "--nvidia-smi", help="nvidia-smi to query [<driver root>/bin/nvidia-smi, else $PATH]"
    )
    doctor.add_argument(
        "--cuda-checkpoint", help="as given to ateom serve; set, GPU checkpoints are expected "
        "[$ATEOM_CUDA_CHECKPOINT; looked for in <driver root>/bin, the toolkit dir, $PATH]"
    )
    doctor.add_argument(
        "--gpu-placement", help="as given to ateom serve [$ATEOM_GPU_PLACEMENT; shared]"
    )
    doctor.add_argument(
        "--max-actors", type=int, help="as given to ateom serve [$ATEOM_MAX_ACTORS; 1]"
    )
    doctor.add_argument(
        "--actors-root", help="as given to ateom serve [$ATEOM_ACTORS_ROOT; not checked]"
    )
    doctor.add_argument("--run-dir", help="as given to ateom serve [$ATEOM_RUN_DIR; /run/ateom]")
    doctor.set_defaults(func=run_doctor_command)

    health = subparsers.add_parser(
        "health",
        help="ask a running ateom's gRPC health service (for exec probes)",
        description="grpc.health.v1 Check against ateom serve. Exit 0 when SERVING, 1 when "
        "it answers anything else (NOT_SERVING, SERVICE_UNKNOWN), 3 when nothing answers (no "
        "daemon on the socket, refused, past --timeout).",
    )
    health.add_argument("--json", action="store_true",
                        help="print {target, status, serving, detail} as JSON")
    health.add_argument(
        "--socket", default=None,
        help=f"unix socket, or HOST:PORT for TCP [$ATEOM_SOCKET; {_DEFAULT_SOCKET}]",
    )
    health.add_argument("--service", default="", help="service name to ask about [server]")
    health.add_argument("--timeout", type=float, default=3.0, help="seconds [3]")
    health.set_defaults(func=run_health_command)


def run_doctor_command(args: argparse.Namespace) -> int:
    from ateom.doctor import run_doctor
    from ateom.doctor.report import render_json, render_text

    _quiet_library_logs()
    try:
        from_env = config_from_env(os.environ)
    except AteomError as exc:  # what it reads is the daemon's ATEOM_* twins: usage
        raise UsageError(str(exc)) from None
    report = run_doctor(config_from_args(args, from_env))
    sys.stdout.write(render_json(report) if args.json else render_text(report))
    return 0 if report.ok else 1


def _given(args: argparse.Namespace, **flags: str) -> dict[str, Any]:
    """{field: value} of the flags given (`field=flag attr`), the rest left alone."""
    return {f: getattr(args, a) for f, a in flags.items() if getattr(args, a) is not None}


def config_from_args(args: argparse.Namespace, config: DoctorConfig) -> DoctorConfig:
    """`config` (from the environment twins) with the flags given on top (pure)."""
    node = _given(args, gpu_glob="gpu_glob", driver_root="driver_root",
                  toolkit_dir="toolkit_dir")
    if args.spec_dir:
        node["spec_dirs"] = tuple(args.spec_dir)
    nvproxy = _given(args, driver_version="nvproxy_driver_version",
                     capabilities="nvproxy_capabilities")
    gpu = _given(args, proc_root="proc_root", cuda_checkpoint="cuda_checkpoint",
                 placement="gpu_placement")
    overrides = _given(args, runsc="runsc", proc_driver_version="proc_driver_version",
                       nvidia_smi="nvidia_smi", max_actors="max_actors",
                       actors_root="actors_root", run_dir="run_dir")
    overrides["node"] = replace(config.node, **node)
    overrides["gpu"] = replace(config.gpu, **gpu, nvproxy=replace(config.gpu.nvproxy, **nvproxy))
    if args.control_node:
        overrides["control_nodes"] = tuple(args.control_node)
    if args.device:
        overrides["devices"] = tuple(args.device)
    return replace(config, **overrides)


def _quiet_library_logs() -> None:
    """Send the injector's own events to stderr, errors only: the report says it all,
    and stdout must stay pure for --json."""
    import logging

    import structlog

    if structlog.is_configured():
        return
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def run_health_command(args: argparse.Namespace) -> int:
    from ateom.doctor.health import check_health

    target = args.socket or os.environ.get("ATEOM_SOCKET") or _DEFAULT_SOCKET
    answer = check_health(target, args.service, args.timeout)
    said = f"{answer.status}" + (f": {answer.detail}" if answer.detail else "")
    if not answer.answered:
        raise UnreachableError(f"{target}: {said}")
    if args.json:
        print(json.dumps({"target": target, "status": answer.status, "serving": answer.serving,
                          "detail": answer.detail}))
    else:
        print(said, file=sys.stdout if answer.serving else sys.stderr)
    return 0 if answer.serving else 1
