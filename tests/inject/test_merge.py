"""The pure merge, rule by rule (no filesystem, no root)."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ateom.cdi.model import (
    ContainerEdits,
    DeviceNode,
    EditStep,
    Hook,
    IntelRdt,
    Mount,
    NetDevice,
    Resolution,
)
from ateom.errors import InjectionError
from ateom.inject.merge import (
    ANNOTATION_KEY,
    HostFacts,
    HostNode,
    merge_edits,
    node_needs_stat,
    prepend_library_dirs,
)
from ateom.inject.options import InjectOptions

OPTS = InjectOptions(
    allowed_hooks=frozenset({"create-symlinks", "enable-cuda-compat"}),
    hook_binary="/opt/nvidia-toolkit/nvidia-cdi-hook.real",
    library_dirs=("/usr/local/nvidia/lib64",),
    drop_env=("NVIDIA_VISIBLE_DEVICES",),
)
NULL = HostNode("c", 1, 3, 0o666)
ZERO = HostNode("c", 1, 5, 0o666)
HOST = HostFacts({"/dev/null": NULL, "/dev/zero": ZERO})


def base_config(**process: Any) -> dict[str, Any]:
    return {
        "ociVersion": "1.0.0",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all",
                    "LD_LIBRARY_PATH=/usr/local/cuda/lib64"],
            **process,
        },
        "root": {"path": "rootfs"},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
        ],
        "linux": {"namespaces": [{"type": "pid"}]},
    }


def resolve(*edits: ContainerEdits, devices: tuple[str, ...] = ("vendor.com/gpu=0",)
            ) -> Resolution:
    steps = tuple(EditStep(devices[0] if devices else "x", "/etc/cdi/v.json", e)
                  for e in edits)
    return Resolution(devices, steps)


def merge(config: dict[str, Any], *edits: ContainerEdits, host: HostFacts = HOST,
          options: InjectOptions = OPTS) -> dict[str, Any]:
    return merge_edits(config, resolve(*edits), host, options).config


# -- device nodes -------------------------------------------------------------

def test_node_with_type_and_major_is_used_as_given() -> None:
    node = DeviceNode("/dev/nvidia0", host_path="/dev/absent", type="c", major=195, minor=0)
    assert not node_needs_stat(node)
    out = merge(base_config(), ContainerEdits(device_nodes=(node,)))
    # fileMode is always written (0666 when the spec gives none): runsc
    # 0.0~20240729 panics creating a device node without one.
    assert out["linux"]["devices"] == [
        {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 0o666}]
    assert out["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"}]


def test_node_without_numbers_takes_them_from_host_stat() -> None:
    node = DeviceNode("/dev/nvidia0", host_path="/dev/null")
    out = merge(base_config(), ContainerEdits(device_nodes=(node,)))
    assert out["linux"]["devices"] == [
        {"path": "/dev/nvidia0", "type": "c", "major": 1, "minor": 3, "fileMode": 0o666}]


def test_zero_major_means_not_filled_in() -> None:
    node = DeviceNode("/dev/zero", type="c", major=0, minor=0)
    assert node_needs_stat(node)
    out = merge(base_config(), ContainerEdits(device_nodes=(node,)))
    assert out["linux"]["devices"][0]["major"] == 1
    assert out["linux"]["devices"][0]["minor"] == 5


def test_host_path_defaults_to_path() -> None:
    out = merge(base_config(), ContainerEdits(device_nodes=(DeviceNode("/dev/zero"),)))
    assert out["linux"]["devices"][0]["minor"] == 5


def test_mismatched_type_is_an_error() -> None:
    node = DeviceNode("/dev/nvidia0", host_path="/dev/null", type="b")
    with pytest.raises(InjectionError, match=r"type 'b' does not match host node /dev/null"):
        merge(base_config(), ContainerEdits(device_nodes=(node,)))


def test_missing_host_node_is_an_error_naming_it() -> None:
    node = DeviceNode("/dev/nvidia0", host_path="/dev/nvidia-missing")
    with pytest.raises(InjectionError) as err:
        merge(base_config(), ContainerEdits(device_nodes=(node,)))
    assert "/dev/nvidia-missing does not exist" in str(err.value)
    assert "/etc/cdi/v.json" in str(err.value)


def test_host_path_that_is_not_a_device_is_an_error() -> None:
    node = DeviceNode("/dev/x", host_path="/etc/passwd")
    host = HostFacts({"/etc/passwd": HostNode("", 0, 0, 0o644)})
    with pytest.raises(InjectionError, match="is not a device node"):
        merge(base_config(), ContainerEdits(device_nodes=(node,)), host=host)


def test_fifo_needs_no_numbers_and_no_cgroup_rule() -> None:
    node = DeviceNode("/dev/pipe", type="p", host_path="/absent")
    out = merge(base_config(), ContainerEdits(device_nodes=(node,)))
    assert out["linux"]["devices"] == [{"path": "/dev/pipe", "type": "p"}]
    assert out["linux"]["resources"]["devices"] == []


def test_uid_gid_default_to_non_root_process_user() -> None:
    config = base_config(user={"uid": 1000, "gid": 1001})
    node = DeviceNode("/dev/nvidia0", type="c", major=195, minor=0)
    out = merge(config, ContainerEdits(device_nodes=(node,)))
    assert out["linux"]["devices"][0]["uid"] == 1000
    assert out["linux"]["devices"][0]["gid"] == 1001
    # Root: no uid/gid written; explicit values always win.
    root_out = merge(base_config(), ContainerEdits(device_nodes=(node,)))
    assert "uid" not in root_out["linux"]["devices"][0]
    explicit = DeviceNode("/dev/nvidia0", type="c", major=195, minor=0, uid=7, gid=8)
    out = merge(config, ContainerEdits(device_nodes=(explicit,)))
    assert (out["linux"]["devices"][0]["uid"], out["linux"]["devices"][0]["gid"]) == (7, 8)


def test_same_path_replaced_never_duplicated_and_rules_unique() -> None:
    config = base_config()
    config["linux"]["devices"] = [{"path": "/dev/nvidia0", "type": "c", "major": 9, "minor": 9},
                                  {"path": "/dev/other", "type": "c", "major": 5, "minor": 1}]
    node = DeviceNode("/dev/nvidia0", type="c", major=195, minor=0, permissions="rw")
    out = merge(config, ContainerEdits(device_nodes=(node,)),
                ContainerEdits(device_nodes=(node,)))
    assert [d["path"] for d in out["linux"]["devices"]] == ["/dev/nvidia0", "/dev/other"]
    assert out["linux"]["devices"][0]["major"] == 195
    assert out["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rw"}]


def test_input_config_is_not_mutated() -> None:
    config = base_config()
    snapshot = copy.deepcopy(config)
    merge(config, ContainerEdits(
        env=("A=1",), device_nodes=(DeviceNode("/dev/null"),),
        mounts=(Mount("/h/lib.so.1", "/usr/lib/lib.so.1"),),
        hooks=(Hook("createContainer", "/x", ("x", "create-symlinks")),),
        additional_gids=(44,), net_devices=(NetDevice("eth1", "net0"),),
        intel_rdt=IntelRdt(clos_id="c1")))
    assert config == snapshot


# -- mounts -------------------------------------------------------------------

def test_mount_defaults_to_bind_keeps_options_replaces_same_destination() -> None:
    config = base_config()
    config["mounts"].append({"destination": "/usr/lib/libcuda.so.1", "type": "bind",
                             "source": "/old", "options": ["rw"]})
    m = Mount("/host/libcuda.so.580", "/usr/lib/libcuda.so.1", options=("ro", "nosuid"))
    out = merge(config, ContainerEdits(mounts=(m,)))
    found = [x for x in out["mounts"] if x["destination"] == "/usr/lib/libcuda.so.1"]
    assert found == [{"destination": "/usr/lib/libcuda.so.1", "type": "bind",
                      "source": "/host/libcuda.so.580", "options": ["ro", "nosuid"]}]


def test_mounts_stably_sorted_by_depth_parent_before_child() -> None:
    child = Mount("/h/a", "/usr/local/nvidia/lib64/a.so.1")
    parent = Mount("/h/dir", "/usr/local/nvidia", type="bind")
    sibling = Mount("/h/b", "/usr/local/nvidia/lib64/b.so.1")
    out = merge(base_config(), ContainerEdits(mounts=(child, parent, sibling)))
    dests = [m["destination"] for m in out["mounts"]]
    assert dests == ["/proc", "/dev", "/usr/local/nvidia",
                     "/usr/local/nvidia/lib64/a.so.1", "/usr/local/nvidia/lib64/b.so.1"]


def test_image_mounts_are_ordered_with_cdi_mounts_parent_first() -> None:
    # The image's own mounts take part in the ordering: a CDI parent mount
    # must not land after an image mount below it, and an image mount at the
    # same destination is replaced, not kept beside the CDI one.
    config = base_config()
    config["mounts"] = [
        {"destination": "/usr/local/nvidia/lib64/", "type": "tmpfs", "source": "tmpfs"},
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/usr/local//nvidia", "type": "tmpfs", "source": "old"},
    ]
    parent = Mount("/h/nvidia", "/usr/local/nvidia")
    top = Mount("/h/usr", "/usr")
    out = merge(config, ContainerEdits(mounts=(parent, top)))
    assert [(m["destination"], m["source"]) for m in out["mounts"]] == [
        ("/proc", "proc"), ("/usr", "/h/usr"), ("/usr/local/nvidia", "/h/nvidia"),
        ("/usr/local/nvidia/lib64/", "tmpfs")]


def test_mount_over_root_lands_before_every_other_mount() -> None:
    # "/" is everyone's parent; counting separators would rank it with "/proc".
    out = merge(base_config(), ContainerEdits(mounts=(Mount("/h/root", "/"),)))
    assert [m["destination"] for m in out["mounts"]] == ["/", "/proc", "/dev"]


@pytest.mark.parametrize("edits,field", [
    (ContainerEdits(device_nodes=(DeviceNode("/dev/x\0y"),)), "device node path"),
    (ContainerEdits(device_nodes=(DeviceNode("/dev/g", host_path="/dev/nu\0ll"),)),
     "device node hostPath"),
    (ContainerEdits(mounts=(Mount("/h/li\0b.so.1", "/usr/lib/lib.so.1"),)), "mount hostPath"),
    (ContainerEdits(mounts=(Mount("/h/lib.so.1", "/usr/li\0b/lib.so.1"),)),
     "mount containerPath"),
])
def test_nul_byte_in_a_path_is_an_error_naming_the_field(edits: ContainerEdits,
                                                         field: str) -> None:
    # A NUL cannot be in a path: the kernel would read a shorter one.
    with pytest.raises(InjectionError, match=f"/etc/cdi/v.json: .*{field} .* NUL byte"):
        merge(base_config(), edits)


def test_mount_destination_with_dotdot_is_an_error() -> None:
    m = Mount("/h/x", "/usr/lib/../../../etc/x.so.1")
    with pytest.raises(InjectionError, match=r"climbs out of the rootfs"):
        merge(base_config(), ContainerEdits(mounts=(m,)))


# -- env ----------------------------------------------------------------------

def test_env_replaced_in_place_appended_dropped_and_ld_library_path() -> None:
    config = base_config()
    config["process"]["env"].insert(1, "FOO=old")
    edits = ContainerEdits(env=("FOO=new", "NVIDIA_VISIBLE_DEVICES=void", "BAR=1"))
    env = merge(config, edits)["process"]["env"]
    assert env == ["PATH=/bin", "FOO=new",
                   "LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/cuda/lib64", "BAR=1"]


def test_ld_library_path_one_entry_no_dir_twice() -> None:
    env = ["LD_LIBRARY_PATH=/a::/usr/local/nvidia/lib64", "X=1", "LD_LIBRARY_PATH=/b:/a"]
    assert prepend_library_dirs(env, ["/usr/local/nvidia/lib64"]) == [
        "LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/a:/b", "X=1"]
    assert prepend_library_dirs(["X=1"], ["/l"]) == ["X=1", "LD_LIBRARY_PATH=/l"]
    assert prepend_library_dirs(["X=1"], []) == ["X=1"]
    # The same directory spelt with a trailing or doubled slash is still the same.
    assert prepend_library_dirs(["LD_LIBRARY_PATH=/usr/local/nvidia/lib64/:/b//c:/b/c/"],
                                ["/usr/local/nvidia/lib64"]) == [
        "LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/b//c"]


# -- hooks --------------------------------------------------------------------

def test_hooks_allowlisted_rewritten_deduplicated_and_dropped_with_reasons() -> None:
    env = ("NVIDIA_CTK_DEBUG=false",)
    keep = Hook("createContainer", "/usr/bin/nvidia-cdi-hook",
                ("nvidia-cdi-hook", "create-symlinks", "--link", "a::b"), env)
    ldcache = Hook("createContainer", "/usr/bin/nvidia-cdi-hook",
                   ("nvidia-cdi-hook", "update-ldcache"), env)
    prestart = Hook("prestart", "/usr/bin/nvidia-cdi-hook",
                    ("nvidia-cdi-hook", "create-symlinks"))
    bare = Hook("createContainer", "/usr/bin/true")
    result = merge_edits(base_config(), resolve(ContainerEdits(
        hooks=(keep, ldcache, prestart, bare, keep))), HOST, OPTS)
    hooks = result.config["hooks"]
    assert hooks == {"createContainer": [{
        "path": "/opt/nvidia-toolkit/nvidia-cdi-hook.real",
        "args": ["/opt/nvidia-toolkit/nvidia-cdi-hook.real", "create-symlinks", "--link", "a::b"],
        "env": ["NVIDIA_CTK_DEBUG=false"]}]}
    reasons = [d.reason for d in result.dropped_hooks]
    assert reasons == ["subcommand 'update-ldcache' is not allowlisted",
                       "hook kind prestart is not createContainer",
                       "hook has no subcommand (args[1])"]
    assert all(d.spec_path == "/etc/cdi/v.json" for d in result.dropped_hooks)


def test_a_vendors_profile_applies_to_its_devices_only() -> None:
    """Another vendor's device under the NVIDIA profile: no NVIDIA library dir on its
    LD_LIBRARY_PATH, its hook not run from NVIDIA's binary; an NVIDIA device gets both."""
    nvidia = dataclasses.replace(OPTS, vendor="nvidia.com")
    hook = Hook("createContainer", "/usr/bin/their-hook", ("their-hook", "create-symlinks"))
    edits = ContainerEdits(env=("A=1",), hooks=(hook,))
    other = merge_edits(base_config(), resolve(edits, devices=("example.com/gpu=0",)),
                        HOST, nvidia)
    assert "LD_LIBRARY_PATH=/usr/local/cuda/lib64" in other.config["process"]["env"]
    assert "hooks" not in other.config
    [dropped] = other.dropped_hooks
    assert "example.com device's hook" in dropped.reason and "nvidia.com" in dropped.reason
    own = merge_edits(base_config(), resolve(edits, devices=("nvidia.com/gpu=0",)), HOST, nvidia)
    assert ("LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/cuda/lib64"
            in own.config["process"]["env"])
    assert [h["path"] for h in own.config["hooks"]["createContainer"]] == [OPTS.hook_binary]
    assert not own.dropped_hooks


