"""ateom's own edits of a bundle's config.json (pure)."""

from __future__ import annotations

import pytest

from ateom.daemon.bundles import edits
from ateom.errors import AteomError, ErrorCode

# -- bundle edits ---------------------------------------------------------------

def test_prepare_config_sets_cri_annotations_and_strips_gvisor_ones() -> None:
    cfg = {"process": {"args": ["sh"]}, "annotations": {
        "dev.gvisor.internal.nvproxy": "true", "dev.gvisor.flag.debug": "1", "keep": "x",
        edits.CONTAINER_TYPE: "sandbox"}}
    out = edits.prepare_config(cfg, "/b/app/config.json", container="app",
                                 sandbox_id="_pause", is_sandbox=False)
    assert out.removed_annotations == ("dev.gvisor.flag.debug", "dev.gvisor.internal.nvproxy")
    assert out.config["annotations"] == {
        "keep": "x", edits.CONTAINER_TYPE: "container", edits.SANDBOX_ID: "_pause",
        edits.CONTAINER_NAME: "app"}
    assert cfg["annotations"]["dev.gvisor.internal.nvproxy"] == "true"  # input untouched


def test_prepare_config_sandbox_resources() -> None:
    out = edits.prepare_config({"process": {}}, "p", container="_pause", sandbox_id="_pause",
                                 is_sandbox=True, cpu_milli=1500, memory_bytes=1 << 30)
    assert out.config["annotations"][edits.CONTAINER_TYPE] == "sandbox"
    assert out.config["linux"]["resources"] == {
        "cpu": {"period": 100000, "quota": 150000}, "memory": {"limit": 1 << 30}}


def test_prepare_config_leaves_its_input_as_it_was() -> None:
    import copy

    cfg = {"process": {"args": ["sh"], "env": ["A=1"]}, "mounts": [{"destination": "/x"}],
           "annotations": {"dev.gvisor.x": "1"},
           "linux": {"namespaces": [{"type": "pid"}],
                     "resources": {"cpu": {"shares": 2}, "memory": {"limit": 7}}}}
    before = copy.deepcopy(cfg)
    out = edits.prepare_config(cfg, "p", container="_pause", sandbox_id="s", is_sandbox=True,
                                 cpu_milli=500, memory_bytes=1 << 20)
    assert cfg == before
    assert out.config["linux"]["resources"] == {
        "cpu": {"shares": 2, "period": 100000, "quota": 50000}, "memory": {"limit": 1 << 20}}
    assert out.config["linux"]["namespaces"] == [{"type": "pid"}]
    assert out.config["mounts"] == cfg["mounts"] and out.config["process"] == cfg["process"]


@pytest.mark.parametrize("cfg", [{"process": {}, "linux": []},
                                 {"process": {}, "linux": {"resources": "x"}}])
def test_prepare_config_refuses_a_linux_section_that_is_not_an_object(
        cfg: dict[str, object]) -> None:
    with pytest.raises(AteomError, match="/b/config.json") as err:
        edits.prepare_config(cfg, "/b/config.json", container="_pause", sandbox_id="s",
                               is_sandbox=True, cpu_milli=100)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_foreign_hooks_refused() -> None:
    cfg = {"process": {}, "hooks": {"prestart": [{"path": "/bin/evil"}]}}
    with pytest.raises(AteomError, match=r"hooks.prestart\[0\] \(/bin/evil\)") as err:
        edits.refuse_foreign_hooks(cfg, "p")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    edits.refuse_foreign_hooks({"process": {}, "hooks": {}}, "p")
    # Hooks the injector added (after the check) are kept for runsc.
    kept = edits.prepare_config(cfg, "p", container="a", sandbox_id="s", is_sandbox=False)
    assert kept.config["hooks"] == cfg["hooks"]


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b'{"process": 1}', b'{"root": {}}',
                                 b'{"process": {}, "annotations": []}',
                                 b'{"process": {}, "annotations": {"a": 1}}',
                                 b'{"process": {}, "linux": []}', b'{"process": {}, "mounts": {}}',
                                 # The hardening issue's: each was another code, or INTERNAL.
                                 b'{"process": {"env": "PATH=/bin"}}',
                                 b'{"process": {"env": ["A=1\\u0000B"]}}',
                                 b'{"process": {"args": ["\xff"]}}',
                                 b'{"process": {}, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                                 ])
def test_corrupt_config(raw: bytes) -> None:
    with pytest.raises(AteomError, match="/b/config.json") as err:
        edits.parse_config(raw, "/b/config.json")
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert len(str(err.value)) < 600  # the input is quoted short, never echoed whole
