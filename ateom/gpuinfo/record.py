"""The checkpoint compatibility record: what a GPU checkpoint must carry to be
restored safely, its JSON form, and a strict parser (pure, but for
`write_record`/`read_record` at the end).

A GPU checkpoint holds device memory saved by cuda-checkpoint through one
driver onto specific GPUs, and a sandbox image written by one runsc build. A
restore elsewhere is safe only on the same driver version, the same GPU model
(PCI vendor/device id), at least as many GPUs and the same runsc build
(`ateom.gpuinfo.compat` judges that). The record is written next to the
checkpoint image as `RECORD_FILE`, durably (it travels with the image).

Versioning rule (``format_version`` is ``MAJOR.MINOR``):

- a record whose MAJOR differs from this ateom's `FORMAT_MAJOR` is refused,
  naming both format versions and the ateom that wrote it: a newer major
  changed a field's meaning, and guessing could restore GPU state onto
  hardware it does not fit; an older major has no reader here;
- within the same major, a higher MINOR may add fields: unknown fields are
  ignored and reported (`ParsedRecord.ignored`) so the caller can log them,
  and every field this version knows must be present with its type.

Every failure is a `RecordError` (FAILED_PRECONDITION): the file, the JSON
path of the field, the reason, and at most ~200 characters of the value.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ateom import __version__ as ATEOM_VERSION
from ateom.cdi.model import Resolution
from ateom.errors import AteomError, ErrorCode, quote
from ateom.gpuinfo.inventory import GpuFacts
from ateom.safefs import (
    commit_staged_at,
    discard_staged_at,
    open_dir,
    read_file,
    stage_at,
    write_atomic,
)

RECORD_FILE = "ateom-compat.json"
FORMAT_MAJOR = 1
FORMAT_MINOR = 1  # 1.1: snapshot_uri (1.0 records have none: read as "")
FORMAT_VERSION = f"{FORMAT_MAJOR}.{FORMAT_MINOR}"
MAX_RECORD_BYTES = 1 << 20  # a record is a few KiB; anything bigger is not one

_FORMAT_RE = re.compile(r"^(\d+)\.(\d+)$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_PCI_RE = re.compile(r"^0x[0-9a-f]{4}$")
# git describe of a non-release build: release-20240422.0-45-gabcdef123456
_DESCRIBE_RE = re.compile(r"-g([0-9a-f]{7,40})(?:-dirty)?$")


class RecordError(AteomError):
    """A compatibility record is unreadable, malformed or from another format major."""

    code = ErrorCode.FAILED_PRECONDITION

    def __init__(self, path: str, reason: str, field: str = "") -> None:
        self.path = path
        self.field = field
        self.reason = reason
        super().__init__(f"{path}: {field}: {reason}" if field else f"{path}: {reason}")


@dataclass(frozen=True, slots=True)
class RunscBuild:
    """A runsc binary's identity, from ``runsc --version``."""

    version: str  # "release-20260706.0"
    commit: str = ""  # git commit when the version string names one, else ""

    def __str__(self) -> str:
        return f"{self.version} ({self.commit})" if self.commit else self.version

    @classmethod
    def of_version(cls, version: str) -> RunscBuild:
        """The build a version string (as `runsc --version` prints it) names (pure)."""
        commit = _DESCRIBE_RE.search(version)
        return cls(version, commit.group(1) if commit else "")


def parse_runsc_version(text: str) -> RunscBuild:
    """``runsc --version`` output -> RunscBuild (pure).

    Release builds print ``runsc version release-20260706.0``: the tag is the
    build. Other builds print ``git describe`` output whose ``-g<hash>`` suffix
    is the commit; Debian prints its package version and no commit.
    """
    m = re.search(r"runsc version\s+(\S+)", text)
    if not m:
        raise AteomError(f"runsc --version: no 'runsc version <v>' in {quote(text)}",
                         code=ErrorCode.FAILED_PRECONDITION)
    return RunscBuild.of_version(m.group(1))


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """The CDI devices one container had, and the digest of their resolved edits."""

    name: str
    cdi_devices: tuple[str, ...]
    edits_digest: str  # "sha256:<hex>" from `edits_digest`


@dataclass(frozen=True, slots=True)
class CompatRecord:
    format_version: str
    ateom_version: str
    runsc: RunscBuild
    driver_version: str
    nvproxy_capabilities: str  # as passed to runsc; "" when left to runsc
    gpus: tuple[GpuFacts, ...]  # every fact known (see `gpu_facts_complete`), by index
    containers: tuple[ContainerDevices, ...]  # by name
    # The snapshot's name in object storage, as the Checkpoint named it ("" when none):
    # recorded, never fetched (the node agent moves the files).
    snapshot_uri: str = ""