def test_no_hook_binary_drops_every_hook() -> None:
    keep = Hook("createContainer", "/x", ("x", "create-symlinks"))
    opts = InjectOptions(allowed_hooks=frozenset({"create-symlinks"}))
    result = merge_edits(base_config(), resolve(ContainerEdits(hooks=(keep,))), HOST, opts)
    assert "hooks" not in result.config
    assert result.dropped_hooks[0].reason == "no trusted hook binary configured"


def test_foreign_hooks_in_config_are_kept() -> None:
    config = base_config()
    config["hooks"] = {"createContainer": [{"path": "/bin/foreign"}], "poststop": [{"path": "/p"}]}
    keep = Hook("createContainer", "/x", ("x", "enable-cuda-compat"))
    out = merge(config, ContainerEdits(hooks=(keep,)))
    assert out["hooks"]["createContainer"][0] == {"path": "/bin/foreign"}
    assert len(out["hooks"]["createContainer"]) == 2
    assert out["hooks"]["poststop"] == [{"path": "/p"}]


# -- gids, intelRdt, netDevices, annotation -----------------------------------

def test_additional_gids_rdt_net_devices() -> None:
    config = base_config()
    config["process"]["user"]["additionalGids"] = [44]
    out = merge(config,
                ContainerEdits(additional_gids=(0, 44, 45), intel_rdt=IntelRdt(clos_id="a"),
                               net_devices=(NetDevice("eth1", "net0"),)),
                ContainerEdits(additional_gids=(45, 46),
                               intel_rdt=IntelRdt(clos_id="b", schemata=("L3:0=f",)),
                               net_devices=(NetDevice("eth1", "net1"), NetDevice("eth2", "x"))))
    assert out["process"]["user"]["additionalGids"] == [44, 45, 46]
    assert out["linux"]["intelRdt"] == {"closID": "b", "schemata": ["L3:0=f"]}
    assert out["linux"]["netDevices"] == {"eth1": {"name": "net1"}, "eth2": {"name": "x"}}


