"""plan_injection / apply_plan / inject_devices on real bundles and real ELF libraries."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from ateom.cdi.model import (
    ContainerEdits,
    DeviceNode,
    EditStep,
    Hook,
    Mount,
    Resolution,
)
from ateom.errors import ErrorCode, InjectionError
from ateom.inject import (
    ANNOTATION_KEY,
    InjectOptions,
    SonameCache,
    apply_plan,
    gvisor_nvidia_options,
    inject_devices,
    plan_injection,
)
from ateom.oci_config import ConfigError
from ateom.settings import NodeSettings
from tests.support import FakeLibrary, build_busybox_bundle, read_config

from ._support import tree_snapshot

OPTS = InjectOptions(
    allowed_hooks=frozenset({"create-symlinks", "enable-cuda-compat"}),
    hook_binary="/opt/nvidia-toolkit/nvidia-cdi-hook.real",
    library_dirs=("/usr/local/nvidia/lib64",),
    drop_env=("NVIDIA_VISIBLE_DEVICES",),
)
LIB_DIR = "/usr/local/nvidia/lib64"


def gpu_resolution(libs: list[FakeLibrary], *, extra_mounts: tuple[Mount, ...] = (),
                   nodes: tuple[DeviceNode, ...] | None = None) -> Resolution:
    """What the registry resolves for the simulated spec's nvidia.com/gpu=0."""
    hook = "/usr/bin/nvidia-cdi-hook"
    spec_level = ContainerEdits(
        env=(f"NVIDIA_CTK_LIBCUDA_DIR={LIB_DIR}", "NVIDIA_VISIBLE_DEVICES=void"),
        device_nodes=(DeviceNode("/dev/nvidiactl", host_path="/dev/zero"),),
        mounts=tuple(Mount(str(lib.path), f"{LIB_DIR}/{lib.name}", options=("ro", "nosuid"))
                     for lib in libs) + extra_mounts,
        hooks=(Hook("createContainer", hook, ("nvidia-cdi-hook", "create-symlinks", "--link",
                                              f"libcuda.so.1::{LIB_DIR}/libcuda.so")),
               Hook("createContainer", hook, ("nvidia-cdi-hook", "update-ldcache"))),
    )
    device = ContainerEdits(device_nodes=nodes if nodes is not None else (
        DeviceNode("/dev/nvidia0", host_path="/dev/null"),))
    return Resolution(("nvidia.com/gpu=0",), (
        EditStep("nvidia.com/gpu (spec-level)", "/etc/cdi/nvidia.json", spec_level),
        EditStep("nvidia.com/gpu=0", "/etc/cdi/nvidia.json", device)))


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    b = build_busybox_bundle(tmp_path / "bundle", ["sh"],
                             env=["NVIDIA_VISIBLE_DEVICES=all", "LD_LIBRARY_PATH=/opt/lib"])
    # A leaner rootfs than busybox's 270 applets keeps snapshots cheap.
    return b


def bundle_state(bundle: Path) -> tuple[bytes, dict[str, Any]]:
    return (bundle / "config.json").read_bytes(), tree_snapshot(bundle)


def test_inject_applies_edits_and_stages_soname_links(bundle: Path,
                                                      fake_driver: list[FakeLibrary]) -> None:
    plan = inject_devices(bundle, gpu_resolution(fake_driver), OPTS, soname_cache=SonameCache())
    assert plan.changed
    config = read_config(bundle)
    env = config["process"]["env"]
    assert f"LD_LIBRARY_PATH={LIB_DIR}:/opt/lib" in env
    assert not any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for e in env)
    assert f"NVIDIA_CTK_LIBCUDA_DIR={LIB_DIR}" in env
    devices = {d["path"]: d for d in config["linux"]["devices"]}
    null = os.stat("/dev/null")
    assert devices["/dev/nvidia0"]["major"] == os.major(null.st_rdev)
    assert devices["/dev/nvidia0"]["minor"] == os.minor(null.st_rdev)
    assert [h["args"][1] for h in config["hooks"]["createContainer"]] == ["create-symlinks"]
    assert config["annotations"][ANNOTATION_KEY] == "nvidia.com/gpu=0"
    lib64 = bundle / "rootfs" / LIB_DIR.lstrip("/")
    assert os.readlink(lib64 / "libcuda.so.1") == "libcuda.so.580.65.06"
    assert os.readlink(lib64 / "libnvidia-ml.so.1") == "libnvidia-ml.so.580.65.06"
    assert os.readlink(lib64 / "libnvidia-egl-gbm.so.1") == "libnvidia-egl-gbm.so.1.1.2"
    # No SONAME: no link. Nothing else staged.
    assert sorted(os.listdir(lib64)) == ["libcuda.so.1", "libnvidia-egl-gbm.so.1",
                                         "libnvidia-ml.so.1"]
    assert {lk.name for lk in plan.symlinks} == set(os.listdir(lib64))


