"""The hardening issue's filesystem items, end to end through `ateom serve` on real
runsc (root only), and its log item:

- item 1: symlinks planted at predictable temp names beside a bundle's
  config.json lead nowhere (`test_planted_temp_symlinks_are_never_followed`);
- item 2: a rootfs or a writable bind mount that resolves outside what the
  actor owns, and a bundle linked out of --actors-root, are refused with
  INVALID_ARGUMENT naming the field before runsc runs
  (`test_unconfined_bundle_is_refused_before_runsc_runs`), while the same
  shapes kept inside are run (`test_confined_links_and_binds_still_run`);
- item 7: container logs rotated at --log-max-bytes and removed
  --log-retention after the actor is gone
  (`test_logs_are_capped_while_running_and_removed_after_terminate`); and
  what happens when an actor's log dir goes while it is hosted.

Crash and concurrency items: test_e2e_hardening.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from ateom._proto import ateom_pb2 as pb
from ateom.daemon.lifecycle.config import DaemonConfig
from ateom.daemon.sandbox.teardown import kill_sandbox_processes
from tests.daemon.conftest import needs_runsc
from tests.support import build_busybox_bundle
from tests.support.daemon import (
    DEFAULT_RELEASE,
    Daemon,
    DaemonWorld,
    dev_null_ok,
    run_request,
    runsc_processes,
    wait_for,
)

F = TypeVar("F", bound=Callable[..., Any])


def e2e(test: F) -> F:
    """Root, runsc, gcc and busybox (marked per test: the docs test needs none)."""
    marked: F = needs_runsc(pytest.mark.root(pytest.mark.runtime(test)))
    return marked
NONE = pb.DeviceRequest(policy=pb.DEVICE_POLICY_NONE)
REPO = Path(__file__).resolve().parents[2]


def tree(root: Path) -> dict[str, str]:
    """Every entry below `root` (and root itself), links not followed: file digests,
    link targets, "dir"."""
    out: dict[str, str] = {}
    if not os.path.lexists(root):
        return out
    paths = [root]
    for top, dirs, files in os.walk(root):
        paths += [Path(top, name) for name in [*dirs, *files]]
    for p in paths:
        if p.is_symlink():
            out[str(p)] = "-> " + os.readlink(p)
        elif p.is_dir():
            out[str(p)] = "dir"
        else:
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def edit_config(bundle: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    path = bundle / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config, indent=4) + "\n")


def add_mount(source: str, options: list[str]) -> Callable[[dict[str, Any]], None]:
    def edit(config: dict[str, Any]) -> None:
        config["mounts"].append({"destination": "/host", "type": "bind", "source": source,
                                 "options": options})
    return edit


def set_root_path(path: str) -> Callable[[dict[str, Any]], None]:
    def edit(config: dict[str, Any]) -> None:
        config["root"]["path"] = path
    return edit


def relink(path: Path, target: Path | str) -> None:
    """Replace `path` (a dir or file) with a symlink to `target`."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    path.symlink_to(target)


# -- item 2: confinement ----------------------------------------------------------


def bind_through_link(bundles: Path, actor_root: Path, outside: Path) -> None:
    """A writable bind of a path inside the actor's root that is a link to `outside`."""
    (actor_root / "data").symlink_to(outside)
    edit_config(bundles / "app", add_mount(str(actor_root / "data"), ["bind", "rw"]))


# case: (what the node agent's bundles get wrong, the field the refusal must name).
# `outside` is a directory of the test's, beside --actors-root; `uid` the actor's.
Setup = Callable[[Path, Path, Path], None]  # (bundles, actor root, outside)
MOUNTS_SOURCE = "mounts[3].source"  # after the base bundle's proc, dev, sys
CASES: dict[str, tuple[Setup, str]] = {
    "rootfs links outside": (
        lambda b, r, o: relink(b / "_pause" / "rootfs", o), "root.path"),
    "rootfs links to /etc": (
        lambda b, r, o: relink(b / "_pause" / "rootfs", "/etc"), "root.path"),
    "app rootfs links outside": (
        lambda b, r, o: relink(b / "app" / "rootfs", o), "root.path"),
    "root.path absolute": (
        lambda b, r, o: edit_config(b / "_pause", set_root_path(str(o))), "root.path"),
    "root.path /": (
        lambda b, r, o: edit_config(b / "_pause", set_root_path("/")), "root.path"),
    "root.path ..": (
        lambda b, r, o: edit_config(b / "app", set_root_path(
            os.path.relpath(o, b / "app"))), "root.path"),
    "writable bind of /": (
        lambda b, r, o: edit_config(b / "app", add_mount("/", ["rbind", "rw"])), MOUNTS_SOURCE),
    "writable bind outside": (
        lambda b, r, o: edit_config(b / "_pause", add_mount(str(o), ["rbind"])), MOUNTS_SOURCE),
    "writable bind linked outside": (bind_through_link, MOUNTS_SOURCE),
    "bundle linked outside": (
        lambda b, r, o: relink(b / "app", o / "bundle"), "container 'app': bundle"),
    "bundle dir linked outside": (
        lambda b, r, o: relink(b, o), "actor_dirs.oci_bundle_dir"),
    "config.json linked outside": (
        lambda b, r, o: relink(b / "app" / "config.json", o / "bundle" / "config.json"),
        "config.json"),
}