@dataclass(frozen=True, slots=True)
class ParsedRecord:
    record: CompatRecord
    ignored: tuple[str, ...] = ()  # JSON paths of unknown fields (a newer minor's)


def canonical_json(value: Any) -> bytes:
    """The one byte form of a JSON value: sorted keys, no spaces, UTF-8 (pure)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def resolution_edits(resolution: Resolution) -> list[dict[str, Any]]:
    """What `edits_digest` is taken over for a container: each resolved step's
    origin and edits, in order (pure). The spec file path is left out: the same
    edits read from /etc/cdi on one worker and from a generated spec on another
    are the same injection."""
    return [{"origin": step.origin, "edits": asdict(step.edits)} for step in resolution.steps]


def edits_digest(value: Resolution | Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of `value` (of `resolution_edits`
    for a Resolution), so two workers' injections compare by one string (pure)."""
    data = resolution_edits(value) if isinstance(value, Resolution) else value
    return "sha256:" + hashlib.sha256(canonical_json(data)).hexdigest()


def gpu_facts_complete(gpu: GpuFacts) -> str:
    """Why `gpu` cannot go into a record ("" when it can): a restore compares
    every fact, so none may be unknown (pure)."""
    missing = [name for name, value in (("minor", gpu.minor), ("PCI ids", gpu.model),
                                        ("memory", gpu.memory_mib)) if value is None]
    return f"GPU {gpu.index} ({gpu.pci_bus_id}): {', '.join(missing)} unknown" if missing else ""


def _gpu_json(g: GpuFacts) -> dict[str, Any]:
    assert g.model is not None  # guaranteed by build_record / parse_record
    return {"index": g.index, "minor": g.minor, "uuid": g.uuid, "name": g.name,
            "pci_bus_id": g.pci_bus_id, "pci_vendor_id": f"0x{g.model[0]:04x}",
            "pci_device_id": f"0x{g.model[1]:04x}", "memory_mib": g.memory_mib}


def record_json(record: CompatRecord) -> bytes:
    """The record as it is stored: deterministic, indented JSON + newline (pure)."""
    doc = {
        "format_version": record.format_version,
        "ateom_version": record.ateom_version,
        "runsc": {"version": record.runsc.version, "commit": record.runsc.commit},
        "driver_version": record.driver_version,
        "nvproxy_capabilities": record.nvproxy_capabilities,
        "gpus": [_gpu_json(g) for g in record.gpus],
        "containers": [{"name": c.name, "cdi_devices": list(c.cdi_devices),
                        "edits_digest": c.edits_digest} for c in record.containers],
        "snapshot_uri": record.snapshot_uri,
    }
    return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"


def build_record(*, runsc: RunscBuild, driver_version: str, gpus: Sequence[GpuFacts],
                 containers: Sequence[ContainerDevices],
                 nvproxy_capabilities: str = "", snapshot_uri: str = "") -> CompatRecord:
    """A record for a checkpoint of an actor holding `gpus` (pure).

    Raises AteomError FAILED_PRECONDITION when a fact a restore compares is
    unknown (no driver version; a GPU without minor, PCI ids or memory because
    nvidia-smi failed): a record that cannot be checked would be refused by
    every restore, so the checkpoint is refused now, with the reason.
    """
    problems = [p for p in map(gpu_facts_complete, gpus) if p]
    if not driver_version:
        problems.insert(0, "driver version unknown")
    if problems:
        raise AteomError("cannot write a GPU checkpoint's compatibility record: "
                         + "; ".join(problems), code=ErrorCode.FAILED_PRECONDITION)
    names = [c.name for c in containers]
    if len(set(names)) != len(names):
        raise AteomError(f"container names repeat: {names}", code=ErrorCode.INVALID_ARGUMENT)
    return CompatRecord(FORMAT_VERSION, ATEOM_VERSION, runsc, driver_version,
                        nvproxy_capabilities, tuple(sorted(gpus, key=lambda g: g.index)),
                        tuple(sorted(containers, key=lambda c: c.name)), snapshot_uri)


# --- strict parsing ---------------------------------------------------------------------

T = TypeVar("T")


