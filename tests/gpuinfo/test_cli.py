"""`ateom checkpoint-info`: records written by ateom.gpuinfo.record, read back and
judged against simulated workers (recorded GPU nodes, a runsc answering --version)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ateom.cli import main
from ateom.gpuinfo.gather import gather_worker_gpus
from ateom.gpuinfo.record import (
    RECORD_FILE,
    CompatRecord,
    ContainerDevices,
    RunscBuild,
    build_record,
    record_json,
    write_record,
)
from tests.support.gpu_node import GpuNode, recorded_fixture, write_gpu_node

DIGEST = "sha256:" + "cd" * 32


def fake_runsc(directory: Path, version: str) -> Path:
    """Answers `--version` as a release build does; every other probe with nothing."""
    path = directory / "runsc"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n"
                    f'[ "$1" = --version ] && printf "runsc version {version}\\nspec: 1.2.1\\n"\n'
                    "exit 0\n")
    path.chmod(0o755)
    return path


def node(tmp_path: Path, fixture: str, minors: list[int] | None = None) -> GpuNode:
    return write_gpu_node(tmp_path / f"node-{fixture}", recorded_fixture(fixture),
                          pod_minors=minors)


def checkpoint(tmp_path: Path, saved_on: GpuNode, runsc: str = "release-20260706.0",
               **record: str) -> tuple[Path, CompatRecord]:
    """A checkpoint dir with the record of an actor that held `saved_on`'s GPUs."""
    gpus = gather_worker_gpus(proc_root=saved_on.proc_root, gpu_glob=saved_on.gpu_glob,
                              nvidia_smi=saved_on.nvidia_smi)
    rec = build_record(runsc=RunscBuild(runsc), driver_version=gpus.driver_version,
                       gpus=gpus.gpus, containers=[ContainerDevices(
                           "trainer", ("nvidia.com/gpu=0", "nvidia.com/gpu=1"), DIGEST)],
                       **record)
    directory = tmp_path / "ckpt"
    directory.mkdir()
    write_record(str(directory), rec, beneath=str(tmp_path))
    return directory, rec


