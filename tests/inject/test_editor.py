"""The copy-on-write config editor the merge writes through (no filesystem)."""

from __future__ import annotations

import copy
from typing import Any

from ateom.cdi.model import ContainerEdits, DeviceNode, EditStep, Mount, Resolution
from ateom.inject.editor import ConfigEditor
from ateom.inject.merge import HostFacts, HostNode, merge_edits
from ateom.inject.options import InjectOptions


def config() -> dict[str, Any]:
    return {
        "process": {"env": ["A=1"], "user": {"uid": 0}, "capabilities": {"bounding": ["X"]}},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"namespaces": [{"type": "pid"}], "resources": {"memory": {"limit": 1}}},
    }


def test_first_write_copies_the_path_to_the_section_and_shares_the_rest() -> None:
    given = config()
    snapshot = copy.deepcopy(given)
    editor = ConfigEditor(given)
    env = editor.array("process", "env")
    env.append("B=2")
    out = editor.result()
    assert given == snapshot  # the input is never written
    assert out["process"]["env"] == ["A=1", "B=2"]
    assert out is not given and out["process"] is not given["process"]
    # Untouched subtrees are the input's own objects, not copies.
    assert out["process"]["capabilities"] is given["process"]["capabilities"]
    assert out["process"]["user"] is given["process"]["user"]
    assert out["mounts"] is given["mounts"] and out["linux"] is given["linux"]


def test_a_section_is_copied_once_then_written_in_place() -> None:
    editor = ConfigEditor(config())
    devices = editor.array("linux", "resources", "devices")
    devices.append({"allow": False})
    again = editor.array("linux", "resources", "devices")
    assert again is devices
    assert editor.section("linux") is editor.section("linux")
    assert editor.get("linux", "resources", "devices") == [{"allow": False}]
    assert editor.get("linux", "resources", "memory") == {"limit": 1}


def test_put_hands_the_value_to_the_editor() -> None:
    given = config()
    editor = ConfigEditor(given)
    mounts = [{"destination": "/x"}]
    editor.put("mounts", value=mounts)
    assert editor.array("mounts") is mounts  # written in place from now on, not copied
    editor.put("annotations", "k", value="v")  # parents are made
    assert editor.result()["annotations"] == {"k": "v"}
    assert "annotations" not in given and given["mounts"][0]["destination"] == "/proc"


def test_missing_null_and_wrong_typed_sections_read_as_absent_and_are_made_anew() -> None:
    given: dict[str, Any] = {"hooks": None, "linux": "odd", "process": {"env": None}}
    editor = ConfigEditor(given)
    assert editor.get("linux", "devices") is None
    assert editor.get("nope", "deeper") is None
    editor.array("hooks", "createContainer").append({"path": "/h"})
    editor.section("linux")["intelRdt"] = {}
    editor.array("process", "env").append("A=1")
    assert editor.result() == {"hooks": {"createContainer": [{"path": "/h"}]},
                               "linux": {"intelRdt": {}}, "process": {"env": ["A=1"]}}
    assert given == {"hooks": None, "linux": "odd", "process": {"env": None}}


def test_no_edit_gives_an_equal_new_top_level() -> None:
    given = config()
    out = ConfigEditor(given).result()
    assert out == given and out is not given
    assert all(out[k] is given[k] for k in given)


def test_merge_shares_what_it_does_not_edit_with_the_input() -> None:
    given = config()
    snapshot = copy.deepcopy(given)
    node = DeviceNode("/dev/gpu0", type="c", major=195, minor=0)
    edits = ContainerEdits(env=("B=2",), device_nodes=(node,),
                           mounts=(Mount("/h/lib.so.1", "/usr/lib/lib.so.1"),))
    res = Resolution(("v.com/g=0",), (EditStep("v.com/g=0", "/s.json", edits),))
    out = merge_edits(given, res, HostFacts({"/x": HostNode("c", 1, 3, 0o666)}),
                      InjectOptions()).config
    assert given == snapshot
    assert out["process"]["capabilities"] is given["process"]["capabilities"]
    assert out["linux"]["namespaces"] is given["linux"]["namespaces"]
    assert out["linux"]["resources"]["memory"] is given["linux"]["resources"]["memory"]
    assert out["mounts"][0] is given["mounts"][0]  # the image's own mount entry
    assert out["linux"]["devices"] == [{"path": "/dev/gpu0", "type": "c", "major": 195,
                                        "minor": 0, "fileMode": 0o666}]