class _Reader:
    """Walks the decoded JSON, collecting unknown fields; raises RecordError."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.ignored: list[str] = []

    def fail(self, field: str, reason: str) -> RecordError:
        return RecordError(self.path, reason, field)

    def obj(self, value: Any, field: str, known: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(field, f"must be an object, not {_kind(value)}")
        self.ignored += [f"{field}.{k}" if field else k for k in value if k not in known]
        for k in known:
            if k not in value:
                raise self.fail(f"{field}.{k}" if field else k, "missing")
        return value

    def typed(self, value: Any, field: str, kind: type[T], check: Callable[[T], bool] = bool,
              rule: str = "") -> T:
        # bool is an int to Python, never to a record.
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise self.fail(field, f"must be {kind.__name__}, not {_kind(value)} "
                                   f"{quote(json.dumps(value))}")
        if rule and not check(value):
            raise self.fail(field, f"{rule}, not {quote(json.dumps(value))}")
        return value

    def string(self, value: Any, field: str, pattern: re.Pattern[str] | None = None,
               rule: str = "") -> str:
        # fullmatch: "$" would let a trailing newline through.
        return self.typed(value, field, str, (lambda s: bool(pattern.fullmatch(s))) if pattern
                          else (lambda s: True), rule)

    def array(self, value: Any, field: str) -> list[Any]:
        return self.typed(value, field, list)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def _format(r: _Reader, doc: dict[str, Any]) -> int:
    """The format gate, before any other field: another major may mean anything.
    Returns the record's minor (which fields it must have)."""
    if "format_version" not in doc:
        raise r.fail("format_version", "missing")
    fmt = r.string(doc["format_version"], "format_version", _FORMAT_RE, "must be MAJOR.MINOR")
    major = int(fmt.split(".")[0])
    if major != FORMAT_MAJOR:
        writer = doc.get("ateom_version")
        by = f"ateom {writer}" if isinstance(writer, str) else "an unknown ateom"
        newer = "restore it with that ateom or a newer one" if major > FORMAT_MAJOR else \
            "no reader for that format is left"
        raise r.fail("format_version", f"record format {quote(fmt)} written by {by}; this "
                                       f"ateom {ATEOM_VERSION} reads format {FORMAT_MAJOR}.x "
                                       f"only: {newer}")
    return int(fmt.split(".")[1])


_GPU_KEYS = ("index", "minor", "uuid", "name", "pci_bus_id", "pci_vendor_id", "pci_device_id",
             "memory_mib")
_NONNEG = "must be >= 0"


def _gpu(r: _Reader, value: Any, field: str) -> GpuFacts:
    g = r.obj(value, field, _GPU_KEYS)
    num = {k: r.typed(g[k], f"{field}.{k}", int, lambda n: n >= 0, _NONNEG)
           for k in ("index", "minor", "memory_mib")}
    pci = {k: int(r.string(g[k], f"{field}.{k}", _PCI_RE, "must be 0x and 4 lower-case hex "
                           "digits"), 16) for k in ("pci_vendor_id", "pci_device_id")}
    return GpuFacts(
        index=num["index"], minor=num["minor"],
        uuid=r.string(g["uuid"], f"{field}.uuid", _UUID_RE, "must be GPU-<8-4-4-4-12 hex>"),
        name=r.string(g["name"], f"{field}.name"),
        pci_bus_id=r.string(g["pci_bus_id"], f"{field}.pci_bus_id"),
        pci_vendor_id=pci["pci_vendor_id"], pci_device_id=pci["pci_device_id"],
        memory_mib=num["memory_mib"])


def _container(r: _Reader, value: Any, field: str) -> ContainerDevices:
    c = r.obj(value, field, ("name", "cdi_devices", "edits_digest"))
    devices = tuple(r.string(d, f"{field}.cdi_devices[{i}]")
                    for i, d in enumerate(r.array(c["cdi_devices"], f"{field}.cdi_devices")))
    return ContainerDevices(
        name=r.string(c["name"], f"{field}.name", re.compile(r".+", re.DOTALL),
                      "must not be empty"),
        cdi_devices=devices,
        edits_digest=r.string(c["edits_digest"], f"{field}.edits_digest", _DIGEST_RE,
                              "must be sha256:<64 hex>"))


def _unique(r: _Reader, field: str, keys: list[Any], what: str) -> None:
    seen = set()
    for i, k in enumerate(keys):
        if k in seen:
            raise r.fail(f"{field}[{i}]", f"{what} {quote(str(k))} appears twice")
        seen.add(k)