def test_annotation_records_devices_in_request_order_once() -> None:
    res = Resolution(("v.com/g=1", "v.com/g=0"), ())
    out = merge_edits(base_config(), res, HOST, OPTS).config
    assert out["annotations"][ANNOTATION_KEY] == "v.com/g=1,v.com/g=0"
    again = merge_edits(out, Resolution(("v.com/g=0", "v.com/g=2"), ()), HOST, OPTS).config
    assert again["annotations"][ANNOTATION_KEY] == "v.com/g=1,v.com/g=0,v.com/g=2"


# -- property: merge is idempotent ---------------------------------------------

_paths = st.lists(st.sampled_from(["usr", "lib", "local", "nvidia", "lib64", "x.so.1", "y"]),
                  min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))
_env = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["A", "B", "LD_LIBRARY_PATH",
                                                           "NVIDIA_VISIBLE_DEVICES"]),
                 st.sampled_from(["1", "/l", "/a:/b", ""]))
_nodes = st.builds(DeviceNode, st.sampled_from(["/dev/g0", "/dev/g1", "/dev/ctl"]),
                   host_path=st.sampled_from([None, "/dev/null", "/dev/zero"]),
                   type=st.sampled_from([None, "c", "p"]),
                   major=st.sampled_from([None, 0, 195]), minor=st.sampled_from([None, 0, 1]),
                   permissions=st.sampled_from([None, "rw", "rwm"]))