def actor_for(case: str) -> str:
    return "conf-" + re.sub(r"[^a-z0-9]+", "-", case.lower()).strip("-")


@e2e
@pytest.mark.parametrize("case", sorted(CASES))
def test_unconfined_bundle_is_refused_before_runsc_runs(
        world: DaemonWorld, daemon: Daemon, clean: None, case: str) -> None:
    setup, field = CASES[case]
    uid = actor_for(case)
    bundles = world.bundles(uid, {"app": ["sleep", "1000"]})
    # Outside: what runsc (as root) would write into or hand the workload. It holds
    # a whole bundle, so a rootfs or bundle led there would run.
    outside = world.base / f"outside-{uid}"
    build_busybox_bundle(outside / "bundle", ["sleep", "1000"])
    shutil.copytree(outside / "bundle" / "rootfs", outside, dirs_exist_ok=True)
    for sub in ("dev", "proc", "sys", "tmp"):  # runsc makes these in a rootfs
        shutil.rmtree(outside / sub, ignore_errors=True)
        shutil.rmtree(outside / "bundle" / "rootfs" / sub, ignore_errors=True)
    setup(bundles, world.actors_root / uid, outside)
    before, outside_before = tree(world.actors_root), tree(outside)
    etc_before = {p.name for p in Path("/etc").iterdir()}

    with pytest.raises(grpc.RpcError) as err:
        daemon.stub.RunWorkload(run_request(world, uid, [pb.Container(name="app", devices=NONE)]),
                                timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert field in err.value.details()

    # Nothing was written anywhere, runsc never ran, nothing is hosted.
    assert tree(outside) == outside_before
    assert {p.name for p in Path("/etc").iterdir()} == etc_before
    assert tree(world.actors_root) == before
    assert not [c for c in daemon.emulator().calls()
                if c.command == "create" and any(uid in a for a in c.argv)]
    assert not (daemon.run_dir / "actors" / uid).exists()
    assert not (daemon.run_dir / "bundles" / uid).exists()
    assert not daemon.inspect.GetStatus(pb.GetStatusRequest()).actors


@e2e
def test_confined_links_and_binds_still_run(
        world: DaemonWorld, daemon: Daemon, clean: None) -> None:
    """The shapes refused above, kept inside what the actor owns, are run: a rootfs
    linked to a directory of its own bundle, a writable bind of a directory of
    the actor's (here reached through a link inside it), a read-only bind from
    outside. Without this the refusals could be a blanket "no"."""
    uid = "conf-inside"
    root = world.actors_root / uid
    outside = world.base / "outside-ro"
    outside.mkdir(exist_ok=True)
    (outside / "greeting").write_text("read-only from outside\n")
    (root / "data").mkdir(parents=True, exist_ok=True)
    if not (root / "data-link").is_symlink():
        (root / "data-link").symlink_to(root / "data")
    script = "cat /ro/greeting > /data/out; echo written >> /data/out; sleep 1000"
    bundles = world.bundles(uid, {"app": ["sh", "-c", script]})
    os.rename(bundles / "_pause" / "rootfs", bundles / "_pause" / "image")
    (bundles / "_pause" / "rootfs").symlink_to("image")
    edit_config(bundles / "app", lambda c: c["mounts"].extend([
        {"destination": "/data", "type": "bind", "source": str(root / "data-link"),
         "options": ["rbind", "rw"]},
        {"destination": "/ro", "type": "bind", "source": str(outside), "options": ["rbind", "ro"]},
    ]))
    daemon.stub.RunWorkload(run_request(world, uid, [pb.Container(name="app", devices=NONE)]),
                            timeout=120)
    try:
        written = wait_for(root / "data" / "out", "written", timeout=60)
        assert written == "read-only from outside\nwritten\n"
    finally:
        daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)


