"""The pure member rules: exact times, snapshot names, what a member restores as."""

from __future__ import annotations

import os
import tarfile

import pytest

from ateom.errors import AteomError, ErrorCode
from ateom.volumes.archive import (
    MemberKind,
    member_info,
    member_meta,
    ns_text,
    parse_ns,
    snapshot_name,
)


@pytest.mark.parametrize("ns,text", [
    (1_600_000_000_123_456_789, "1600000000.123456789"),
    (0, "0.000000000"),
    (-1_500_000_000, "-1.500000000"),
    (-1, "-0.000000001"),
])
def test_times_are_written_and_read_to_the_nanosecond(ns: int, text: str) -> None:
    assert ns_text(ns) == text
    assert parse_ns(text) == ns


def test_pax_times_from_other_writers_are_read() -> None:
    assert parse_ns("1.5") == 1_500_000_000
    assert parse_ns("7") == 7_000_000_000
    assert parse_ns("1.1234567891234") == 1_123_456_789
    assert parse_ns("1e9") is None and parse_ns("") is None and parse_ns("1.") is None


def test_a_snapshot_is_named_after_its_volume() -> None:
    assert snapshot_name("data") == "durable-data.tar"
    with pytest.raises(AteomError) as info:
        snapshot_name("../etc")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_a_member_restores_without_setuid_and_with_its_exact_mtime() -> None:
    # st_mode, ino, dev, nlink, uid, gid, size, 3 int times, 3 float times,
    # then atime_ns, mtime_ns, ctime_ns.
    st = os.stat_result((0o104755, 0, 0, 1, 7, 8, 5, 0, 0, 0, 0.0, 0.0, 0.0, 0,
                         1_600_000_000_987_654_321, 0))
    info = member_info("bin/tool", MemberKind.FILE, st)
    assert info.type == tarfile.REGTYPE and info.mode == 0o4755 and info.size == 5
    assert (info.uid, info.gid) == (7, 8)
    meta = member_meta(info)
    assert meta.mode == 0o755 and meta.mtime_ns == 1_600_000_000_987_654_321


def test_a_member_without_a_pax_time_uses_its_seconds() -> None:
    info = tarfile.TarInfo("f")
    info.mtime = 1234
    assert member_meta(info).mtime_ns == 1234 * 10**9