_mounts = st.builds(Mount, st.sampled_from(["/h/a", "/h/b"]), _paths,
                    type=st.sampled_from([None, "bind"]),
                    options=st.sampled_from([(), ("ro",)]))
_hooks = st.builds(Hook, st.sampled_from(["createContainer", "prestart"]),
                   st.just("/usr/bin/hook"),
                   st.lists(st.sampled_from(["hook", "create-symlinks", "update-ldcache", "-x"]),
                            max_size=3).map(tuple))
_edits = st.builds(ContainerEdits, env=st.lists(_env, max_size=3).map(tuple),
                   device_nodes=st.lists(_nodes, max_size=3).map(tuple),
                   mounts=st.lists(_mounts, max_size=4).map(tuple),
                   hooks=st.lists(_hooks, max_size=3).map(tuple),
                   additional_gids=st.lists(st.integers(0, 3), max_size=2).map(tuple))
HOST_ALL = HostFacts({"/dev/null": NULL, "/dev/zero": ZERO, "/dev/g0": NULL,
                      "/dev/g1": ZERO, "/dev/ctl": NULL})


@settings(max_examples=150, deadline=None)
@given(st.lists(_edits, min_size=1, max_size=3),
       st.lists(_env, max_size=3), st.integers(0, 2000))
def test_merge_is_idempotent(edits: list[ContainerEdits], env: list[str], uid: int) -> None:
    config = base_config(env=env, user={"uid": uid, "gid": uid})
    res = Resolution(("v.com/g=0",), tuple(EditStep("v.com/g=0", "/s.json", e) for e in edits))
    try:
        once = merge_edits(config, res, HOST_ALL, OPTS).config
    except InjectionError:
        return  # e.g. a declared FIFO on a char device: rejected, nothing to compare
    twice = merge_edits(once, res, HOST_ALL, OPTS).config
    assert json.dumps(twice) == json.dumps(once)
    lds = [e for e in once["process"]["env"] if e.startswith("LD_LIBRARY_PATH=")]
    assert len(lds) == 1 and lds[0].startswith("LD_LIBRARY_PATH=/usr/local/nvidia/lib64")
    depths = [m["destination"].count("/") for m in once["mounts"]]
    assert depths == sorted(depths)
    paths = [d["path"] for d in once.get("linux", {}).get("devices", [])]
    assert len(paths) == len(set(paths))