# -- item 1: temp files never follow symlinks -----------------------------------

# Names a writer might use beside config.json: the issue's, and the usual ones.
PLANTED = ("config.json.ateom-tmp", ".config.json.ateom-tmp", "config.json.tmp",
           ".config.json.tmp", "config.json~", ".config.json.swp")


@e2e
def test_planted_temp_symlinks_are_never_followed(world: DaemonWorld, daemon: Daemon,
                                                  clean: None) -> None:
    """A symlink to a victim file at every predictable temp name in each bundle, and
    in ateom's own bundle dirs: Run (which writes ateom's config.json) and Terminate
    succeed, the victim is untouched, the node agent's config.json stays a regular
    file with its own bytes throughout."""
    uid = "planted"
    bundles = world.bundles(uid, {"app": ["sleep", "1000"]})
    victim = world.base / "victim"
    victim.write_text("root-owned file the node agent cannot write\n")
    victim.chmod(0o600)
    victim_stat = victim.stat()
    written = {}
    for name in ("_pause", "app"):
        written[name] = (bundles / name / "config.json").read_bytes()
        for planted in PLANTED:
            (bundles / name / planted).unlink(missing_ok=True)
            (bundles / name / planted).symlink_to(victim)

    own = daemon.run_dir / "bundles" / uid
    for name in ("_pause", "app"):  # where ateom's own copy will be written, too
        (own / name).mkdir(parents=True, exist_ok=True)
        for planted in PLANTED:
            (own / name / planted).unlink(missing_ok=True)
            (own / name / planted).symlink_to(victim)

    daemon.stub.RunWorkload(run_request(world, uid, [pb.Container(name="app", devices=NONE)]),
                            timeout=120)
    for name in ("_pause", "app"):
        config = bundles / name / "config.json"
        assert not config.is_symlink() and config.read_bytes() == written[name]
        assert daemon.own_config(uid, name)["annotations"]  # ateom's version went in
    daemon.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)

    assert victim.read_text() == "root-owned file the node agent cannot write\n"
    after = victim.stat()
    assert (after.st_mode, after.st_uid, after.st_size, after.st_mtime_ns) == (
        victim_stat.st_mode, victim_stat.st_uid, victim_stat.st_size, victim_stat.st_mtime_ns)
    for name in ("_pause", "app"):
        config = bundles / name / "config.json"
        assert not config.is_symlink() and config.read_bytes() == written[name]
        # Nothing planted was replaced or followed, and no temp file was left.
        for planted in PLANTED:
            assert os.readlink(bundles / name / planted) == str(victim)
        assert not [p.name for p in (bundles / name).iterdir() if ".ateom-" in p.name
                    and p.name not in PLANTED]


# -- item 7: bounded logs -------------------------------------------------------

LOG_MAX = 8192
RETENTION = 2.0
LINE = "y" * 190  # ~200 bytes a line, 20 lines a second: ~4 KiB/s


@pytest.fixture
def log_world(tmp_path: Path) -> Iterator[DaemonWorld]:
    w = DaemonWorld(tmp_path)
    try:
        yield w
    finally:  # a failed test's sandboxes, SIGKILLed by pid
        for root in (w.run_dir / "actors").glob("*"):
            kill_sandbox_processes(str(root))
    assert dev_null_ok(), "/dev/null lost root:root 0666"


def last_line_number(text: str) -> int:
    numbers = [int(m) for m in re.findall(r"^line (\d+) ", text, re.MULTILINE)]
    return numbers[-1] if numbers else 0