def test_second_injection_is_byte_identical_and_changes_nothing(
        bundle: Path, fake_driver: list[FakeLibrary]) -> None:
    res = gpu_resolution(fake_driver)
    inject_devices(bundle, res, OPTS)
    first = bundle_state(bundle)
    inode = os.lstat(bundle / "config.json").st_ino
    plan = inject_devices(bundle, res, OPTS)
    assert not plan.changed and plan.symlinks == () and plan.diff() == ""
    assert bundle_state(bundle) == first
    assert os.lstat(bundle / "config.json").st_ino == inode  # not even rewritten


def test_dry_run_writes_nothing_and_diffs(bundle: Path, fake_driver: list[FakeLibrary]) -> None:
    before = bundle_state(bundle)
    plan = inject_devices(bundle, gpu_resolution(fake_driver), OPTS, dry_run=True)
    assert bundle_state(bundle) == before
    diff = plan.diff()
    assert diff.startswith("--- a/config.json\n+++ b/config.json\n")
    assert '-            "NVIDIA_VISIBLE_DEVICES=all",' in diff
    assert f"+symlink rootfs{LIB_DIR}/libcuda.so.1 -> libcuda.so.580.65.06\n" in diff
    assert f'+        "{ANNOTATION_KEY}": "nvidia.com/gpu=0"' in diff


def test_correct_links_are_left_alone(bundle: Path, fake_driver: list[FakeLibrary]) -> None:
    lib64 = bundle / "rootfs" / LIB_DIR.lstrip("/")
    lib64.mkdir(parents=True)
    (lib64 / "libcuda.so.1").symlink_to("libcuda.so.580.65.06")
    inode = os.lstat(lib64 / "libcuda.so.1").st_ino
    plan = inject_devices(bundle, gpu_resolution(fake_driver), OPTS)
    assert "libcuda.so.1" not in {lk.name for lk in plan.symlinks}
    assert os.lstat(lib64 / "libcuda.so.1").st_ino == inode


@pytest.mark.parametrize("mode", [0o600, 0o664])
def test_atomic_write_keeps_mode_leaves_no_temp(bundle: Path, fake_driver: list[FakeLibrary],
                                                mode: int) -> None:
    os.chmod(bundle / "config.json", mode)
    old_umask = os.umask(0o022)  # would narrow 0664 to 0644 if the mode were only asked for
    try:
        inject_devices(bundle, gpu_resolution(fake_driver), OPTS)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(os.stat(bundle / "config.json").st_mode) == mode
    assert sorted(os.listdir(bundle)) == ["config.json", "rootfs"]


def test_apply_refuses_config_changed_since_plan(bundle: Path,
                                                 fake_driver: list[FakeLibrary]) -> None:
    plan = plan_injection(bundle, gpu_resolution(fake_driver), OPTS)
    (bundle / "config.json").write_text(json.dumps({"changed": True}))
    with pytest.raises(InjectionError, match="changed since the injection was planned"):
        apply_plan(plan)
    assert json.loads((bundle / "config.json").read_text()) == {"changed": True}