def test_env_key_repeated_by_image_is_kept_once() -> None:
    config = base_config(env=["LD_LIBRARY_PATH=1", "X=1", "LD_LIBRARY_PATH=2"])
    env = merge(config, ContainerEdits(env=("LD_LIBRARY_PATH=/l",)))["process"]["env"]
    assert env == ["LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/l", "X=1"]


def test_cgroup_rules_already_in_the_config_are_not_added_again() -> None:
    config = base_config()
    config["linux"]["resources"] = {"devices": [
        {"allow": False, "access": "rwm"},
        {"access": "rwm", "minor": 0, "major": 195, "type": "c", "allow": True},  # same, reordered
        {"allow": True, "type": "c", "major": [195], "minor": 1, "access": "rwm"},  # odd, kept
    ]}
    nodes = (DeviceNode("/dev/nvidia0", type="c", major=195, minor=0),
             DeviceNode("/dev/nvidia1", type="c", major=195, minor=1))
    rules = merge(config, ContainerEdits(device_nodes=nodes))["linux"]["resources"]["devices"]
    assert rules == [*config["linux"]["resources"]["devices"],
                     {"allow": True, "type": "c", "major": 195, "minor": 1, "access": "rwm"}]


def test_permissions_none_is_empty_cgroup_access_not_the_word() -> None:
    """CDI SPEC.md: "'none' requests empty permissions"; the OCI rule gets ""."""
    from ateom.cdi.model import ContainerEdits, DeviceNode, EditStep, Resolution
    from ateom.inject.merge import HostFacts, merge_edits
    from ateom.inject.options import InjectOptions

    node = DeviceNode("/dev/x", type="c", major=1, minor=3, permissions="none")
    step = EditStep("vendor.com/c=x", "/spec.json", ContainerEdits(device_nodes=(node,)))
    merged = merge_edits({"process": {}}, Resolution(("vendor.com/c=x",), (step,)),
                         HostFacts(nodes={}), InjectOptions())
    [rule] = merged.config["linux"]["resources"]["devices"]
    assert rule["access"] == "" and rule["allow"] is True