@e2e
def test_logs_are_capped_while_running_and_removed_after_terminate(log_world: DaemonWorld) -> None:
    """--log-max-bytes 8192 --log-retention 2: a chatty actor's log stays near the cap
    (one rotated `.1` of half the cap beside it) while it writes several times
    the cap; its log dir goes within a bounded wait once it is terminated; a
    quiet actor's logs stay while it is hosted, however long it is idle."""
    world = log_world
    d = Daemon(world, str(world.runsc(DEFAULT_RELEASE).path), release=DEFAULT_RELEASE,
               log_max_bytes=str(LOG_MAX), log_retention=str(RETENTION))
    try:
        chatty = "logs-chatty"
        world.bundles(chatty, {}, pause_args=[
            "sh", "-c", f'i=0; while true; do i=$((i+1)); echo "line $i {LINE}"; sleep 0.05; done'])
        logs = d.run_dir / "logs" / chatty
        log = logs / "_pause.log"
        d.stub.RunWorkload(run_request(world, chatty, []), timeout=120)
        sizes = []
        deadline = time.monotonic() + 120
        while True:  # until it has written 6x the cap (each line says how many)
            sizes.append(log.stat().st_size if log.exists() else 0)
            written = last_line_number(log.read_text(errors="replace")) * (len(LINE) + 10)
            if written > 6 * LOG_MAX:
                break
            assert time.monotonic() < deadline, f"wrote only {written} bytes"
            time.sleep(0.1)
        # The janitor sweeps every 0.5 s here (a quarter of the retention): the log
        # outgrows the cap by what is written between sweeps, slack for a loaded box.
        assert max(sizes) <= 2.5 * LOG_MAX, max(sizes)
        rotated = logs / "_pause.log.1"
        assert rotated.exists() and 0 < rotated.stat().st_size <= LOG_MAX // 2
        # Only one generation of each file is kept (runsc.log: the stats sampler's
        # `runsc events`, which names no container of its own).
        assert {p.name for p in logs.iterdir()} <= {
            "_pause.log", "_pause.log.1", "_pause.runsc.log", "_pause.runsc.log.1",
            "runsc.log", "runsc.log.1"}
        assert last_line_number(rotated.read_text(errors="replace")) > 0

        d.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=chatty), timeout=60)
        wait_gone(logs, timeout=30 * RETENTION)

        quiet = "logs-quiet"
        world.bundles(quiet, {})
        d.stub.RunWorkload(run_request(world, quiet, []), timeout=120)
        quiet_logs = d.run_dir / "logs" / quiet
        time.sleep(3 * RETENTION)  # idle for longer than the retention, but hosted
        assert quiet_logs.is_dir() and (quiet_logs / "_pause.log").exists()
        d.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=quiet), timeout=60)
        wait_gone(quiet_logs, timeout=30 * RETENTION)
    finally:
        code = d.stop()
    assert code == 0, d.logs()[-3000:]
    for uid in ("logs-chatty", "logs-quiet"):
        assert not runsc_processes(str(d.run_dir / "actors" / uid))


@e2e
def test_terminate_tears_down_even_when_the_actors_log_dir_is_gone(log_world: DaemonWorld) -> None:
    """The log dir of a hosted actor removed (an operator freeing space; the janitor
    removing an expired dir just as a Run of the same uid starts): Terminate still
    tears the sandbox down (the runsc calls make the dir again; the teardown kills
    the actor's processes whatever its runsc calls did), never leaking it: not
    hosted, not counted, still running."""
    world = log_world
    d = Daemon(world, str(world.runsc(DEFAULT_RELEASE).path), release=DEFAULT_RELEASE)
    uid = "logs-gone"
    try:
        world.bundles(uid, {})
        d.stub.RunWorkload(run_request(world, uid, []), timeout=120)
        shutil.rmtree(d.run_dir / "logs" / uid)
        d.stub.TerminateWorkload(pb.TerminateWorkloadRequest(actor_uid=uid), timeout=60)
        assert not d.inspect.GetStatus(pb.GetStatusRequest()).actors
        assert not runsc_processes(str(d.run_dir / "actors" / uid)), "sandbox leaked"
    finally:
        d.stop()


def wait_gone(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while path.exists():
        assert time.monotonic() < deadline, f"{path} still there after {timeout:g} s"
        time.sleep(0.1)


def test_log_flag_defaults_are_documented() -> None:
    """The flag table (docs/configuration.md) gives the defaults the daemon uses."""
    defaults = DaemonConfig(actors_root="/x")
    for doc in ("docs/configuration.md",):
        text = (REPO / doc).read_text()
        for flag, value in (("--log-max-bytes", defaults.log_max_bytes),
                            ("--log-retention", defaults.log_retention)):
            row = next(line for line in text.splitlines() if line.startswith(f"| `{flag}"))
            shown = str(value) if isinstance(value, int) else f"{value:g}"
            assert f"| {shown} |" in row.replace("`", ""), (doc, row)