def _break(bundle: Path, how: str) -> None:
    if how == "missing config":
        (bundle / "config.json").unlink()
    elif how == "bad json":
        (bundle / "config.json").write_text('{"process": ')
    elif how == "not an object":
        (bundle / "config.json").write_text("[1, 2]")
    elif how == "env not a list":
        (bundle / "config.json").write_text('{"process": {"env": "PATH=/bin"}}')
    elif how == "mount not an object":
        (bundle / "config.json").write_text('{"mounts": ["/proc"]}')
    elif how == "rootfs is a file":
        config = read_config(bundle)
        config["root"]["path"] = "config.json"
        (bundle / "config.json").write_text(json.dumps(config))
    elif how == "missing rootfs":
        config = read_config(bundle)
        config["root"]["path"] = "no-such-rootfs"
        (bundle / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("how,message", [
    ("missing config", "cannot read OCI config"),
    ("missing rootfs", "root.path: rootfs .*no-such-rootfs: No such file or directory"),
    ("rootfs is a file", "root.path: rootfs .*config.json: Not a directory"),
    ("missing host node", "host node /dev/ateom-no-such-gpu does not exist"),
    ("dotdot mount", "climbs out of the rootfs"),
    ("nul host node", "hostPath .* NUL byte"),
    ("nul library", "hostPath .* NUL byte"),
    ("bad json", "not valid JSON"),
    ("not an object", "top level is an array, not an object"),
    ("env not a list", "process.env: is a string, not an array"),
    ("mount not an object", r"mounts\[0\]: is a string, not an object"),
])
def test_errors_leave_the_bundle_untouched(bundle: Path, fake_driver: list[FakeLibrary],
                                           how: str, message: str) -> None:
    _break(bundle, how)
    res = gpu_resolution(fake_driver)
    if how == "missing host node":
        res = gpu_resolution(fake_driver, nodes=(
            DeviceNode("/dev/nvidia0", host_path="/dev/null"),
            DeviceNode("/dev/nvidia1", host_path="/dev/ateom-no-such-gpu")))
    if how == "nul host node":
        res = gpu_resolution(fake_driver, nodes=(DeviceNode("/dev/nvidia0", host_path="/dev/\0"),))
    if how == "nul library":
        res = gpu_resolution(fake_driver, extra_mounts=(
            Mount(f"{fake_driver[0].path}\0x", f"{LIB_DIR}/libx.so.1.0"),))
    if how == "dotdot mount":
        res = gpu_resolution(fake_driver, extra_mounts=(
            Mount(str(fake_driver[0].path), "/usr/lib/../../../libcuda.so.1"),))
    before = tree_snapshot(bundle)
    config_before = (bundle / "config.json").read_bytes() if how != "missing config" else b""
    # The bundle is the caller's input: a config that is not one is
    # INVALID_ARGUMENT (ConfigError); the rest is FAILED_PRECONDITION.
    bad_config = how in ("bad json", "not an object", "env not a list", "mount not an object")
    with pytest.raises(ConfigError if bad_config else InjectionError, match=message) as err:
        inject_devices(bundle, res, OPTS)
    assert err.value.code is (ErrorCode.INVALID_ARGUMENT if bad_config
                              else ErrorCode.FAILED_PRECONDITION)
    assert str(bundle) in str(err.value) or "/etc/cdi/nvidia.json" in str(err.value)
    assert tree_snapshot(bundle) == before
    if how != "missing config":
        assert (bundle / "config.json").read_bytes() == config_before


@pytest.mark.parametrize("part,field", [
    ({"process": {"user": {"uid": "1000"}}}, r"process\.user\.uid: is a string, not an integer"),
    ({"process": {"user": {"uid": 0, "gid": [1]}}}, r"process\.user\.gid: is an array"),
    ({"process": {"user": {"uid": True}}}, r"process\.user\.uid: is a boolean"),
    ({"process": {"user": {"additionalGids": ["44"]}}},
     r"process\.user\.additionalGids\[0\]: is a string"),
    ({"process": {"env": ["A=1", "B=\0x"]}}, r"process\.env\[1\]: contains a NUL byte"),
    ({"linux": {"devices": [{"path": "/dev/x"}, 5]}}, r"linux\.devices\[1\]: is an integer"),
    ({"linux": {"resources": {"devices": ["rwm"]}}},
     r"linux\.resources\.devices\[0\]: is a string"),
    ({"hooks": {"createContainer": {"path": "/bin/x"}}},
     r"hooks\.createContainer: is an object, not an array"),
    ({"hooks": {"prestart": ["/bin/x"]}}, r"hooks\.prestart\[0\]: is a string"),
    ({"root": {"path": ["rootfs"]}}, r"root\.path: is an array, not a string"),
    ({"annotations": {"a": 1}}, r"annotations\.a: is an integer, not a string"),
])
def test_config_of_the_wrong_shape_is_an_error_naming_the_field(
        bundle: Path, fake_driver: list[FakeLibrary], part: dict[str, Any], field: str) -> None:
    # The merge reads these (uid/gid for device owners, existing devices and
    # hooks to replace or extend): a wrong type is the config's fault, said
    # so, not a ValueError from deep inside, nor a hook list built from a
    # string's characters.
    config = read_config(bundle)
    for key, value in part.items():
        config[key] = {**config.get(key, {}), **value}
    (bundle / "config.json").write_text(json.dumps(config))
    before = bundle_state(bundle)
    with pytest.raises(ConfigError, match=f"config.json: {field}"):
        inject_devices(bundle, gpu_resolution(fake_driver), OPTS)
    assert bundle_state(bundle) == before


def test_soname_too_long_for_a_file_name_is_skipped_and_logged(
        bundle: Path, fake_driver: list[FakeLibrary], tmp_path: Path) -> None:
    from tests.support import compile_shared_library
    # 255 bytes is the longest file name; one byte more cannot be a link's name.
    longest = compile_shared_library(tmp_path / "libl.so.1.0", "l" * 250 + ".so.1", "int f;")
    too_long = compile_shared_library(tmp_path / "libm.so.1.0", "m" * 251 + ".so.1", "int f;")
    extra = tuple(Mount(str(p), f"{LIB_DIR}/{p.name}") for p in (longest, too_long))
    with capture_logs() as logs:
        plan = inject_devices(bundle, gpu_resolution(fake_driver, extra_mounts=extra), OPTS)
    lib64 = bundle / "rootfs" / LIB_DIR.lstrip("/")
    assert os.readlink(lib64 / ("l" * 250 + ".so.1")) == "libl.so.1.0"
    assert os.readlink(lib64 / "libcuda.so.1") == "libcuda.so.580.65.06"
    assert [s.library for s in plan.skipped_libraries] == [str(too_long)]
    assert [e["library"] for e in logs if e["event"] == "soname_link_skipped"] == [
        str(too_long)]
    # A second run replaces nothing and stays quiet about the long-but-valid name.
    (lib64 / ("l" * 250 + ".so.1")).unlink()
    (lib64 / ("l" * 250 + ".so.1")).symlink_to("wrong")
    inject_devices(bundle, gpu_resolution(fake_driver, extra_mounts=extra), OPTS)
    assert os.readlink(lib64 / ("l" * 250 + ".so.1")) == "libl.so.1.0"


def test_odd_libraries_are_skipped_and_logged(bundle: Path, fake_driver: list[FakeLibrary],
                                              tmp_path: Path) -> None:
    not_elf = tmp_path / "libnvidia-broken.so.1.0"
    not_elf.write_text("not an ELF file")
    extra = (Mount(str(not_elf), f"{LIB_DIR}/libnvidia-broken.so.1.0"),)
    with capture_logs() as logs:
        plan = inject_devices(bundle, gpu_resolution(fake_driver, extra_mounts=extra), OPTS,
                              soname_cache=SonameCache())
    skipped = [e for e in logs if e["event"] == "soname_link_skipped"]
    assert [e["library"] for e in skipped] == [str(not_elf)]
    assert [s.library for s in plan.skipped_libraries] == [str(not_elf)]
    dropped = [e for e in logs if e["event"] == "hook_dropped"]
    assert len(dropped) == 1 and "update-ldcache" in dropped[0]["reason"]
    assert (bundle / "rootfs" / LIB_DIR.lstrip("/") / "libcuda.so.1").is_symlink()


@pytest.mark.parametrize("hostile,target", [
    ("usr", "OUTSIDE"), ("usr/local", "OUTSIDE"), ("usr/local/nvidia", "OUTSIDE"),
    ("usr", "/"), ("usr/local", "/"), ("usr/local/nvidia/lib64", "/"),
    ("usr/local/nvidia", "../../../../../.."), ("usr/local/nvidia/lib64", "/../../../lib64"),
])
@pytest.mark.parametrize("use_openat2", [pytest.param(None, id="openat2"),
                                         pytest.param(False, id="walk")])
def test_injection_into_hostile_rootfs_writes_nothing_outside(
        tmp_path: Path, fake_driver: list[FakeLibrary], odd_libs: list[Path],
        hostile: str, target: str, use_openat2: bool | None) -> None:
    bundle = build_busybox_bundle(tmp_path / "bundle", ["sh"])
    outside = tmp_path / "outside"
    (outside / "local" / "nvidia" / "lib64").mkdir(parents=True)
    (bundle / "rootfs" / hostile).parent.mkdir(parents=True, exist_ok=True)
    (bundle / "rootfs" / hostile).symlink_to(target.replace("OUTSIDE", str(outside)))
    # Hostile SONAMEs too: "../../../../escaped.so.1" and "gpu/libslash.so.1".
    odd = tuple(Mount(str(p), f"{LIB_DIR}/{p.name}") for p in odd_libs)
    before = tree_snapshot(outside)
    with capture_logs() as logs:
        plan = plan_injection(bundle, gpu_resolution(fake_driver, extra_mounts=odd), OPTS,
                              use_openat2=use_openat2)
        apply_plan(plan, use_openat2=use_openat2)
    assert tree_snapshot(outside) == before
    assert sorted(os.listdir(tmp_path)) == ["bundle", "outside"]
    # Every link is in the rootfs, found without following any symlink: the
    # resolver must not be the judge of its own confinement.
    names = {lk.name for lk in plan.symlinks}
    assert names >= {"libcuda.so.1", "libnvidia-ml.so.1"}
    found = {name: Path(d) / name for d, dirs, files in os.walk(bundle / "rootfs")
             for name in files + dirs if name in names}
    assert set(found) == names
    assert os.readlink(found["libcuda.so.1"]) == "libcuda.so.580.65.06"
    for name in names | {"escaped.so.1"}:
        for host_dir in ("/", "/lib64", LIB_DIR, "/usr/local", "/gpu"):
            assert not os.path.lexists(os.path.join(host_dir, name)), (host_dir, name)
    assert not os.path.lexists(bundle / "escaped.so.1")
    skipped = {e["library"]: e["reason"] for e in logs if e["event"] == "soname_link_skipped"}
    assert set(skipped) == {str(p) for p in odd_libs}
    assert all("not a bare file name" in skipped[str(p)] for p in odd_libs[:2])


def test_gvisor_nvidia_options_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = NodeSettings(toolkit_dir=str(tmp_path), driver_root="/drv")
    opts = gvisor_nvidia_options(node)
    assert opts.hook_binary == f"{tmp_path}/nvidia-cdi-hook"
    (tmp_path / "nvidia-cdi-hook.real").write_text("")
    opts = gvisor_nvidia_options(node)
    assert opts.hook_binary == f"{tmp_path}/nvidia-cdi-hook.real"
    assert opts.allowed_hooks == {"create-symlinks", "enable-cuda-compat"}
    assert opts.library_dirs == ("/drv/lib64",)
    assert opts.drop_env == ("NVIDIA_VISIBLE_DEVICES",)
    for name in ("ATEOM_NVIDIA_TOOLKIT_DIR", "ATEOM_NVIDIA_DRIVER_ROOT"):
        monkeypatch.delenv(name, raising=False)
    defaults = gvisor_nvidia_options()
    assert defaults.library_dirs == ("/usr/local/nvidia/lib64",)
    assert defaults.hook_binary is not None
    assert defaults.hook_binary.startswith("/opt/nvidia-toolkit/nvidia-cdi-hook")


# -- property: inject∘inject == inject, and every write stays in the rootfs ----

_dirs = st.sampled_from(["/usr/lib", "/usr/local/nvidia/lib64", "/lib/x86_64-linux-gnu",
                         "/opt/gpu"])
_hostile = st.lists(st.sampled_from([
    ("usr", "OUTSIDE"), ("usr/lib", "/"), ("usr/local", "../../.."),
    ("opt", "OUTSIDE/sub"), ("lib", "usr/lib"), ("usr/local/nvidia", "/opt"),
]), max_size=2, unique_by=lambda t: t[0].split("/")[0])


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mounts=st.lists(st.tuples(st.integers(0, 5), _dirs), min_size=1, max_size=5),
       hostile=_hostile, env=st.lists(st.sampled_from(["A=1", "NVIDIA_VISIBLE_DEVICES=all",
                                                       "LD_LIBRARY_PATH=/x:/y"]), max_size=3),
       nodes=st.lists(st.sampled_from(["/dev/null", "/dev/zero", "/dev/full"]), max_size=3))