_TOP = ("format_version", "ateom_version", "runsc", "driver_version", "nvproxy_capabilities",
        "gpus", "containers")


def parse_record(data: bytes, *, path: str = RECORD_FILE) -> ParsedRecord:
    """The record in `data` (the file's bytes; pure). Raises RecordError."""
    r = _Reader(path)
    if len(data) > MAX_RECORD_BYTES:
        raise r.fail("", f"{len(data)} bytes: larger than any record ({MAX_RECORD_BYTES})")
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise r.fail("", f"not UTF-8 (corrupt): {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise r.fail("", f"not valid JSON (truncated or corrupt): {exc.msg} at line "
                         f"{exc.lineno} column {exc.colno}") from None
    if not isinstance(doc, dict):
        raise r.fail("", f"must be a JSON object, not {_kind(doc)}")
    minor = _format(r, doc)
    top = r.obj(doc, "", (*_TOP, "snapshot_uri") if minor >= 1 else _TOP)
    rs = r.obj(top["runsc"], "runsc", ("version", "commit"))
    gpus = [_gpu(r, g, f"gpus[{i}]") for i, g in enumerate(r.array(top["gpus"], "gpus"))]
    containers = [_container(r, c, f"containers[{i}]")
                  for i, c in enumerate(r.array(top["containers"], "containers"))]
    for key, what in (("index", "index"), ("minor", "minor"), ("uuid", "uuid")):
        _unique(r, "gpus", [getattr(g, key) for g in gpus], f"GPU {what}")
    _unique(r, "containers", [c.name for c in containers], "container name")
    record = CompatRecord(
        format_version=top["format_version"],
        ateom_version=r.string(top["ateom_version"], "ateom_version"),
        runsc=RunscBuild(r.string(rs["version"], "runsc.version", re.compile(r"^\S+$"),
                                  "must be one non-empty word"),
                         r.string(rs["commit"], "runsc.commit")),
        driver_version=r.string(top["driver_version"], "driver_version",
                                re.compile(r"^\d+\.\d+(\.\d+)?$"), "must be N.N[.N]"),
        nvproxy_capabilities=r.string(top["nvproxy_capabilities"], "nvproxy_capabilities"),
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        containers=tuple(sorted(containers, key=lambda c: c.name)),
        snapshot_uri=r.string(top["snapshot_uri"], "snapshot_uri") if minor >= 1 else "")
    return ParsedRecord(record, tuple(r.ignored))


# --- the file (I/O) -----------------------------------------------------------------------


def write_record(directory: str, record: CompatRecord, *, beneath: str) -> str:
    """Write `record` as `directory`/RECORD_FILE, durably and atomically, never
    through a symlink below `beneath` (writes a file). Returns its path."""
    path = os.path.join(directory, RECORD_FILE)
    write_atomic(path, record_json(record), beneath=beneath, mode=0o644, durable=True)
    return path


def stage_record(directory: str, record: CompatRecord, *, beneath: str) -> str:
    """`write_record` in two halves: the record durably in a hidden file in
    `directory` (its name returned), not yet in place (writes a file)."""
    with open_dir(directory, beneath=beneath) as fd:
        return stage_at(fd, RECORD_FILE, record_json(record), mode=0o644, durable=True)


def commit_record(directory: str, staged: str, *, beneath: str) -> str:
    """Put a `stage_record` file in place as RECORD_FILE, durably; its path."""
    with open_dir(directory, beneath=beneath) as fd:
        commit_staged_at(fd, staged, RECORD_FILE, durable=True)
    return os.path.join(directory, RECORD_FILE)


def discard_record(directory: str, staged: str, *, beneath: str) -> None:
    """Remove a `stage_record` file that is not to be committed."""
    try:
        with open_dir(directory, beneath=beneath) as fd:
            discard_staged_at(fd, staged)
    except FileNotFoundError:
        pass  # the directory went with it


def read_record(directory: str, *, beneath: str) -> ParsedRecord:
    """Read and parse `directory`/RECORD_FILE (reads a file, no symlinks below
    `beneath`). Raises RecordError, also when the file is missing."""
    path = os.path.join(directory, RECORD_FILE)
    try:
        data, _ = read_file(path, beneath=beneath)
    except FileNotFoundError:
        raise RecordError(path, "missing: this checkpoint has no compatibility record, so "
                                "no GPU restore can be checked") from None
    except OSError as exc:
        raise RecordError(path, f"unreadable: {exc.strerror or exc}") from None
    return parse_record(data, path=path)
