"""Reading a shared library's DT_SONAME, and a cache of what was read.

The loader finds ``libcuda.so.1``, not ``libcuda.so.580.65.06``: the driver
mounts carry versioned file names, and the link named by the SONAME is what
``ldconfig`` (the update-ldcache hook) would have made. Reading ELF is the
injector's most expensive step, and the same driver files are injected into
every actor's bundle, so reads are cached by file identity.
"""

from __future__ import annotations

import os
import stat
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import BinaryIO

from elftools.common.exceptions import ELFError
from elftools.construct.core import ConstructError
from elftools.elf.elffile import ELFFile
from elftools.elf.structs import ELFStructs


@dataclass(frozen=True, slots=True)
class SonameRead:
    """The outcome of reading one library: its SONAME, or why there is none to use.

    `soname` is None with `error` None for a valid library without DT_SONAME;
    `error` says why the file could not be read as ELF.
    """

    soname: str | None
    error: str | None = None


def read_soname(path: str) -> SonameRead:
    """Read `path`'s DT_SONAME with pyelftools' ELF structures (reads the file).

    Reads only what the loader reads: the ELF header, the program headers,
    the PT_DYNAMIC entries and one string of the dynamic string table (found
    through DT_STRTAB and the PT_LOAD segments). pyelftools' `ELFFile` would
    also build its structure parsers anew per file and wrap every segment and
    section, several times slower; the parsers are cached here per ELF flavour
    instead.
    (`read_soname_elffile` is the plain `ELFFile` reading, kept as the
    reference the tests compare against.)

    Never raises for a bad file: a missing, non-ELF or truncated library gives
    a `SonameRead` with `error` set, because one odd file must not cost the
    whole GPU (the caller skips its link and logs why).
    """
    try:
        # O_NONBLOCK: a FIFO planted as a "library" must not hang the caller
        # (the daemon, on an actor's cold start) in open(); fstat then refuses
        # anything that is not a regular file before a byte is read.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                os.close(fd)
                return SonameRead(soname=None, error=_not_regular(mode))
            f = os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        with f:
            return _read_dynamic_soname(f)
    except _READ_ERRORS as e:
        return SonameRead(soname=None, error=f"{type(e).__name__}: {e}")


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages ("a FIFO", "a directory", ...)."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a file"


def _not_regular(mode: int) -> str:
    return f"not a regular file ({file_kind(mode)})"


def read_soname_elffile(path: str) -> SonameRead:
    """`read_soname` through pyelftools' full `ELFFile` API (slower; the reference)."""
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            # PT_DYNAMIC is what the loader reads; section headers may be
            # stripped from a shipped library, program headers cannot be.
            for segment in elf.iter_segments():
                if segment["p_type"] == "PT_DYNAMIC":
                    for tag in segment.iter_tags("DT_SONAME"):  # type: ignore[attr-defined]
                        return SonameRead(soname=str(tag.soname))
                    return SonameRead(soname=None)
            return SonameRead(soname=None, error=_NO_DYNAMIC)
    except _READ_ERRORS as e:
        return SonameRead(soname=None, error=f"{type(e).__name__}: {e}")


_READ_ERRORS = (ELFError, ConstructError, OSError, ValueError, struct.error,
                UnicodeDecodeError, AttributeError, KeyError)
_NO_DYNAMIC = "no PT_DYNAMIC segment: not a shared library"
_MAX_SONAME = 4096

_structs_cache: dict[tuple[object, ...], ELFStructs] = {}
_structs_lock = threading.Lock()


def _structs(key: tuple[object, ...]) -> ELFStructs:
    """pyelftools' parsers for one ELF flavour, built once (that is the slow part)."""
    with _structs_lock:
        found = _structs_cache.get(key)
    if found is not None:
        return found
    built = ELFStructs(little_endian=bool(key[0]), elfclass=int(str(key[1])))
    built.create_basic_structs()
    if len(key) > 2:
        built.create_advanced_structs(*(str(k) for k in key[2:]))
    with _structs_lock:
        return _structs_cache.setdefault(key, built)


