"""Second validation pass: the CDI rules a JSON Schema cannot say.

Runs on a built `Spec` (the schema pass has already vouched for every type)
and reports *every* problem, each naming the spec file, the JSON path and
the rule broken, so one run of `ateom cdi validate` shows all that is wrong.

Version gates are checked against the version the spec *declares*: a field
newer than that version is an error even though ateom could read it, because
a runtime that trusts the declared version would not. Paths that should be
absolute but are not are warnings, since real generators emit them and the
reference accepts them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ateom.cdi.model import ContainerEdits, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec
from ateom.cdi.names import device_name_problem, kind_problem
from ateom.errors import SpecError

# Every released CDI spec version ateom reads, oldest first. 0.1.0 and 0.2.0
# predate the reference's own support window.
KNOWN_VERSIONS: tuple[str, ...] = (
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)
_KNOWN = {v: tuple(int(p) for p in v.split(".")) for v in KNOWN_VERSIONS}

# The six OCI hook points a spec may attach a hook to.
HOOK_NAMES = frozenset(
    {
        "prestart",
        "createRuntime",
        "createContainer",
        "startContainer",
        "poststart",
        "poststop",
    }
)
DEVICE_NODE_TYPES = frozenset({"b", "c", "u", "p", ""})
# Kubernetes' limit on an object's annotations, which CDI annotations end up
# beside on the Pod.
MAX_ANNOTATIONS_BYTES = 256 * 1024

_DNS1123_SUBDOMAIN = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)
_QUALIFIED_NAME_PART = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


@dataclass(frozen=True, slots=True)
class Findings:
    """What the semantic pass found: errors fail the spec, warnings do not."""

    errors: tuple[SpecError, ...]
    warnings: tuple[SpecError, ...]


def parse_version(declared: str) -> tuple[int, int, int] | None:
    """``"0.5.0"`` or ``"v0.5.0"`` -> (0, 5, 0); None when not a known version."""
    found = _KNOWN.get(declared[1:] if declared.startswith("v") else declared)
    return found  # type: ignore[return-value]


def annotation_key_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes annotation key, or None.

    A qualified name (``[prefix/]name``) whose case does not matter, as
    Kubernetes (and the CDI reference's unused check) lower-case the key
    first: ``Vendor.com/x`` is fine.
    """
    prefix, slash, name = key.rpartition("/")
    if slash:
        if "/" in prefix:
            return "has more than one '/'"
        if not prefix:
            return "prefix before '/' is empty"
        if len(prefix) > 253:
            return f"prefix is {len(prefix)} characters; at most 253 allowed"
        if not _DNS1123_SUBDOMAIN.fullmatch(prefix.lower()):
            return (
                f"prefix {prefix!r} is not a DNS subdomain (letters, digits, "
                "'-' and '.', starting and ending alphanumeric)"
            )
    if not name:
        return "name part is empty"
    if len(name) > 63:
        return f"name part is {len(name)} characters; at most 63 allowed"
    if not _QUALIFIED_NAME_PART.fullmatch(name):
        return (
            f"name part {name!r} must be letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


class _Checker:
    """Collects findings for one spec; the methods mirror the spec's layout."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.path = spec.path
        self.version = parse_version(spec.version)
        self.errors: list[SpecError] = []
        self.warnings: list[SpecError] = []

    def error(self, field: str, reason: str) -> None:
        self.errors.append(SpecError(self.path, reason, field))

    def warn(self, field: str, reason: str) -> None:
        self.warnings.append(SpecError(self.path, reason, field))

    def needs(self, minimum: str, field: str, what: str) -> None:
        """Error when the declared version is older than `minimum`."""
        if self.version is not None and self.version < _KNOWN[minimum]:
            self.error(
                field,
                f"{what} needs cdiVersion {minimum} or later; "
                f"the spec declares {self.spec.version}",
            )

    # -- the spec as a whole ------------------------------------------------

    def check(self) -> Findings:
        spec = self.spec
        if self.version is None:
            self.error(
                "cdiVersion",
                f"unknown CDI version {spec.version!r}; "
                f"known versions are {', '.join(KNOWN_VERSIONS)}",
            )
        self.check_kind(spec.kind)
        self.check_annotations("annotations", spec.annotations)
        self.check_edits("containerEdits", spec.container_edits)
        if not spec.devices:
            self.error("devices", "spec has no devices")
        first_index: dict[str, int] = {}
        for i, device in enumerate(spec.devices):
            where = f"devices[{i}]"
            self.check_device_name(f"{where}.name", device.name)
            if device.name in first_index:
                self.error(
                    f"{where}.name",
                    f"duplicate device name {device.name!r} "
                    f"(first defined at devices[{first_index[device.name]}])",
                )
            else:
                first_index[device.name] = i
            self.check_annotations(f"{where}.annotations", device.annotations)
            if device.container_edits.is_empty():
                # Named as the reference names it (`failed add device "dev1"`):
                # an index is hard to find in a spec of 17 devices.
                self.error(
                    f"{where}.containerEdits", f"device {go_quote(device.name)} has no edits"
                )
            else:
                self.check_edits(f"{where}.containerEdits", device.container_edits)
        return Findings(tuple(self.errors), tuple(self.warnings))

    def check_kind(self, kind: str) -> None:
        problem = kind_problem(kind)
        if problem:
            self.error("kind", problem)
            return
        device_class = kind.partition("/")[2]
        if "." in device_class:
            self.needs("0.6.0", "kind", f"a '.' in the class {device_class!r}")

    def check_device_name(self, field: str, name: str) -> None:
        problem = device_name_problem(name)
        if problem:
            self.error(field, problem)
        elif not name[0].isalpha():
            self.needs("0.5.0", field, f"a device name starting with a digit ({name!r})")

    def check_annotations(self, field: str, annotations: Mapping[str, str]) -> None:
        if not annotations:
            return
        self.needs("0.6.0", field, "annotations")
        size = 0
        for key, value in annotations.items():
            problem = annotation_key_problem(key)
            if problem:
                self.error(
                    f"{field}[{key!r}]",
                    f"annotation key {key!r} is not a Kubernetes qualified name: {problem}",
                )
            size += len(key.encode("utf-8", "surrogatepass")) + len(
                value.encode("utf-8", "surrogatepass")
            )
        if size > MAX_ANNOTATIONS_BYTES:
            self.error(
                field,
                f"annotations total {size} bytes; at most {MAX_ANNOTATIONS_BYTES} "
                "(256 KiB) allowed",
            )

    # -- container edits ----------------------------------------------------

    def check_env(self, field: str, env: tuple[str, ...]) -> None:
        for j, entry in enumerate(env):
            # "A=" (empty value) and "A=b=c" are fine; the key must be non-empty.
            if entry.find("=") <= 0:
                self.error(
                    f"{field}[{j}]", f"env entry {entry!r} must be KEY=VALUE with a non-empty KEY"
                )

    def check_edits(self, where: str, edits: ContainerEdits) -> None:
        """Every rule for one block of container edits, one edit kind at a time."""
        self.check_env(f"{where}.env", edits.env)
        for j, node in enumerate(edits.device_nodes):
            self.check_device_node(f"{where}.deviceNodes[{j}]", node)
        for j, mount in enumerate(edits.mounts):
            self.check_mount(f"{where}.mounts[{j}]", mount)
        for j, hook in enumerate(edits.hooks):
            self.check_hook(f"{where}.hooks[{j}]", hook)
        if edits.intel_rdt is not None:
            self.check_intel_rdt(f"{where}.intelRdt", edits.intel_rdt)
        if edits.additional_gids:
            self.needs("0.7.0", f"{where}.additionalGids", "additionalGids")
        if edits.net_devices:
            self.needs("1.1.0", f"{where}.netDevices", "netDevices")
        self.check_net_devices(where, edits.net_devices)

    def check_device_node(self, f: str, node: DeviceNode) -> None:
        if not node.path:
            self.error(f"{f}.path", "device node path is empty")
        elif not node.path.startswith("/"):
            self.warn(f"{f}.path", f"device node path {node.path!r} is not absolute")
        if node.host_path:
            self.needs("0.5.0", f"{f}.hostPath", "a device node hostPath")
        if node.type is not None and node.type not in DEVICE_NODE_TYPES:
            self.error(
                f"{f}.type",
                f"device node type {node.type!r} is not one of 'b', 'c', 'u', 'p' or empty",
            )
        # SPEC.md: "'none' requests empty permissions" (the reference's
        # NoPermissions, container-edits.go: DeviceNode.Validate).
        perms = node.permissions
        if perms and perms != "none" and set(perms) - set("rwm"):
            self.error(
                f"{f}.permissions",
                f"permissions {perms[:200]!r} must be a combination of 'r', 'w', 'm', "
                "or 'none'",
            )

    def check_mount(self, f: str, mount: Mount) -> None:
        if not mount.host_path:
            self.error(f"{f}.hostPath", "mount hostPath is empty")
        if not mount.container_path:
            self.error(f"{f}.containerPath", "mount containerPath is empty")
        elif not mount.container_path.startswith("/"):
            self.warn(
                f"{f}.containerPath",
                f"mount containerPath {mount.container_path!r} is not absolute",
            )
        if mount.type:
            self.needs("0.4.0", f"{f}.type", "a mount type")

    def check_hook(self, f: str, hook: Hook) -> None:
        if hook.hook_name not in HOOK_NAMES:
            self.error(
                f"{f}.hookName",
                f"hook name {hook.hook_name!r} is not one of " + ", ".join(sorted(HOOK_NAMES)),
            )
        if not hook.path:
            self.error(f"{f}.path", "hook path is empty")
        elif not hook.path.startswith("/"):
            self.warn(f"{f}.path", f"hook path {hook.path!r} is not absolute")
        self.check_env(f"{f}.env", hook.env)
        # The OCI runtime spec: "If set, timeout MUST be greater than zero."
        if hook.timeout is not None and hook.timeout <= 0:
            self.error(f"{f}.timeout", f"hook timeout {hook.timeout} must be greater than zero")

    def check_intel_rdt(self, f: str, rdt: IntelRdt) -> None:
        self.needs("0.7.0", f, "intelRdt")
        self.check_clos_id(f"{f}.closID", rdt.clos_id or "")
        # version.go: requiresV110 asks Schemata != nil: present, even empty.
        if rdt.schemata is not None:
            self.needs("1.1.0", f"{f}.schemata", "intelRdt schemata")
        if rdt.enable_monitoring:
            self.needs("1.1.0", f"{f}.enableMonitoring", "intelRdt enableMonitoring")

    def check_net_devices(self, where: str, net_devices: Sequence[NetDevice]) -> None:
        hosts: dict[str, int] = {}
        names: dict[str, int] = {}
        for j, net in enumerate(net_devices):
            f = f"{where}.netDevices[{j}]"
            if not net.host_interface_name:
                self.error(f"{f}.hostInterfaceName", "net device hostInterfaceName is empty")
            elif net.host_interface_name in hosts:
                self.error(
                    f"{f}.hostInterfaceName",
                    f"duplicate hostInterfaceName {net.host_interface_name!r} "
                    f"(also netDevices[{hosts[net.host_interface_name]}])",
                )
            else:
                hosts[net.host_interface_name] = j
            if not net.name:
                self.error(f"{f}.name", "net device name is empty")
            elif net.name in names:
                self.error(
                    f"{f}.name",
                    f"duplicate net device name {net.name!r} (also netDevices[{names[net.name]}])",
                )
            else:
                names[net.name] = j

    def check_clos_id(self, field: str, clos: str) -> None:
        # closID names a resctrl directory: one path component, bounded in
        # bytes as Go's len() counts; "/" is the root CLOS (the reference's
        # IntelRdt.Validate, after the OCI runtime-spec allowed it).
        if clos == "/":
            return
        size = len(clos.encode("utf-8", "surrogatepass"))
        if size >= 4096 or clos in (".", "..") or "/" in clos or "\n" in clos:
            self.error(
                field,
                f"closID {clos[:64]!r} must be a single directory name (not '.', '..', "
                "no '/' or newline, under 4096 bytes) or '/' (the root CLOS)",
            )


def go_quote(text: str) -> str:
    """`text` double-quoted as Go's %q would (JSON escapes, one line),
    at most 200 characters of it."""
    return json.dumps(text[:200]) + ("..." if len(text) > 200 else "")


def check_spec(spec: Spec) -> Findings:
    """Every semantic problem (errors) and oddity (warnings) in `spec`; pure."""
    return _Checker(spec).check()
