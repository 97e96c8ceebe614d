"""`ateom cdi validate|devices|resolve`, through the real command-line entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ateom.cli import main

REPO = Path(__file__).resolve().parents[2]
VALID = REPO / "cdi_specs" / "valid"
INVALID = REPO / "cdi_specs" / "invalid"

GOOD = (
    '{"cdiVersion": "0.5.0", "kind": "v.com/gpu", '
    '"devices": [{"name": "0", "containerEdits": {"env": ["A=1"]}}]}'
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_valid_directory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "cdi", "validate", str(VALID))
    assert code == 0, err
    assert err == ""
    assert f"{VALID / 'nvidia.yaml'}: valid (kind nvidia.com/gpu" in out


def test_validate_invalid_directory_prints_one_line_per_problem(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "cdi", "validate", str(INVALID))
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    specs = sorted(p for p in INVALID.iterdir() if not p.name.endswith(".expected"))
    for spec in specs:
        expected = Path(str(spec) + ".expected").read_text().strip()
        assert any(line.startswith(f"{spec}: ") and expected in line for line in lines), spec
    assert all(line.startswith(str(INVALID)) for line in lines)
    assert len(lines) == len(specs)  # each breaks one rule: one line each, no extras


def test_validate_whole_tree_fails_on_invalid_and_passes_valid(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "cdi", "validate", str(REPO / "cdi_specs"))
    assert code == 1
    assert "nvidia.yaml: valid" in out
    assert "unknown-field.json: devices[2].containerEdits.deviceNodes[0].majr: unknown field" in err


def test_validate_reports_every_problem_of_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "cdiVersion: 0.5.0\nkind: v.com/gpu\ndevices:\n"
        "  - name: a\n    containerEdits: {env: [X]}\n"
        "  - name: b\n    containerEdits: {env: [Z]}\n"
    )
    code, _, err = run(capsys, "cdi", "validate", str(bad))
    assert code == 1
    assert err.splitlines() == [
        f"{bad}: devices[0].containerEdits.env[0]: env entry 'X' must be KEY=VALUE "
        "with a non-empty KEY",
        f"{bad}: devices[1].containerEdits.env[0]: env entry 'Z' must be KEY=VALUE "
        "with a non-empty KEY",
    ]


def test_validate_warnings_do_not_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "w.json"
    spec.write_text(GOOD.replace('"env": ["A=1"]', '"deviceNodes": [{"path": "dev/x"}]'))
    code, out, err = run(capsys, "cdi", "validate", str(spec))
    assert code == 0
    assert "valid" in out
    assert err.strip() == (
        f"{spec}: warning: devices[0].containerEdits.deviceNodes[0].path: "
        "device node path 'dev/x' is not absolute"
    )


def test_validate_missing_path_and_bad_extension(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    txt = tmp_path / "spec.txt"
    txt.write_text(GOOD)
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    code, _, err = run(
        capsys, "cdi", "validate", str(tmp_path / "nope.json"), str(txt), str(empty_dir)
    )
    assert code == 1
    assert err.splitlines() == [
        f"{tmp_path / 'nope.json'}: no such file or directory",
        f"{txt}: not a CDI spec file name (want .json, .yaml or .yml)",
        f"{empty_dir}: no CDI spec files (.json, .yaml, .yml) found",
    ]


def test_devices_lists_sorted_names(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "cdi", "devices", "--spec-dir", str(VALID))
    assert code == 0 and err == ""
    names = out.splitlines()
    assert names == sorted(names)
    assert {
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=0:0",
        "amd.com/gpu=all",
        "intel.com/gpu=card1",
    } <= set(names)


def test_devices_json_and_repeated_spec_dirs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    override = tmp_path / "run"
    override.mkdir()
    (override / "amd.json").write_text(GOOD.replace("v.com/gpu", "amd.com/gpu"))
    (override / "broken.json").write_text("{}")
    code, out, err = run(
        capsys, "cdi", "devices", "--spec-dir", str(VALID), "--spec-dir", str(override), "--json"
    )
    assert code == 1  # broken.json could not be read: listed, and a failure
    doc = json.loads(out)
    assert doc["specDirs"] == [str(VALID), str(override)]
    by_name = {d["name"]: d for d in doc["devices"]}
    assert by_name["amd.com/gpu=0"] == {
        "name": "amd.com/gpu=0",
        "kind": "amd.com/gpu",
        "device": "0",
        "specPath": str(override / "amd.json"),
        "priority": 1,
    }
    assert by_name["amd.com/gpu=1"]["specPath"] == str(VALID / "amd.yaml")
    assert by_name["amd.com/gpu=1"]["priority"] == 0
    assert str(override / "broken.json") in doc["specErrors"]
    assert f"{override / 'broken.json'}: cdiVersion: required field is missing" in err


def test_devices_uses_environment_spec_dirs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ATEOM_CDI_SPEC_DIRS", f"/nonexistent:{VALID}")
    code, out, _ = run(capsys, "cdi", "devices")
    assert code == 0
    assert "nvidia.com/gpu=7" in out.splitlines()


def test_spec_dir_flags_override_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ATEOM_CDI_SPEC_DIRS", str(VALID))
    (tmp_path / "gpu.json").write_text(GOOD)
    code, out, _ = run(capsys, "cdi", "devices", "--spec-dir", str(tmp_path))
    assert (code, out) == (0, "v.com/gpu=0\n")


def test_resolve_prints_merged_edits(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "cdi", "resolve", "--spec-dir", str(VALID), "nvidia.com/gpu=1", "amd.com/gpu=0"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["devices"] == ["nvidia.com/gpu=1", "amd.com/gpu=0"]
    assert [s["origin"] for s in doc["steps"]] == [
        "nvidia.com/gpu (spec-level)",
        "nvidia.com/gpu=1",
        "amd.com/gpu (spec-level)",
        "amd.com/gpu=0",
    ]
    merged = doc["containerEdits"]
    paths = [n["path"] for n in merged["deviceNodes"]]
    assert paths.index("/dev/nvidiactl") < paths.index("/dev/nvidia1") < paths.index("/dev/kfd")
    assert "NVIDIA_VISIBLE_DEVICES=void" in merged["env"]
    kfd = next(n for n in merged["deviceNodes"] if n["path"] == "/dev/kfd")
    assert kfd == {
        "path": "/dev/kfd",
        "hostPath": "/dev/kfd",
        "type": "c",
        "major": 235,
        "minor": 0,
        "permissions": "rw",
    }
    assert merged["mounts"][0]["options"] == ["ro", "nosuid", "nodev", "bind"]


def test_resolve_failure_explains_every_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "cdi",
        "resolve",
        "--spec-dir",
        str(VALID),
        "nvidia.com/gpu=8",
        "nvidia.com/gpu=0",
        "acme.com/fpga=0",
    )
    assert code == 1
    assert out == ""
    assert "unresolvable CDI devices:" in err
    assert "nvidia.com/gpu=8: no device '8'" in err
    assert "acme.com/fpga=0: no CDI spec for kind 'acme.com/fpga'" in err
    assert "nvidia.com/gpu=0:" not in err


def test_python_dash_m_entry_point_runs_the_demo_commands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ateom", "cdi", "validate", "cdi_specs/valid"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "ateom", "cdi", "devices", "--spec-dir", "cdi_specs/valid"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "nvidia.com/gpu=all" in done.stdout.splitlines()


def test_validate_warns_about_same_directory_duplicates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.json").write_text(GOOD)
    (tmp_path / "b.json").write_text(GOOD)
    code, out, err = run(capsys, "cdi", "validate", str(tmp_path))
    assert code == 0
    assert out.count(": valid") == 2
    assert err.strip() == (
        f"{tmp_path / 'b.json'}: warning: device v.com/gpu=0 is also defined by "
        f"{tmp_path / 'a.json'} in the same directory; as a spec directory, neither would resolve"
    )


def test_validate_hand_crafted_bad_inputs_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Odd files in one directory: each bad one gets its own single `PATH: reason`
    line; the good ones (a symlinked spec, numbers as names) stay valid."""
    good = tmp_path / "good.yaml"
    good.write_text(
        "cdiVersion: 0.5.0\nkind: v.com/gpu\ndevices:\n"
        "  - name: 0\n    containerEdits: {env: [A=1]}\n"
        "  - name: 1:0\n    containerEdits: {env: [A=1]}\n"
    )
    (tmp_path / "link.yaml").symlink_to(good)
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "dup.yaml").write_text("cdiVersion: 0.5.0\nkind: a/b\nkind: a/c\n")
    (tmp_path / "binary.json").write_bytes(bytes(range(256)))
    (tmp_path / "latin1.yaml").write_bytes(b"kind: caf\xe9\n")
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "newline-key.json").write_text(GOOD[:-1] + ', "x\\ny": 1}')
    (tmp_path / "tab.yaml").write_text("cdiVersion: 0.5.0\nkind: v.com/t\ndevices:\n\t- name: 0\n")
    (tmp_path / "typo.json").write_text(
        '{"cdiVersion": "0.5.0", "kind": "v.com/typo", "devices": [{"name": "0",'
        ' "containerEdits": {"deviceNode": [{"path": "/dev/x"}]}}]}')
    code, out, err = run(capsys, "cdi", "validate", str(tmp_path))
    assert code == 1
    assert out.splitlines() == [
        f"{good}: valid (kind v.com/gpu, cdiVersion 0.5.0, 2 devices)",
        f"{tmp_path / 'link.yaml'}: valid (kind v.com/gpu, cdiVersion 0.5.0, 2 devices)",
    ]
    expected = [
        ("binary.json", "not valid UTF-8 text: invalid start byte at byte 128"),
        ("broken.json", "invalid JSON at line 1 column 2"),
        ("dangling.json", "cannot read: No such file or directory"),
        ("dup.yaml", "invalid YAML: line 3 column 1: duplicate key 'kind'"),
        ("fifo.json", "not a regular file"),
        ("latin1.yaml", "not valid UTF-8 text"),
        ("newline-key.json", "['x\\ny']: unknown field"),
        ("tab.yaml", "invalid YAML: line 4 column 1: a tab: YAML indents with spaces, never tabs"),
        ("typo.json", "devices[0].containerEdits.deviceNode: unknown field "
                      "(did you mean deviceNodes?)"),
    ]
    problems = [line for line in err.splitlines() if ": warning: " not in line]
    assert len(problems) == len(expected), err
    for line, (name, reason) in zip(problems, expected, strict=True):
        assert line.startswith(f"{tmp_path / name}: {reason}"), line
    # link.yaml repeats good.yaml's devices in the same directory: a warning only.
    assert f"{tmp_path / 'link.yaml'}: warning: device v.com/gpu=0 is also defined by" in err


