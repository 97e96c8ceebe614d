"""runsc probing and the argv of every runsc call."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateom.errors import AteomError, ErrorCode
from ateom.process.reaper import Reaper
from ateom.runsc import commands as argv
from ateom.runsc.probe import (
    RunscInfo,
    parse_drivers,
    parse_flags,
    parse_version,
    probe_runsc,
)

# -- runsc probe + argv -----------------------------------------------------------

FLAGS_TEXT = """  -alsologtostderr
    \tsend log messages to stderr.
  -nvproxy
    \tEXPERIMENTAL: enable support for Nvidia GPUs.
  -nvproxy-driver-version string
    \tNVIDIA driver ABI version to use.
  -allow-connected-on-save
    \tallow checkpointing with connected sockets.
"""


def test_probe_parsing() -> None:
    assert parse_flags(FLAGS_TEXT) == {"alsologtostderr", "nvproxy", "nvproxy-driver-version",
                                       "allow-connected-on-save"}
    assert parse_version("runsc version release-20240513.0\nspec: 1.1.0") == "release-20240513.0"
    info = RunscInfo("/r", "v", parse_flags(FLAGS_TEXT),
                     (("restore", frozenset({"background", "detach"})),))
    assert info.supports_nvproxy and info.supports("--nvproxy")
    assert info.supports("restore:background") and not info.supports("create:background")
    assert not info.restore_needs_create


def test_probe_judges_the_binary_on_its_version_answer_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A binary that is not runsc (or hangs and times out) costs one probe
    # command, not six: each would wait out its own timeout.
    fake = tmp_path / "not-runsc"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    calls: list[list[str]] = []

    def runner(cmd):  # type: ignore[no-untyped-def]
        calls.append(list(cmd))
        return -9, ""  # what a timed-out child reports

    with pytest.raises(AteomError) as err:
        probe_runsc(str(fake), runner)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "did not answer like runsc (exit -9)" in str(err.value)
    assert calls == [[str(fake), "--version"]]


DEBIAN = RunscInfo("/usr/bin/runsc", "0.0~20221219.0", frozenset({"root", "log"}),
                   (("restore", frozenset({"bundle", "detach", "image-path", "pid-file"})),))
NEWER = RunscInfo("/opt/runsc", "release-2025", frozenset({"nvproxy", "allow-connected-on-save"}),
                  (("restore", frozenset({"background", "direct", "detach"})),
                   ("checkpoint", frozenset({"direct", "compression",
                                             "exclude-committed-zero-pages"}))))


def _target(info: RunscInfo, *, gpu: bool = False, **nv: str) -> argv.RunscTarget:
    return argv.RunscTarget(info, "/run/ateom/actors/a", ("--network=none",),
                            argv.NvproxyOptions(**nv), gpu=gpu)


BASE = ["-log-format", "json", "--alsologtostderr", "-root", "/run/ateom/actors/a"]


@pytest.mark.parametrize("gpu", [False, True])
def test_argv_of_every_runsc_call(gpu: bool) -> None:
    # A GPU sandbox's nvproxy flags go on every call, not only the root's create and
    # restore: runsc reads a sub-container's NVIDIA devices by its flags of that call.
    t = _target(NEWER, gpu=gpu, driver_version="550.1", capabilities="compute,utility")
    nv = (["--nvproxy", "--nvproxy-driver-version=550.1",
           "--nvproxy-allowed-driver-capabilities=compute,utility"] if gpu else [])
    path = ["/opt/runsc"]
    head = [*path, *BASE, "--network=none", *nv]
    assert argv.create_argv(t, "_pause", "/b/_pause", "/p", log_file="/l") == [
        *path, *BASE, "-log", "/l", "--network=none", *nv,
        "create", "-bundle", "/b/_pause", "-pid-file", "/p", "_pause"]
    assert argv.create_argv(t, "app", "/b/app", "/p", log_file=None) == [
        *head, "create", "-bundle", "/b/app", "-pid-file", "/p", "app"]
    assert argv.restore_argv(t, "_pause", "/b", "/img", "/p", log_file=None) == [
        *head, "restore", "-bundle", "/b", "-image-path", "/img",
        "-pid-file", "/p", "-background", "-detach", "_pause"]
    assert argv.start_argv(t, "app") == [*head, "start", "app"]
    # The options the turn benchmark chose: zero pages left out; not -direct, not
    # -compression, though this runsc has both.
    assert argv.checkpoint_argv(t, "_pause", "/img") == [
        *head, "-allow-connected-on-save", "checkpoint", "-exclude-committed-zero-pages",
        "-image-path", "/img", "_pause"]
    assert argv.kill_argv(t, "app", "TERM") == [*head, "kill", "app", "TERM"]
    assert argv.state_argv(t, "app") == [*head, "state", "app"]
    assert argv.delete_argv(t, "app") == [*head, "delete", "-force", "app"]
    assert argv.list_argv(t) == [*head, "list", "-quiet"]
    assert argv.events_stats_argv(t, "_pause") == [*head, "events", "--stats", "_pause"]


def test_runsc_starts_with_room_for_its_sandboxs_stdio_fds(tmp_path: Path) -> None:
    # runsc boot moves the sandbox's stdio to fds 253-258: a table that has to
    # grow for them once the sandbox runs threads costs an RCU grace period.
    fake = tmp_path / "runsc"
    fake.write_text("#!/bin/sh\ngrep FDSize /proc/self/status\n")
    fake.chmod(0o755)
    info = RunscInfo(str(fake), "release-2025", frozenset(), ())
    runsc = argv.Runsc(argv.RunscTarget(info, str(tmp_path / "root")), Reaper(),
                       str(tmp_path / "logs"), timeout=30)
    runsc.create("c", "/b", "/p")
    runsc.restore("c", "/b", "/img", "/p")
    sizes = [int(line.split()[1]) for line in Path(runsc.stdio_log("c")).read_text().splitlines()]
    assert sizes == [argv.FD_TABLE] * 2 and argv.FD_TABLE >= 259


def test_debian_runsc_gets_no_optional_flags() -> None:
    t = _target(DEBIAN)
    assert "-background" not in argv.restore_argv(t, "a", "/b", "/i", "/p", log_file=None)
    assert argv.checkpoint_argv(t, "a", "/i")[-4:] == ["checkpoint", "-image-path", "/i", "a"]
    # nvproxy options are passed only when the operator set them.
    assert argv.nvproxy_flags(t) == ["--nvproxy"]


def test_read_tail_is_bounded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "x.log"
    log.write_text("old\n")
    offset = log.stat().st_size
    log.write_text("old\n" + "y" * 5000 + "\nthe reason\n")
    tail = argv.read_tail(str(log), offset)
    assert tail.endswith("the reason\n") and len(tail) == 2048 and "old" not in tail
    assert argv.read_tail(str(log), log.stat().st_size) == ""


def test_failure_reason_is_runsc_message_without_the_stack() -> None:
    log = (
        'I1129 main.go:217] Args: [runsc restore]\n'
        '{"msg":"restoring container \\"_pause\\": no server FD available\\ngoroutine 11 [running]:'
        '\\nmain.x()","level":"warning"}\n'
        "W1129 util.go:64] FATAL ERROR: later text\n"
    )
    assert argv.failure_reason(log) == "later text"
    assert argv.failure_reason(log.rsplit("W1129", 1)[0]) == (
        'restoring container "_pause": no server FD available')
    assert argv.failure_reason("nothing useful") == ""
    err = argv.RunscError("start", "app", 1, "tail", "the reason")
    assert str(err).splitlines()[0] == "runsc start app failed (exit 1): the reason"


def test_sandbox_root_ids_are_per_actor_and_fit_an_abstract_socket_name() -> None:
    assert argv.sandbox_root_id("a1", "_pause") == "a1_pause"
    assert argv.sandbox_root_id("a1", "pause") == "a1_pause"
    long_a, long_b = "x" * 127 + "a", "x" * 127 + "b"
    ida, idb = argv.sandbox_root_id(long_a, "_pause"), argv.sandbox_root_id(long_b, "_pause")
    assert ida != idb and len(ida) <= 64 and ida.endswith("_pause")
    assert len(("runsc-sandbox." + ida).encode()) < 108


def test_supported_drivers_are_read_oldest_first() -> None:
    # 0.0~20240729 prints its list in no order.
    out = "550.54.15\n535.161.07\n550.90.07\n525.60.13\nnot a version\n550.54.15\n"
    assert parse_drivers(out) == ("525.60.13", "535.161.07", "550.54.15", "550.90.07")


def test_the_probe_lists_the_drivers_of_a_runsc_with_nvproxy(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def runner(cmd):  # type: ignore[no-untyped-def]
        seen.append(list(cmd))
        if cmd[1] == "--version":
            return 0, "runsc version 0.0~20240729.0\nspec: 1.0.2-dev\n"
        if cmd[1] == "flags":
            return 0, "  -nvproxy\n    \tenable nvproxy\n  -root string\n    \troot dir\n"
        if cmd[1:] == ["nvproxy", "list-supported-drivers"]:
            return 0, "550.90.07\n535.104.05\n"
        return 0, ""

    fake = tmp_path / "runsc-drivers"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    info = probe_runsc(str(fake), runner)
    assert info.supported_drivers == ("535.104.05", "550.90.07")
    assert [str(fake), "nvproxy", "list-supported-drivers"] in seen
