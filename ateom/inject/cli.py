"""``ateom inject``: apply CDI devices to a bundle, exactly as the daemon would.

Defaults are the daemon's gVisor/NVIDIA profile (`gvisor_nvidia_options`); each
flag given replaces that part of the profile.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

import structlog

from ateom.inject.injector import inject_devices
from ateom.inject.options import gvisor_nvidia_options


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "inject",
        help="inject CDI devices into an OCI bundle's config.json and rootfs",
        description=(
            "Merge the CDI edits of the named devices into BUNDLE/config.json and stage "
            "the driver libraries' SONAME symlinks in its rootfs. Defaults are the "
            "daemon's gVisor/NVIDIA profile (ATEOM_NVIDIA_TOOLKIT_DIR, "
            "ATEOM_NVIDIA_DRIVER_ROOT), whose hooks and library dir apply to nvidia.com "
            "devices only; each option given replaces that part of it, and --allow-hook, "
            "--hook-binary or --library-dir make a profile of your own, for every vendor."
        ),
    )
    parser.add_argument("--bundle", required=True, metavar="DIR", help="the OCI bundle")
    parser.add_argument("--device", required=True, action="extend", nargs="+",
                        metavar="NAME", help="qualified CDI device name(s), vendor.com/class=name")
    parser.add_argument("--spec-dir", action="append", metavar="DIR",
                        help="CDI spec directory, lowest priority first "
                             "(default: $ATEOM_CDI_SPEC_DIRS or /etc/cdi /var/run/cdi)")
    parser.add_argument("--allow-hook", action="append", metavar="SUBCMD",
                        help="createContainer hook subcommand to keep "
                             "(default: create-symlinks, enable-cuda-compat)")
    parser.add_argument("--hook-binary", metavar="PATH",
                        help="trusted binary kept hooks run from "
                             "(default: nvidia-cdi-hook[.real] in the toolkit dir)")
    parser.add_argument("--library-dir", action="append", metavar="DIR",
                        help="container dir to prepend to LD_LIBRARY_PATH "
                             "(default: <driver root>/lib64, for nvidia.com devices)")
    parser.add_argument("--drop-env", action="append", metavar="KEY",
                        help="env key to remove (default: NVIDIA_VISIBLE_DEVICES)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print a unified diff of config.json and the symlinks to "
                             "stage; write nothing")
    parser.add_argument("--json", action="store_true",
                        help="print {bundle, config_changed, links, dropped_hooks} (and, with "
                             "--dry-run, the diff) as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ateom.cdi.registry import Registry, default_spec_dirs

    if not structlog.is_configured():
        # Logs (dropped hooks, skipped libraries) go to stderr: stdout is the diff.
        # (sys.stderr looked up per logger, so a replaced stream is honoured).
        structlog.configure(logger_factory=lambda *_: structlog.PrintLogger(sys.stderr))

    options = gvisor_nvidia_options()
    if (args.allow_hook, args.hook_binary, args.library_dir) != (None, None, None):
        options = dataclasses.replace(options, vendor="")  # the user's profile, every vendor's
    if args.allow_hook is not None:
        options = dataclasses.replace(options, allowed_hooks=frozenset(args.allow_hook))
    if args.hook_binary is not None:
        options = dataclasses.replace(options, hook_binary=args.hook_binary)
    if args.library_dir is not None:
        options = dataclasses.replace(options, library_dirs=tuple(args.library_dir))
    if args.drop_env is not None:
        options = dataclasses.replace(options, drop_env=tuple(args.drop_env))

    registry = Registry.load(args.spec_dir or default_spec_dirs())
    resolution = registry.resolve(args.device)
    plan = inject_devices(args.bundle, resolution, options, dry_run=args.dry_run)
    if args.json:
        doc: dict[str, Any] = {
            "bundle": plan.bundle_dir,
            "devices": list(resolution.devices),
            "config_changed": plan.config_changed,
            "written": not args.dry_run,
            "links": [{"path": s.path, "target": s.target, "library": s.library}
                      for s in plan.symlinks],
            "dropped_hooks": [{"origin": h.origin, "spec": h.spec_path, "hook": h.hook_name,
                               "path": h.path, "reason": h.reason} for h in plan.dropped_hooks],
        }
        if args.dry_run:
            doc["diff"] = plan.diff()
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif args.dry_run:
        sys.stdout.write(plan.diff())
    else:
        state = "updated" if plan.config_after != plan.config_before else "unchanged"
        print(f"{plan.bundle_dir}: config.json {state}, "
              f"{len(plan.symlinks)} SONAME link(s) staged, "
              f"{len(plan.dropped_hooks)} hook(s) dropped")
    return 0
