"""``ateom checkpoint-info DIR [--json] [--here]``: what a checkpoint's compatibility
record says, and whether this worker could restore it.

Reading the record and judging it are the same code the daemon runs
(`read_record`, `check_restore`); this module only gathers this worker's facts
(`gather_here`: /proc, nvidia-smi, ``runsc --version``) and prints. A
checkpoint without a record (CPU-only, or taken before ateom wrote records)
restores as before: the command says so and exits 0. A corrupt record or
another format's is refused with the parser's message (exit 1), as a Restore
would refuse it. ``--here`` exits 1 when the checkpoint cannot be restored here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ateom.errors import AteomError, ErrorCode, InputError, quote
from ateom.gpuinfo.compat import Refusal, RestoreVerdict, check_restore, runsc_remaps_gpus
from ateom.gpuinfo.gather import find_nvidia_smi, gather_worker_gpus
from ateom.gpuinfo.inventory import GpuFacts, WorkerGpus
from ateom.gpuinfo.record import (
    RECORD_FILE,
    ParsedRecord,
    RunscBuild,
    parse_runsc_version,
    read_record,
    record_json,
)
from ateom.process.runner import Runner, subprocess_runner
from ateom.runsc.probe import probe_runsc
from ateom.settings import GpuSettings, NodeSettings

NO_RECORD = (f"no {RECORD_FILE}: a CPU-only checkpoint, or one taken before ateom wrote "
             "compatibility records; it restores as before, with nothing to check")


def register(subparsers: Any) -> None:
    info = subparsers.add_parser(
        "checkpoint-info",
        help="print a checkpoint's GPU compatibility record; --here: can it be restored here?",
        description=f"Print the {RECORD_FILE} of checkpoint directory DIR: the runsc build, "
        "driver, GPUs and containers it was taken with. --here also gathers this worker's "
        "GPUs (/proc, nvidia-smi) and probes its runsc ($ATEOM_RUNSC) and says whether the "
        "checkpoint can be restored here, with every reason it cannot (exit 1 then). A "
        "corrupt record, or a DIR that is not a directory, exits 4 with the reason.",
    )
    info.add_argument("directory", metavar="DIR", help="the checkpoint (image) directory")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.add_argument("--here", action="store_true",
                      help="check whether this worker could restore it (its GPUs taken as free)")
    info.add_argument("--proc-root",
                      help="where the NVIDIA module's /proc files are read"
                      " [$ATEOM_PROC_ROOT; /proc]")
    info.set_defaults(func=run_checkpoint_info)


@dataclass(frozen=True, slots=True)
class HereFacts:
    """This worker as a restore would see it."""

    worker: WorkerGpus
    runsc_path: str
    runsc: RunscBuild | None  # None when runsc could not be probed
    runsc_error: str
    remaps: bool | None  # runsc remaps GPUs on restore; None: its version cannot tell
    nvproxy_capabilities: str  # what this worker's daemon passes runsc ("" = runsc's)


def load_record(directory: str) -> ParsedRecord | None:
    """The record in `directory`, None when it has none (reads a file).

    Raises RecordError (FAILED_PRECONDITION, the parser's message) for a corrupt
    record or another format's, AteomError when `directory` is not a directory.
    """
    directory = os.path.abspath(directory)  # a relative one, from where ateom runs
    if not os.path.isdir(directory):
        raise AteomError(f"{quote(directory)}: not a checkpoint directory",
                         code=ErrorCode.NOT_FOUND)
    if not os.path.lexists(os.path.join(directory, RECORD_FILE)):
        return None
    # No symlink at or below the directory: a record is a plain file in it.
    return read_record(directory, beneath=os.path.abspath(directory))


def gather_here(environ: Mapping[str, str], *, proc_root: str | None = None,
                runner: Runner = subprocess_runner) -> HereFacts:
    """This worker's GPUs and runsc, as the daemon's settings name them (reads /proc,
    runs nvidia-smi and runsc). `proc_root` (the flag) wins over ``$ATEOM_PROC_ROOT``."""
    node = NodeSettings.from_env(environ)
    gpu = GpuSettings.from_env(environ)
    smi = find_nvidia_smi(node.driver_root, environ.get("PATH", ""))
    worker = gather_worker_gpus(proc_root=proc_root or gpu.proc_root, gpu_glob=node.gpu_glob,
                                nvidia_smi=smi, runner=runner)
    path = environ.get("ATEOM_RUNSC") or "runsc"
    try:
        info = probe_runsc(path)
    except AteomError as exc:
        return HereFacts(worker, path, None, str(exc), None, gpu.nvproxy.capabilities)
    build = parse_runsc_version(f"runsc version {info.version}")
    return HereFacts(worker, info.path, build, "", runsc_remaps_gpus(build),
                     gpu.nvproxy.capabilities)


def judge_here(parsed: ParsedRecord, here: HereFacts) -> RestoreVerdict:
    """Whether this worker could restore the checkpoint, its GPUs taken as free (pure).

    The daemon asks the same of the GPUs it has room on; a runsc that could
    not be probed is a refusal of its own (a restore needs the very build).
    """
    record = parsed.record
    if here.runsc is None:
        return RestoreVerdict((Refusal(
            "runsc", str(record.runsc), f"unusable ({here.runsc_error})",
            f"a restore needs runsc {record.runsc}: install it and point ATEOM_RUNSC at it"),))
    return check_restore(record, here.worker, runsc_version=here.runsc,
                         runsc_supports_remap=bool(here.remaps),
                         nvproxy_capabilities=here.nvproxy_capabilities)


# -- printing (pure) ---------------------------------------------------------------------


def _gpu(g: GpuFacts) -> str:
    memory = f"{g.memory_mib} MiB" if g.memory_mib is not None else "memory ?"
    return (f"GPU {g.index} (minor {g.minor if g.minor is not None else '?'}, {g.uuid}, "
            f"{g.pci_bus_id}, {g.pci_id} {g.name}, {memory})")


def record_lines(directory: str, parsed: ParsedRecord) -> list[str]:
    r = parsed.record
    caps = repr(r.nvproxy_capabilities) if r.nvproxy_capabilities else "runsc's default"
    lines = [f"{directory}: {RECORD_FILE} (format {r.format_version}, written by ateom "
             f"{r.ateom_version})",
             f"  runsc: {r.runsc}", f"  driver: {r.driver_version}",
             f"  nvproxy capabilities: {caps}",
             f"  snapshot: {r.snapshot_uri or 'not named'}", f"  GPUs: {len(r.gpus)}"]
    lines += [f"    {_gpu(g)}" for g in r.gpus]
    lines.append(f"  containers: {len(r.containers)}")
    lines += [f"    {c.name}: {', '.join(c.cdi_devices) or 'no devices'} (edits "
              f"{c.edits_digest})" for c in r.containers]
    if parsed.ignored:
        lines.append(f"  ignored (a newer format's fields): {', '.join(parsed.ignored)}")
    return lines


def here_lines(here: HereFacts, verdict: RestoreVerdict) -> list[str]:
    remap = {True: "yes", False: "no", None: "unknown (taken as no)"}[here.remaps]
    runsc = f"runsc {here.runsc} ({here.runsc_path})" if here.runsc else \
        f"runsc {here.runsc_path} unusable"
    lines = [f"this worker: driver {here.worker.driver_version or 'unknown'}, {runsc}, "
             f"{len(here.worker.gpus)} GPU(s), GPU remap on restore: {remap}"]
    lines += [f"  worker problem: {p}" for p in
              (*(c.describe() for c in here.worker.conflicts), *here.worker.problems)]
    if not verdict.ok:
        lines.append("restorable here: no")
        lines += [f"  refused: {r.describe()}" for r in verdict.refusals]
        return lines
    lines.append("restorable here: yes (taking this worker's GPUs as free; the daemon "
                 "restores only onto GPUs it has room on)")
    lines += [f"  saved {_gpu(m.saved)} -> {_gpu(m.target)}" for m in verdict.mapping]
    if verdict.remap:
        lines.append("  runsc remaps the saved GPUs onto other slots or cards")
    lines += [f"  warning: {w}" for w in verdict.warnings]
    return lines


def _gpu_json(g: GpuFacts) -> dict[str, Any]:
    return {"index": g.index, "minor": g.minor, "uuid": g.uuid, "name": g.name,
            "pci_bus_id": g.pci_bus_id, "pci_id": g.pci_id, "memory_mib": g.memory_mib}


def here_json(here: HereFacts, verdict: RestoreVerdict) -> dict[str, Any]:
    return {
        "restorable": verdict.ok,
        "refusals": [{"field": r.field, "checkpoint": r.checkpoint, "worker": r.worker,
                      "reason": r.reason} for r in verdict.refusals],
        "mapping": [{"saved": _gpu_json(m.saved), "target": _gpu_json(m.target)}
                    for m in verdict.mapping],
        "remap": verdict.remap,
        "warnings": list(verdict.warnings),
        "worker": {"driver_version": here.worker.driver_version,
                   "gpus": [_gpu_json(g) for g in here.worker.gpus],
                   "problems": [*(c.describe() for c in here.worker.conflicts),
                                *here.worker.problems]},
        "runsc": {"path": here.runsc_path,
                  "version": here.runsc.version if here.runsc else "",
                  "commit": here.runsc.commit if here.runsc else "",
                  "error": here.runsc_error, "remaps_gpus": here.remaps},
    }


def run_checkpoint_info(args: argparse.Namespace) -> int:
    try:
        parsed = load_record(args.directory)
    except AteomError as exc:  # not a checkpoint dir, a corrupt record: the input, not a verdict
        raise InputError(str(exc)) from None
    here = gather_here(os.environ, proc_root=args.proc_root) if args.here and parsed else None
    verdict = judge_here(parsed, here) if parsed is not None and here is not None else None
    if args.json:
        doc: dict[str, Any] = {
            "directory": args.directory,
            "record": json.loads(record_json(parsed.record)) if parsed else None,
            "ignored": list(parsed.ignored) if parsed else [],
            "here": here_json(here, verdict) if here and verdict else None,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif parsed is None:
        print(f"{args.directory}: {NO_RECORD}")
    else:
        lines = record_lines(args.directory, parsed)
        if here is not None and verdict is not None:
            lines += here_lines(here, verdict)
        print("\n".join(lines))
    return 1 if verdict is not None and not verdict.ok else 0