def _read_dynamic_soname(f: BinaryIO) -> SonameRead:
    ident = f.read(6)
    if ident[:4] != b"\x7fELF":
        raise ELFError("Magic number does not match")
    elfclass = {1: 32, 2: 64}.get(ident[4])
    little = {1: True, 2: False}.get(ident[5])
    if elfclass is None or little is None:
        raise ELFError(f"invalid EI_CLASS/EI_DATA {ident[4:6]!r}")
    f.seek(0)
    header = _structs((little, elfclass)).Elf_Ehdr.parse_stream(f)
    structs = _structs((little, elfclass, header.e_type, header.e_machine,
                        header.e_ident.EI_OSABI))
    loads = []
    dynamic = None
    for i in range(header.e_phnum):
        f.seek(header.e_phoff + i * header.e_phentsize)
        ph = structs.Elf_Phdr.parse_stream(f)
        if ph.p_type == "PT_LOAD":
            loads.append((ph.p_vaddr, ph.p_filesz, ph.p_offset))
        elif ph.p_type == "PT_DYNAMIC" and dynamic is None:
            dynamic = (ph.p_offset, ph.p_filesz)
    if dynamic is None:
        return SonameRead(soname=None, error=_NO_DYNAMIC)
    entry_size = structs.Elf_Dyn.sizeof()
    f.seek(dynamic[0])
    soname_index = strtab = None
    for _ in range(dynamic[1] // entry_size):
        entry = structs.Elf_Dyn.parse_stream(f)
        tag = entry.d_tag
        if tag == "DT_NULL":
            break
        # The first of each counts, as for pyelftools' iter_tags; once both
        # are known the rest of the table (often half of it) is not parsed.
        if tag == "DT_SONAME" and soname_index is None:
            soname_index = entry.d_val
        elif tag == "DT_STRTAB" and strtab is None:
            strtab = entry.d_val
        if soname_index is not None and strtab is not None:
            break
    if soname_index is None:
        return SonameRead(soname=None)
    if strtab is None:
        raise ELFError("DT_SONAME without DT_STRTAB")
    for vaddr, filesz, offset in loads:
        if vaddr <= strtab < vaddr + filesz:
            f.seek(offset + strtab - vaddr + soname_index)
            raw = f.read(_MAX_SONAME)
            end = raw.find(b"\0")
            if end < 0:
                raise ELFError("unterminated DT_SONAME string")
            return SonameRead(soname=raw[:end].decode("utf-8"))
    raise ELFError(f"DT_STRTAB {strtab:#x} is in no PT_LOAD segment")


FileKey = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns


class SonameCache:
    """Thread-safe, bounded cache of `read_soname` keyed by file identity.

    The key is (st_dev, st_ino, size, mtime_ns): a driver upgrade that
    replaces a file in place changes it, so a stale SONAME is never served.
    Failures are cached too: a file that did not parse will not parse until
    it changes.
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self._entries: OrderedDict[FileKey, SonameRead] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries
        self.hits = 0
        self.misses = 0

    def lookup(self, path: str) -> SonameRead:
        """The SONAME of `path` (stats it; reads it on a miss)."""
        try:
            st = os.stat(path)
        except OSError as e:
            return SonameRead(soname=None, error=f"{type(e).__name__}: {e.strerror}")
        except ValueError as e:  # a NUL in the path: not a file at all
            return SonameRead(soname=None, error=f"{type(e).__name__}: {e}")
        if not stat.S_ISREG(st.st_mode):
            return SonameRead(soname=None, error=_not_regular(st.st_mode))
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self.hits += 1
                return found
        result = read_soname(path)
        with self._lock:
            self.misses += 1
            self._entries[key] = result
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return result

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


# The process-wide cache the daemon and CLI share by default.
DEFAULT_SONAME_CACHE = SonameCache()


@dataclass(frozen=True, slots=True)
class SonameLink:
    """A link to stage in the rootfs: `directory`/`name` -> `target` (relative).

    `directory` is a container path; `library` the host file the SONAME came from.
    """

    directory: str
    name: str
    target: str
    library: str

    @property
    def path(self) -> str:
        return f"{self.directory.rstrip('/')}/{self.name}"


@dataclass(frozen=True, slots=True)
class SkippedLibrary:
    """A library whose SONAME link is not staged, and why (logged by the shell)."""

    library: str
    destination: str
    reason: str


def is_library_destination(destination: str, mount_type: str) -> bool:
    """True for a bind mount whose basename looks versioned (``libfoo.so.1.2``)."""
    return mount_type in ("bind", "rbind") and ".so." in destination.rpartition("/")[2]


NAME_MAX = 255  # bytes in one file name (Linux); a longer SONAME cannot be a link's name


def bare_file_name(name: str) -> bool:
    """True when `name` can only mean a file in the same directory."""
    return bool(name) and "/" not in name and "\0" not in name and name not in (".", "..")


def plan_soname_links(
    mounts: tuple[tuple[str, str, str], ...],
    sonames: dict[str, SonameRead],
) -> tuple[list[SonameLink], list[SkippedLibrary]]:
    """The SONAME links the library `mounts` need, and the libraries skipped. Pure.

    `mounts` are (destination, source, type); `sonames` maps each library
    source to what was read from it. A library without DT_SONAME, or whose
    SONAME is its own name, needs no link. One that could not be read, or
    whose SONAME is not a bare file name (``../../x.so.1``, ``a/b.so.1``), is
    skipped: one odd file must not cost the whole GPU. A link that would
    shadow a mount destination, or that an earlier library already claims,
    is skipped too.
    """
    destinations = {d for d, _, _ in mounts}
    links: list[SonameLink] = []
    claimed: dict[str, str] = {}
    skipped: list[SkippedLibrary] = []
    for destination, source, mount_type in mounts:
        read = sonames.get(source)
        if read is None or not is_library_destination(destination, mount_type):
            continue
        if read.error is not None:
            skipped.append(SkippedLibrary(source, destination, f"unreadable ELF: {read.error}"))
            continue
        directory, _, basename = destination.rpartition("/")
        soname = read.soname
        if soname is None or soname == basename:
            continue
        why = _unusable_link_name(soname)
        if why is not None:
            skipped.append(SkippedLibrary(source, destination, why))
            continue
        path = f"{directory}/{soname}"  # SonameLink.path, without building the link first
        if path in destinations:
            skipped.append(SkippedLibrary(
                source, destination, f"SONAME link {path} would shadow a mount"))
            continue
        if path in claimed:
            skipped.append(SkippedLibrary(
                source, destination, f"SONAME link {path} already points at {claimed[path]}"))
            continue
        claimed[path] = basename
        links.append(SonameLink(directory or "/", soname, basename, source))
    return links, skipped


def _unusable_link_name(soname: str) -> str | None:
    """Why `soname` cannot name a link beside its library, or None when it can."""
    if not bare_file_name(soname):
        return f"SONAME {soname!r} is not a bare file name"
    # A character is at most 4 bytes in UTF-8: only a long name needs encoding.
    if len(soname) * 4 > NAME_MAX and len(encoded := os.fsencode(soname)) > NAME_MAX:
        return (f"SONAME is {len(encoded)} bytes, longer than a file name can be "
                f"({NAME_MAX})")
    return None