def test_resolve_explains_a_kind_whose_spec_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gpu.json").write_text(GOOD)
    (tmp_path / "nic.json").write_bytes(b"\xff")
    code, out, err = run(capsys, "cdi", "resolve", "--spec-dir", str(tmp_path), "v.com/nic=0")
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "ateom: unresolvable CDI device:",
        f"  v.com/nic=0: no CDI spec for kind 'v.com/nic' in the spec directories ({tmp_path}); "
        f"kinds available: v.com/gpu; spec files that failed to load, any of which may be it: "
        f"{tmp_path / 'nic.json'}: not valid UTF-8 text: invalid start byte at byte 0",
    ]


def test_validate_json_has_every_file_its_verdict_and_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "good.json").write_text(GOOD)
    (tmp_path / "typo.json").write_text(
        '{"cdiVersion": "0.5.0", "kind": "v.com/typo", "devices": [{"name": "0",'
        ' "containerEdits": {"deviceNode": [{"path": "/dev/x"}]}}]}')
    code, out, err = run(capsys, "cdi", "validate", "--json", str(tmp_path),
                         str(tmp_path / "absent"))
    assert (code, err) == (1, "")
    doc = json.loads(out)
    assert doc["ok"] is False
    by_path = {f["path"]: f for f in doc["files"]}
    good = by_path[str(tmp_path / "good.json")]
    assert good["valid"] is True and good["devices"] >= 1 and good["kind"]
    typo = by_path[str(tmp_path / "typo.json")]
    assert typo["valid"] is False
    assert typo["problems"] == [f"{tmp_path / 'typo.json'}: devices[0].containerEdits.deviceNode:"
                                " unknown field (did you mean deviceNodes?)"]
    assert by_path[str(tmp_path / "absent")]["problems"] == [
        f"{tmp_path / 'absent'}: no such file or directory"]
    code, out, _ = run(capsys, "cdi", "validate", "--json", str(tmp_path / "good.json"))
    assert code == 0 and json.loads(out)["ok"] is True