def on_worker(monkeypatch: pytest.MonkeyPatch, here: GpuNode, runsc: Path | None) -> list[str]:
    """The daemon's environment on `here`; the flags checkpoint-info needs beyond it."""
    monkeypatch.setenv("ATEOM_GPU_GLOB", here.gpu_glob)
    monkeypatch.setenv("ATEOM_NVIDIA_DRIVER_ROOT", str(here.root))  # bin/nvidia-smi
    monkeypatch.setenv("ATEOM_RUNSC", str(runsc) if runsc else str(here.root / "no-runsc"))
    monkeypatch.delenv("ATEOM_NVPROXY_CAPABILITIES", raising=False)
    return ["--proc-root", here.proc_root]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["checkpoint-info", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- the record ------------------------------------------------------------------------


def test_prints_the_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = node(tmp_path, "h200-8gpu", [2, 3])
    directory, rec = checkpoint(tmp_path, saved, nvproxy_capabilities="compute,utility",
                                snapshot_uri="gs://bucket/root/actors/a1/snapshots/5678")
    code, out, _ = run(capsys, str(directory))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"{directory}: {RECORD_FILE} (format 1.1, written by ateom " \
                       f"{rec.ateom_version})"
    assert lines[1:6] == ["  runsc: release-20260706.0", "  driver: 580.95.05",
                          "  nvproxy capabilities: 'compute,utility'",
                          "  snapshot: gs://bucket/root/actors/a1/snapshots/5678", "  GPUs: 2"]
    assert lines[6] == ("    GPU 0 (minor 2, GPU-a0000000-0000-4000-8000-000000000002, "
                        "0000:72:00.0, 10de:2335 NVIDIA H200, 143771 MiB)")
    assert f"    trainer: nvidia.com/gpu=0, nvidia.com/gpu=1 (edits {DIGEST})" in lines


def test_json_is_the_record_as_stored(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    directory, rec = checkpoint(tmp_path, node(tmp_path, "mixed-5090-4090"))
    code, out, _ = run(capsys, str(directory), "--json")
    doc = json.loads(out)
    assert code == 0
    assert doc == {"directory": str(directory), "record": json.loads(record_json(rec)),
                   "ignored": [], "here": None}


def test_a_newer_minors_fields_are_read_and_named(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    directory, rec = checkpoint(tmp_path, node(tmp_path, "t4-1gpu-525"))
    doc = json.loads(record_json(rec))
    doc.update(format_version="1.4", mig_layout={"0": "1g.10gb"})
    (directory / RECORD_FILE).write_text(json.dumps(doc))
    code, out, _ = run(capsys, str(directory))
    assert code == 0
    assert out.splitlines()[-1] == "  ignored (a newer format's fields): mig_layout"


def test_no_record_restores_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ckpt").mkdir()
    flags = on_worker(monkeypatch, node(tmp_path, "t4-1gpu-525"), None)
    for extra in ([], ["--here", *flags]):
        code, out, _ = run(capsys, str(tmp_path / "ckpt"), *extra)
        assert code == 0
        assert out == (f"{tmp_path / 'ckpt'}: no {RECORD_FILE}: a CPU-only checkpoint, or one "
                       "taken before ateom wrote compatibility records; it restores as "
                       "before, with nothing to check\n")
    code, out, _ = run(capsys, str(tmp_path / "ckpt"), "--json")
    assert json.loads(out)["record"] is None


@pytest.mark.parametrize(("damage", "says"), [
    (lambda text: text[: len(text) // 2], "not valid JSON (truncated or corrupt)"),
    (lambda text: text.replace('"1.1"', '"2.0"'), "record format '2.0' written by ateom"),
    (lambda text: text.replace('"580.95.05"', '"580"'), "driver_version: must be N.N[.N]"),
])
def test_a_corrupt_record_is_refused_with_the_parsers_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: object,
        says: str) -> None:
    directory, _ = checkpoint(tmp_path, node(tmp_path, "h200-8gpu", [0]))
    path = directory / RECORD_FILE
    path.write_text(damage(path.read_text()))  # type: ignore[operator]
    code, out, err = run(capsys, str(directory))
    assert (code, out) == (4, "")  # the input is unusable: not "cannot be restored here"
    assert err.startswith(f"ateom checkpoint-info: {path}: ") and says in err, err
    # With --json, the error is the JSON on stdout.
    code, out, err = run(capsys, str(directory), "--json")
    assert (code, err) == (4, "")
    said = json.loads(out)
    assert said["exit_code"] == 4 and says in said["error"] and str(path) in said["error"]


def test_a_symlinked_record_is_refused(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    directory, _ = checkpoint(tmp_path, node(tmp_path, "h200-8gpu", [0]))
    real = tmp_path / "elsewhere.json"
    (directory / RECORD_FILE).rename(real)
    (directory / RECORD_FILE).symlink_to(real)
    code, _, err = run(capsys, str(directory))
    assert code == 4 and str(directory / RECORD_FILE) in err


def test_not_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(tmp_path / "gone"))
    assert code == 4 and "not a checkpoint directory" in err


# -- --here ------------------------------------------------------------------------------


def test_restorable_on_the_same_worker(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    worker = node(tmp_path, "h200-8gpu", [2, 3])
    directory, _ = checkpoint(tmp_path, worker)
    flags = on_worker(monkeypatch, worker, fake_runsc(tmp_path / "bin", "release-20260706.0"))
    code, out, _ = run(capsys, str(directory), "--here", *flags)
    assert code == 0, out
    here = out[out.index("this worker:"):].splitlines()
    assert here[0] == (f"this worker: driver 580.95.05, runsc release-20260706.0 "
                       f"({tmp_path / 'bin' / 'runsc'}), 2 GPU(s), GPU remap on restore: yes")
    assert here[1].startswith("restorable here: yes")
    assert here[2] == ("  saved GPU 0 (minor 2, GPU-a0000000-0000-4000-8000-000000000002, "
                       "0000:72:00.0, 10de:2335 NVIDIA H200, 143771 MiB) -> GPU 0 (minor 2, "
                       "GPU-a0000000-0000-4000-8000-000000000002, 0000:72:00.0, 10de:2335 "
                       "NVIDIA H200, 143771 MiB)")
    assert "remaps" not in out.split("restorable here")[1]


def test_other_cards_of_the_model_with_a_remapping_runsc(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    directory, _ = checkpoint(tmp_path, node(tmp_path, "h200-8gpu", [2, 3]))
    other = write_gpu_node(tmp_path / "other", recorded_fixture("h200-8gpu"), pod_minors=[6, 7])
    flags = on_worker(monkeypatch, other, fake_runsc(tmp_path / "bin", "release-20260706.0"))
    code, out, _ = run(capsys, str(directory), "--here", "--json", *flags)
    here = json.loads(out)["here"]
    assert code == 0 and here["restorable"] and here["remap"]
    assert [(m["saved"]["minor"], m["target"]["minor"]) for m in here["mapping"]] == [
        (2, 6), (3, 7)]
    assert here["runsc"] == {"path": str(tmp_path / "bin" / "runsc"),
                             "version": "release-20260706.0", "commit": "", "error": "",
                             "remaps_gpus": True}


def test_other_cards_without_remap_are_refused_naming_the_slots(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    directory, _ = checkpoint(tmp_path, node(tmp_path, "h200-8gpu", [2, 3]),
                              runsc="release-20260608.0")
    other = write_gpu_node(tmp_path / "other", recorded_fixture("h200-8gpu"), pod_minors=[6, 7])
    flags = on_worker(monkeypatch, other, fake_runsc(tmp_path / "bin", "release-20260608.0"))
    code, out, _ = run(capsys, str(directory), "--here", *flags)
    assert code == 1
    refused = [ln for ln in out.splitlines() if ln.startswith("  refused: ")]
    assert len(refused) == 2 and all(r.startswith("  refused: gpus: checkpoint GPU ")
                                     for r in refused)
    assert "minor 2: not free or absent" in refused[0] and "cannot remap" in refused[0]


def test_another_driver_and_model_are_every_refusal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    directory, _ = checkpoint(tmp_path, node(tmp_path, "h200-8gpu", [0, 1]))
    t4 = node(tmp_path, "t4-1gpu-525")
    flags = on_worker(monkeypatch, t4, fake_runsc(tmp_path / "bin", "release-20260706.0"))
    code, out, _ = run(capsys, str(directory), "--here", "--json", *flags)
    here = json.loads(out)["here"]
    assert code == 1 and not here["restorable"]
    assert [r["field"] for r in here["refusals"]] == ["driver_version", "gpus"]
    driver = here["refusals"][0]
    assert (driver["checkpoint"], driver["worker"]) == ("580.95.05", "525.89.02")
    assert "different GPU model" in here["refusals"][1]["reason"]
    assert here["worker"]["gpus"][0]["name"] == "Tesla T4"


def test_another_runsc_build_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    worker = node(tmp_path, "h200-8gpu", [2, 3])
    directory, _ = checkpoint(tmp_path, worker)
    flags = on_worker(monkeypatch, worker, fake_runsc(tmp_path / "bin", "release-20260817.0"))
    code, out, _ = run(capsys, str(directory), "--here", *flags)
    assert code == 1
    assert ("  refused: runsc: checkpoint release-20260706.0, worker release-20260817.0: a "
            "checkpoint image is restorable only by the runsc build that wrote it") in out


def test_no_usable_runsc_is_a_refusal_and_inventory_problems_are_shown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    worker = write_gpu_node(tmp_path / "w", recorded_fixture("h200-8gpu"), pod_minors=[2, 3],
                            smi="fail")
    directory, _ = checkpoint(tmp_path, node(tmp_path, "h200-8gpu", [2, 3]))
    flags = on_worker(monkeypatch, worker, None)
    code, out, _ = run(capsys, str(directory), "--here", *flags)
    assert code == 1
    assert f"runsc {worker.root / 'no-runsc'} unusable" in out
    assert "  worker problem: " in out and "exit 9" in out
    assert "  refused: runsc: checkpoint release-20260706.0, worker unusable (runsc " in out
