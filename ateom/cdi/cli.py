"""``ateom cdi``: one verb per question about CDI specs.

    ateom cdi validate PATH...                 are these spec files valid?
    ateom cdi devices [--spec-dir DIR]... [--json]   which devices can I ask for?
    ateom cdi resolve [--spec-dir DIR]... NAME...    what would these devices do?

Problems and warnings go to stderr as ``PATH: ...`` lines; answers go to
stdout. Exit 1 means "not valid" or "not resolvable".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from ateom.cdi.edits import resolution_to_json
from ateom.cdi.registry import Registry, default_spec_dirs
from ateom.cdi.spec_file import format_for_path, load_spec, spec_problems
from ateom.errors import AteomError, ErrorCode, SpecError


def register(subparsers: Any) -> None:
    cdi = subparsers.add_parser(
        "cdi",
        help="read, validate and resolve CDI device specs",
        description="Read, validate and resolve CDI (Container Device Interface) specs.",
    )
    verbs = cdi.add_subparsers(dest="cdi_command", metavar="VERB", required=True)

    validate = verbs.add_parser(
        "validate",
        help="validate spec files or directories",
        description="Validate CDI spec files; directories are searched recursively for "
        ".json, .yaml and .yml files. Exit 1 if any is invalid.",
    )
    validate.add_argument("paths", nargs="+", metavar="PATH")
    validate.add_argument("--json", action="store_true",
                          help="print {ok, files: [{path, valid, kind, cdiVersion, devices | "
                          "problems}], warnings} as JSON")
    validate.set_defaults(func=cmd_validate)

    spec_dir_help = (
        "a CDI spec directory (repeatable; later ones override earlier). Default: "
        "$ATEOM_CDI_SPEC_DIRS (colon-separated) or /etc/cdi and /var/run/cdi"
    )
    devices = verbs.add_parser(
        "devices",
        help="list every resolvable qualified device name",
        description="List every resolvable qualified device name, sorted. Exit 1 if a"
        " --spec-dir given is not a directory, or if any spec could not be read (the"
        " devices of those that could are listed).",
    )
    devices.add_argument("--spec-dir", action="append", metavar="DIR", help=spec_dir_help)
    devices.add_argument(
        "--json",
        action="store_true",
        help="machine output: each device's source file and priority, conflicts, spec errors",
    )
    devices.set_defaults(func=cmd_devices)

    resolve = verbs.add_parser(
        "resolve",
        help="print the container edits the named devices resolve to, as JSON",
        description="Resolve qualified device names (vendor/class=name) and print the "
        "merged container edits and each step, as JSON. Exit 1 if any name is unresolvable.",
    )
    resolve.add_argument("--spec-dir", action="append", metavar="DIR", help=spec_dir_help)
    resolve.add_argument("names", nargs="+", metavar="NAME")
    resolve.add_argument("--json", action="store_true",
                         help="JSON errors too (the result is JSON either way)")
    resolve.set_defaults(func=cmd_resolve)


# -- validate ------------------------------------------------------------------


def spec_files_under(path: str) -> list[str]:
    """Spec files at `path`: itself if a file, else every spec file below it,
    sorted (lists directories)."""
    if not os.path.isdir(path):
        return [path]
    found: list[str] = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        found.extend(
            os.path.join(root, f)
            for f in sorted(files)
            if format_for_path(f) is not None
        )
    return found


def cmd_validate(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    # One entry per path or file: {"path", "valid", and the spec's facts or its problems}.
    results: list[dict[str, object]] = []
    warnings: list[str] = []

    def problem(path: str, *lines: str) -> None:
        results.append({"path": path, "valid": False, "problems": list(lines)})
        if not args.json:
            for line in lines:
                print(line, file=err)

    def warn(line: str) -> None:
        warnings.append(line)
        if not args.json:
            print(line, file=err)

    # directory -> qualified device name -> files defining it, to warn about
    # devices that would be unresolvable in that directory (same-directory duplicates).
    offered: dict[str, dict[str, list[str]]] = {}
    for path in args.paths:
        if not os.path.exists(path):
            problem(path, f"{path}: no such file or directory")
            continue
        files = spec_files_under(path)
        if not files:
            problem(path, f"{path}: no CDI spec files (.json, .yaml, .yml) found")
        for file in files:
            try:
                loaded = load_spec(file)
            except SpecError as exc:
                problem(file, *(str(p) for p in spec_problems(exc)))
                continue
            for warning in loaded.warnings:
                warn(str(warning))
            spec = loaded.spec
            by_name = offered.setdefault(os.path.dirname(os.path.abspath(file)), {})
            for device in spec.devices:
                files_for = by_name.setdefault(f"{spec.kind}={device.name}", [])
                if file not in files_for:
                    files_for.append(file)
            results.append({"path": file, "valid": True, "kind": spec.kind,
                            "cdiVersion": spec.version, "devices": len(spec.devices)})
            if not args.json:
                print(f"{file}: valid (kind {spec.kind}, cdiVersion {spec.version}, "
                      f"{len(spec.devices)} devices)", file=out)
    for by_name in offered.values():
        for name, files_for in sorted(by_name.items()):
            if len(files_for) > 1:
                warn(f"{files_for[-1]}: warning: device {name} is also defined by "
                     f"{' and '.join(files_for[:-1])} in the same directory; "
                     "as a spec directory, neither would resolve")
    ok = all(r["valid"] for r in results)
    if args.json:
        json.dump({"ok": ok, "files": results, "warnings": warnings}, out, indent=2)
        out.write("\n")
    return 0 if ok else 1


# -- devices / resolve ---------------------------------------------------------


def _registry(args: argparse.Namespace) -> Registry:
    """The specs in the dirs given (each must be a directory: a typo is not an
    empty dir), else in the default dirs (which may be absent)."""
    for directory in args.spec_dir or ():
        if not os.path.isdir(directory):
            why = "not a directory" if os.path.lexists(directory) else "no such directory"
            raise AteomError(f"--spec-dir {directory}: {why}",
                             code=ErrorCode.FAILED_PRECONDITION)
    return Registry.load(args.spec_dir or default_spec_dirs())


def _report_registry_problems(registry: Registry, err: TextIO) -> None:
    for error in registry.spec_errors.values():
        for problem in spec_problems(error):
            print(str(problem), file=err)
    for name, files in registry.conflicts.items():
        print(
            f"{name}: unresolvable, defined in the same directory by {' and '.join(files)}",
            file=err,
        )
    for warning in registry.warnings:
        print(warning, file=err)


def cmd_devices(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    registry = _registry(args)
    _report_registry_problems(registry, err)
    if args.json:
        doc = {
            "specDirs": list(registry.spec_dirs),
            "devices": [
                {
                    "name": d.qualified_name,
                    "kind": d.spec.kind,
                    "device": d.device.name,
                    "specPath": d.spec_path,
                    "priority": d.priority,
                }
                for d in registry.devices()
            ],
            "conflicts": {name: list(files) for name, files in registry.conflicts.items()},
            "specErrors": {
                path: [str(p) for p in spec_problems(e)] for path, e in registry.spec_errors.items()
            },
            "warnings": list(registry.warnings),
        }
        json.dump(doc, out, indent=2)
        out.write("\n")
    else:
        for device in registry.devices():
            print(device.qualified_name, file=out)
    # The devices that could be read are listed; a spec that could not is a failure.
    return 1 if registry.spec_errors else 0


def cmd_resolve(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    registry = _registry(args)
    resolution = registry.resolve(args.names)  # ResolutionError: one line, exit 1 (ateom.cli)
    json.dump(resolution_to_json(resolution), out, indent=2)
    out.write("\n")
    return 0