def test_inject_twice_is_inject_once_and_stays_in_rootfs(
        tmp_path_factory: pytest.TempPathFactory, fake_driver: list[FakeLibrary],
        odd_libs: list[Path], mounts: list[tuple[int, str]], hostile: list[tuple[str, str]],
        env: list[str], nodes: list[str]) -> None:
    work = tmp_path_factory.mktemp("prop")
    outside = work / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "keep").write_text("x")
    bundle = work / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({
        "ociVersion": "1.0.0", "root": {"path": "rootfs"},
        "process": {"args": ["sh"], "env": env}, "mounts": []}))
    for link, target in hostile:
        path = bundle / "rootfs" / link
        path.parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(path):
            path.symlink_to(target.replace("OUTSIDE", str(outside)))
    sources = [lib.path for lib in fake_driver[:3]] + odd_libs
    edits = ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=void",),
        device_nodes=tuple(DeviceNode(f"/dev/gpu{i}", host_path=n) for i, n in enumerate(nodes)),
        mounts=tuple(Mount(str(sources[i]), f"{d}/{sources[i].name}") for i, d in mounts))
    res = Resolution(("v.com/gpu=0",), (EditStep("v.com/gpu=0", "/s.json", edits),))
    outside_before = tree_snapshot(outside)
    siblings = sorted(os.listdir(work))

    inject_devices(bundle, res, OPTS)
    once = bundle_state(bundle)
    plan = inject_devices(bundle, res, OPTS)
    assert not plan.changed
    assert bundle_state(bundle) == once
    assert tree_snapshot(outside) == outside_before
    assert sorted(os.listdir(work)) == siblings
    assert sorted(os.listdir(bundle)) == ["config.json", "rootfs"]
    # Hostile links may point at the host's / ("usr/lib" -> "/"): nothing there either.
    names = {lib.soname for lib in fake_driver[:3] if lib.soname} | {"escaped.so.1", "gpu"}
    for host_dir in ("/", "/usr/lib", "/usr/local/nvidia/lib64", "/lib/x86_64-linux-gnu",
                     "/opt/gpu", "/opt"):
        for name in names:
            assert not os.path.lexists(os.path.join(host_dir, name)), (host_dir, name)


