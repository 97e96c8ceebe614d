"""What a durable-dir snapshot file holds, member by member (pure: `tarfile`
headers built and judged, nothing read or written).

A volume's data travels as ``durable-<volume_name>.tar``, an uncompressed
POSIX (pax) tar of files, directories and symlinks, named relative to the
volume's directory, each parent before what is in it. On restore the tar is
untrusted: an actor wrote what went into it and it passed through object
storage. So `check_member` holds every member to what `ateom.volumes.durable`
writes: a relative, normalized name with no ``..``; a parent that is a
directory the tar itself made earlier (never a symlink it made, never a
file); a file, a directory or a symlink and nothing else (no hard links,
devices, FIFOs, sparse files); one member per name; sane ownership and times.
"""

from __future__ import annotations

import enum
import os
import re
import stat
import tarfile
from dataclasses import dataclass

from ateom.errors import AteomError, ErrorCode, quote
from ateom.volumes.mounts import check_volume_name

SNAPSHOT_PREFIX = "durable-"
SNAPSHOT_SUFFIX = ".tar"
_NAME_MAX = 255  # bytes in one path component (Linux)
_PATH_MAX = 4096
_NS = 10**9
# utimensat takes a 64-bit time_t; far beyond any real clock, still refused
# here rather than failing halfway through an extraction.
_MAX_SECONDS = 2**62 // _NS
_MAX_ID = 2**32 - 2  # (uid_t)-1 means "leave unchanged" to chown
_PAX_TIME = re.compile(r"(-?)([0-9]{1,20})(?:\.([0-9]{1,30}))?")


class MemberKind(enum.Enum):
    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"


@dataclass(frozen=True, slots=True)
class Meta:
    """What a restored entry gets besides its contents. `mode` never carries
    setuid or setgid: an actor's file must not come back as a way to root."""

    mode: int
    uid: int
    gid: int
    mtime_ns: int


def snapshot_name(volume_name: str) -> str:
    """The snapshot file of a durable-dir volume: ``durable-<volume_name>.tar``."""
    check_volume_name("volume_name", volume_name)
    return f"{SNAPSHOT_PREFIX}{volume_name}{SNAPSHOT_SUFFIX}"


def ns_text(ns: int) -> str:
    """A time in nanoseconds as pax writes it, exactly: ``1700000000.000000001``.

    tarfile would write a float, which loses the last digits; gVisor may
    compare a restored file's mtime with the one it saved, to the nanosecond.
    """
    sign = "-" if ns < 0 else ""
    seconds, fraction = divmod(abs(ns), _NS)
    return f"{sign}{seconds}.{fraction:09d}"


def parse_ns(text: str) -> int | None:
    """`ns_text`'s inverse (any number of fraction digits; None if malformed)."""
    match = _PAX_TIME.fullmatch(text)
    if match is None:
        return None
    sign, seconds, fraction = match.groups()
    ns = int(seconds) * _NS + int((fraction or "")[:9].ljust(9, "0"))
    return -ns if sign else ns


def member_info(rel: str, kind: MemberKind, st: os.stat_result, *,
                linkname: str = "") -> tarfile.TarInfo:
    """The header of entry `rel` from its stat (for a file: the fstat of the very
    fd its bytes are read from)."""
    info = tarfile.TarInfo(rel)
    info.type = {MemberKind.FILE: tarfile.REGTYPE, MemberKind.DIRECTORY: tarfile.DIRTYPE,
                 MemberKind.SYMLINK: tarfile.SYMTYPE}[kind]
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""  # no user database lookups: ids are what counts
    info.size = st.st_size if kind is MemberKind.FILE else 0
    info.linkname = linkname
    info.mtime = max(st.st_mtime_ns // _NS, 0)
    info.pax_headers = {"mtime": ns_text(st.st_mtime_ns)}
    return info


def member_meta(info: tarfile.TarInfo) -> Meta:
    """The mode (setuid/setgid dropped), owner and mtime to restore (pure)."""
    mtime = parse_ns(info.pax_headers.get("mtime", ""))
    if mtime is None:
        mtime = int(info.mtime) * _NS
    return Meta(mode=info.mode & 0o1777, uid=info.uid, gid=info.gid, mtime_ns=mtime)


def _bad(where: str, info: tarfile.TarInfo, reason: str) -> AteomError:
    return AteomError(f"{where}: member {quote(info.name)}: {reason}",
                      code=ErrorCode.INVALID_ARGUMENT)


def _check_name(where: str, info: tarfile.TarInfo) -> None:
    name = info.name
    if not name or "\0" in name:
        raise _bad(where, info, "an empty name or a NUL character")
    if name.startswith("/"):
        raise _bad(where, info, "an absolute name (members are relative to the volume)")
    parts = name.split("/")
    if ".." in parts or os.path.normpath(name) != name or name == ".":
        raise _bad(where, info, "not a normalized relative name (no '.', '..', '//')")
    encoded = [os.fsencode(p) for p in parts]
    if any(len(p) > _NAME_MAX for p in encoded) or len(os.fsencode(name)) >= _PATH_MAX:
        raise _bad(where, info, "a name too long for the filesystem")


def _kind(where: str, info: tarfile.TarInfo) -> MemberKind:
    if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE) and info.sparse is None:
        return MemberKind.FILE
    if info.type == tarfile.DIRTYPE:
        return MemberKind.DIRECTORY
    if info.type == tarfile.SYMTYPE:
        link = info.linkname
        if not link or "\0" in link or len(os.fsencode(link)) >= _PATH_MAX:
            raise _bad(where, info, f"symlink target {quote(link)} is empty or malformed")
        return MemberKind.SYMLINK
    what = {tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a character device",
            tarfile.BLKTYPE: "a block device", tarfile.FIFOTYPE: "a FIFO"}.get(
        info.type, f"a member of type {quote(info.type.decode('latin-1'))}")
    if info.sparse is not None:
        what = "a sparse file"
    raise _bad(where, info, f"{what}; a durable-dir snapshot holds only files,"
                            " directories and symlinks")


def _check_meta(where: str, info: tarfile.TarInfo) -> None:
    if not (0 <= info.uid <= _MAX_ID and 0 <= info.gid <= _MAX_ID):
        raise _bad(where, info, f"owner {info.uid}:{info.gid} out of range")
    raw = info.pax_headers.get("mtime")
    if raw is not None and parse_ns(raw) is None:
        raise _bad(where, info, f"mtime {quote(raw)} is not a number")
    if abs(member_meta(info).mtime_ns) // _NS > _MAX_SECONDS:
        raise _bad(where, info, "mtime out of range")


def check_member(where: str, info: tarfile.TarInfo, seen: set[str],
                 directories: set[str]) -> MemberKind:
    """What `info` may become in the volume, or INVALID_ARGUMENT naming the tar
    (`where`) and the member. `seen` and `directories` carry the names and
    the directories of the members before it, and are updated."""
    _check_name(where, info)
    kind = _kind(where, info)
    _check_meta(where, info)
    if info.name in seen:
        raise _bad(where, info, "named twice in the archive")
    parent = os.path.dirname(info.name)
    if parent and parent not in directories:
        # The rule that keeps extraction inside the volume: a member can only
        # go into a directory this tar made (a symlink it made, "link ->
        # /tmp" then "link/file", never leads anywhere).
        raise _bad(where, info, f"its parent {quote(parent)} is not a directory made"
                                " earlier in the archive")
    seen.add(info.name)
    if kind is MemberKind.DIRECTORY:
        directories.add(info.name)
    return kind