@pytest.fixture(scope="module")
def odd_libs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Libraries that must be skipped: hostile SONAMEs and a non-ELF file."""
    from tests.support import compile_shared_library
    d = tmp_path_factory.mktemp("odd")
    src = "int g(void) { return 0; }\n"
    return [
        compile_shared_library(d / "libescape.so.2.0", "../../../../escaped.so.1", src),
        compile_shared_library(d / "libslash.so.4.0", "gpu/libslash.so.1", src),
        (lambda p: (p.write_text("junk"), p)[1])(d / "libjunk.so.3.0"),
    ]


@pytest.mark.parametrize("durable", [False, True])
def test_config_is_replaced_by_rename_of_a_temp_fsynced_only_when_durable(
        bundle: Path, fake_driver: list[FakeLibrary], monkeypatch: pytest.MonkeyPatch,
        durable: bool) -> None:
    # Crash safety is an order of real syscalls: the new bytes go to a temp
    # file in the bundle dir, renamed over config.json (a reader, or ateom
    # after kill -9, sees the old file or the new one). Durable: the temp is
    # fsynced before the rename and the dir after it, so the rename survives
    # power loss too. Record that order.
    events: list[tuple[str, str]] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rename(src: str, dst: str, *, src_dir_fd: int, dst_dir_fd: int) -> None:
        src_dir = os.readlink(f"/proc/self/fd/{src_dir_fd}")
        dst_dir = os.readlink(f"/proc/self/fd/{dst_dir_fd}")
        events.append(("rename", f"{src_dir}/{src} -> {dst_dir}/{dst}"))
        real_rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    inject_devices(bundle, gpu_resolution(fake_driver), OPTS, durable=durable)
    renames = [what for kind, what in events if kind == "rename"]
    assert len(renames) == 1
    temp, _, target = renames[0].partition(" -> ")
    assert os.path.dirname(temp) == str(bundle) and temp != str(bundle / "config.json")
    assert target == str(bundle / "config.json")
    if durable:
        assert events == [("fsync", temp), ("rename", renames[0]), ("fsync", str(bundle))]
    else:
        assert events == [("rename", renames[0])]
    assert sorted(os.listdir(bundle)) == ["config.json", "rootfs"]
    assert read_config(bundle)["annotations"][ANNOTATION_KEY] == "nvidia.com/gpu=0"


def test_wrong_existing_links_are_replaced_without_touching_their_targets(
        bundle: Path, fake_driver: list[FakeLibrary], tmp_path: Path) -> None:
    # ldconfig's rule: a SONAME link that points elsewhere (an older driver,
    # or anywhere at all) is replaced; what it pointed at is not written.
    victim = tmp_path / "victim"
    victim.write_text("keep")
    lib64 = bundle / "rootfs" / LIB_DIR.lstrip("/")
    lib64.mkdir(parents=True)
    (lib64 / "libcuda.so.1").symlink_to("libcuda.so.470.1")
    (lib64 / "libnvidia-ml.so.1").symlink_to(victim)
    (lib64 / "libnvidia-egl-gbm.so.1").write_text("a stale copy")
    plan = inject_devices(bundle, gpu_resolution(fake_driver), OPTS)
    assert {"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-egl-gbm.so.1"} <= {
        lk.name for lk in plan.symlinks}
    assert os.readlink(lib64 / "libcuda.so.1") == "libcuda.so.580.65.06"
    assert os.readlink(lib64 / "libnvidia-ml.so.1") == "libnvidia-ml.so.580.65.06"
    assert os.readlink(lib64 / "libnvidia-egl-gbm.so.1") == "libnvidia-egl-gbm.so.1.1.2"
    assert victim.read_text() == "keep"
    assert sorted(os.listdir(lib64)) == ["libcuda.so.1", "libnvidia-egl-gbm.so.1",
                                         "libnvidia-ml.so.1"]


def test_host_nodes_are_stated_type_numbers_and_mode(bundle: Path, tmp_path: Path,
                                                     fake_driver: list[FakeLibrary]) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o640)
    os.chmod(fifo, 0o640)
    link = tmp_path / "zero-link"
    link.symlink_to("/dev/zero")  # followed, as the runtime's open would
    nodes = (DeviceNode("/dev/nvidia0", host_path="/dev/null"),
             DeviceNode("/dev/pipe", host_path=str(fifo)),
             DeviceNode("/dev/nvidia1", host_path=str(link), type="c"))
    inject_devices(bundle, gpu_resolution(fake_driver, nodes=nodes), OPTS)
    config = read_config(bundle)
    devices = {d["path"]: d for d in config["linux"]["devices"]}
    null, zero = os.stat("/dev/null"), os.stat("/dev/zero")
    assert devices["/dev/nvidia0"] == {
        "path": "/dev/nvidia0", "type": "c", "major": os.major(null.st_rdev),
        "minor": os.minor(null.st_rdev), "fileMode": stat.S_IMODE(null.st_mode)}
    assert devices["/dev/pipe"] == {"path": "/dev/pipe", "type": "p", "fileMode": 0o640}
    assert (devices["/dev/nvidia1"]["major"], devices["/dev/nvidia1"]["minor"]) == (
        os.major(zero.st_rdev), os.minor(zero.st_rdev))
    rules = config["linux"]["resources"]["devices"]
    assert all(r["type"] == "c" for r in rules)  # none for the FIFO
    assert len(rules) == len({json.dumps(r, sort_keys=True) for r in rules})


@pytest.mark.parametrize("host,message", [
    ("REGULAR", "is not a device node"),
    ("FIFO", r"type 'c' does not match host node"),
])
def test_host_path_of_the_wrong_kind_is_an_error_naming_it(
        bundle: Path, tmp_path: Path, fake_driver: list[FakeLibrary], host: str,
        message: str) -> None:
    path = tmp_path / "node"
    if host == "REGULAR":
        path.write_text("")
    else:
        os.mkfifo(path)
    before = bundle_state(bundle)
    nodes = (DeviceNode("/dev/nvidia0", host_path=str(path), type="c"
                        if host == "FIFO" else None),)
    with pytest.raises(InjectionError, match=message) as err:
        inject_devices(bundle, gpu_resolution(fake_driver, nodes=nodes), OPTS)
    assert str(path) in str(err.value)
    assert bundle_state(bundle) == before


# -- parsed once: the plan applied is the plan made ----------------------------

def test_plan_from_the_callers_config_reads_no_config_json(
        bundle: Path, fake_driver: list[FakeLibrary]) -> None:
    raw = (bundle / "config.json").read_bytes()
    parsed = json.loads(raw)
    (bundle / "config.json").unlink()  # nothing left to read: the plan must not try
    plan = plan_injection(bundle, gpu_resolution(fake_driver), OPTS, config=(raw, parsed))
    assert plan.config_before is raw
    assert plan.merged["annotations"][ANNOTATION_KEY] == "nvidia.com/gpu=0"
    assert json.loads(plan.config_after) == plan.merged
    assert parsed == json.loads(raw)  # the caller's object is not written


def test_config_after_is_serialized_once_and_only_when_read(
        bundle: Path, fake_driver: list[FakeLibrary], monkeypatch: pytest.MonkeyPatch) -> None:
    from ateom.inject import plan as plan_module

    calls: list[int] = []
    real = plan_module.serialize_config

    def counting(config: Any) -> bytes:
        calls.append(1)
        return real(config)

    monkeypatch.setattr(plan_module, "serialize_config", counting)
    plan = plan_injection(bundle, gpu_resolution(fake_driver), OPTS)
    assert calls == [] and plan.changed and plan.config_changed
    first = plan.config_after
    assert plan.config_after is first and calls == [1]
    # Unchanged: the bytes are the file's own, never re-encoded.
    apply_plan(plan)
    again = plan_injection(bundle, gpu_resolution(fake_driver), OPTS)
    assert not again.changed and again.config_after is again.config_before
    assert calls == [1]


def test_daemon_replaced_config_after_is_what_apply_writes(
        bundle: Path, fake_driver: list[FakeLibrary]) -> None:
    import dataclasses

    # The daemon (until it writes through safefs itself) hands its own bytes.
    plan = plan_injection(bundle, gpu_resolution(fake_driver), OPTS)
    edited = {**plan.merged, "annotations": {**plan.merged["annotations"], "own": "edit"}}
    data = json.dumps(edited).encode()
    apply_plan(dataclasses.replace(plan, config_after=data))
    assert (bundle / "config.json").read_bytes() == data
    assert (bundle / "rootfs" / LIB_DIR.lstrip("/") / "libcuda.so.1").is_symlink()


def test_stage_links_makes_the_links_and_leaves_the_config(
        bundle: Path, fake_driver: list[FakeLibrary]) -> None:
    from ateom.inject import stage_links

    before = (bundle / "config.json").read_bytes()
    plan = plan_injection(bundle, gpu_resolution(fake_driver), OPTS)
    stage_links(plan)
    assert (bundle / "config.json").read_bytes() == before
    lib64 = bundle / "rootfs" / LIB_DIR.lstrip("/")
    assert {p.name for p in lib64.iterdir()} == {lk.name for lk in plan.symlinks}
    # The links are in place now: a new plan has none left to stage.
    assert plan_injection(bundle, gpu_resolution(fake_driver), OPTS).symlinks == ()


def test_plan_of_an_older_read_is_refused_when_the_file_changed(
        bundle: Path, fake_driver: list[FakeLibrary]) -> None:
    raw = (bundle / "config.json").read_bytes()
    plan = plan_injection(bundle, gpu_resolution(fake_driver), OPTS,
                          config=(raw, json.loads(raw)))
    (bundle / "config.json").write_bytes(raw + b" ")
    with pytest.raises(InjectionError, match="changed since the injection was planned"):
        apply_plan(plan)
    assert (bundle / "config.json").read_bytes() == raw + b" "


def test_symlinked_config_json_is_refused_and_its_target_untouched(
        bundle: Path, fake_driver: list[FakeLibrary], tmp_path: Path) -> None:
    # ateom replaces config.json by rename; reading through a link and then
    # replacing the link with a file would edit something else than was read.
    elsewhere = tmp_path / "elsewhere.json"
    (bundle / "config.json").rename(elsewhere)
    (bundle / "config.json").symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    with pytest.raises(InjectionError, match="config.json: cannot read OCI config: is a symbolic"):
        inject_devices(bundle, gpu_resolution(fake_driver), OPTS)
    assert elsewhere.read_bytes() == before and (bundle / "config.json").is_symlink()


def test_fifo_config_json_is_refused_without_blocking(
        bundle: Path, fake_driver: list[FakeLibrary]) -> None:
    (bundle / "config.json").unlink()
    os.mkfifo(bundle / "config.json")  # open() without O_NONBLOCK would wait for a writer
    with pytest.raises(InjectionError, match="config.json: cannot read OCI config: not a regular"):
        inject_devices(bundle, gpu_resolution(fake_driver), OPTS)


def test_callers_config_of_the_wrong_shape_is_a_config_error(
        bundle: Path, fake_driver: list[FakeLibrary]) -> None:
    # The merge's assumptions do not rest on the caller's own parser.
    raw = b'{"process": {"user": {"uid": "root"}}}'
    with pytest.raises(ConfigError, match=r"config.json: process\.user\.uid: is a string"):
        plan_injection(bundle, gpu_resolution(fake_driver), OPTS,
                       config=(raw, json.loads(raw)))
