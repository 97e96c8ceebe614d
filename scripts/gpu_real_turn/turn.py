"""A real CUDA actor's turn through ateom on a GPU machine (issue 30), in one command.

Run by ``scripts/gpu_real_turn.sh`` (which says how to prepare and carry what it
needs); everything lands under ``--out``:

1. node: the driver's /proc files, ``nvidia-smi -q``, the driver's files, the
   kernel and what runtime this machine is (gVisor cannot run runsc: then only
   steps 1-3), whether runsc runs a sandbox here, and nvproxy's driver list;
2. spec: the ``nvidia.com/gpu`` CDI spec (no nvidia-ctk on such a machine, so the
   spec nvidia-ctk would write, from the node's own nodes and libraries), ``ateom
   cdi validate``, ``ateom inject --dry-run`` on a bundle, ``ateom doctor --json``;
3. fixtures: the records above with UUIDs and serials scrubbed, laid out as
   ``tests/fixtures/gpu/<name>/`` (``fixtures.tar.gz``);
4. turn: ``ateom serve`` with this runsc and cuda-checkpoint; a GPU actor whose
   app (``turn_app.c``, kernels ``turn_kernels.cu``) fills N MiB of device memory
   with a pattern and ticks a device-side counter: Run, GetWorkloadStats,
   Checkpoint (the record, the image, the GPU freed), Restore (the pattern intact,
   the counter going on), Terminate; then two actors taking turns on one GPU;
5. sizes: the same turn's timings for each ``--sizes`` entry that fits the budget.

``report.json`` is rewritten after every step (a run cut short keeps what it
did); ``summary.md`` is the figures as a table; ``logs.tar.gz`` the daemon's,
runsc's and the app's logs (each call's phases are in the daemon's JSON log:
``tests/support/attribution.py`` reads them back here). Exit 0 when every step
that ran passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from ateom.gpuinfo.gather import device_memory_by_pid
from ateom.process.runner import subprocess_runner
from scripts.gpu_real_turn.actor import App, ticks, wait_ticks
from scripts.gpu_real_turn.node import (
    Skip,
    StepFailed,
    add_file_tail,
    dump,
    run,
)
from scripts.gpu_real_turn.records import (
    can_run_runsc,
    doctor,
    pack_fixtures,
    record_node,
    write_spec,
)

MEMORY_ARGS = ("--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits")


@dataclass
class Report:
    """Every step's outcome, written to `path` after each step."""

    path: Path
    started: float = field(default_factory=time.monotonic)
    steps: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def step(self, name: str, fn: Callable[[dict[str, Any]], None]) -> bool:
        """Run `fn(data)`; record ok / failed (with why) / skipped and its time."""
        data: dict[str, Any] = {}
        began = time.monotonic()
        status, why = "ok", ""
        print(f"== {name}", flush=True)
        try:
            fn(data)
        except Skip as exc:
            status, why = "skipped", str(exc)
        except grpc.RpcError as exc:
            status, why = "failed", f"{exc.code().name}: {exc.details()}"
        except StepFailed as exc:
            status, why = "failed", str(exc)
        except Exception as exc:  # noqa: BLE001 - a step's failure is reported, not raised
            # Unforeseen: where it broke comes back too (the first real run is the test).
            status, why = "failed", f"{type(exc).__name__}: {exc}"
            data["traceback"] = traceback.format_exc()[-3000:]
        seconds = round(time.monotonic() - began, 2)
        self.steps.append({"step": name, "status": status, "why": why, "seconds": seconds,
                           **data})
        print(f"   {status} in {seconds} s{': ' + why if why else ''}", flush=True)
        self.write()
        return status == "ok"

    def write(self) -> None:
        self.path.write_text(dump({"facts": self.facts, "steps": self.steps,
                                   "elapsed_s": round(time.monotonic() - self.started, 1)}))

    def ok(self) -> bool:
        return all(s["status"] != "failed" for s in self.steps)


# -- the run ------------------------------------------------------------------------------


class Turns:
    """ateom serve on this node and the actors it runs; `args` as parsed by `main`."""

    def __init__(self, args: argparse.Namespace, report: Report) -> None:
        self.args = args
        self.report = report
        self.work: Path = args.work
        self.actors = self.work / "actors"
        self.run_dir = self.work / "run"
        self.socket = self.run_dir / "ateom.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.daemon_log = self.work / "ateom.log"
        self.channel: grpc.Channel | None = None
        self.app = App(args, report.facts)

    # -- the daemon ----------------------------------------------------------------------

    def serve_argv(self) -> list[str]:
        a = self.args
        argv = [sys.executable, "-m", "ateom", "serve", "--socket", str(self.socket),
                "--actors-root", str(self.actors), "--run-dir", str(self.run_dir),
                "--runsc", a.runsc, "--spec-dir", str(self.work / "cdi"),
                "--gpu-glob", a.gpu_glob, "--proc-root", a.proc_root,
                "--driver-root", a.driver_root, "--cuda-checkpoint", a.cuda_checkpoint,
                "--gpu-placement", "exclusive", "--max-actors", "2",
                "--runsc-timeout", "600", "--cuda-checkpoint-timeout", "600",
                "--kill-grace", "2", "--shutdown-grace", "10",
                "--runsc-global-flag=--network=none", "--runsc-global-flag=--ignore-cgroups"]
        pin = self.report.facts.get("nvproxy_pin")
        return [*argv, "--nvproxy-driver-version", pin] if pin else argv

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{os.path.dirname(self.args.nvidia_smi)}:{env.get('PATH', os.defpath)}"
        env["ATEOM_NVIDIA_TOOLKIT_DIR"] = str(self.work / "toolkit")
        return env

    def serve(self, data: dict[str, Any]) -> None:
        self.actors.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        argv = self.serve_argv()
        data["argv"] = argv
        with open(self.daemon_log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env())
        self.channel = grpc.insecure_channel(f"unix:{self.socket}")
        self.ateom = pb_grpc.AteomStub(self.channel)
        self.inspect = pb_grpc.InspectStub(self.channel)
        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + 60
        status = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise StepFailed(f"ateom serve exited {self.proc.returncode}: "
                                 f"{self.daemon_log.read_text(errors='replace')[-1500:]}")
            try:
                resp = health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                status = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
                if status == "SERVING":
                    data["serving_after_s"] = round(60 - (deadline - time.monotonic()), 2)
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
        why = ""
        try:
            why = str(self.inspect.GetStatus(pb.GetStatusRequest(), timeout=5).not_ready)
        except grpc.RpcError as exc:
            why = str(exc.code())
        raise StepFailed(f"ateom serve not SERVING within 60 s ({status}): {why}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.channel is not None:
            self.channel.close()

    # -- calls -----------------------------------------------------------------------------

    def dirs(self, uid: str) -> pb.ActorDirs:
        root = self.actors / uid
        return pb.ActorDirs(root_dir=str(root), oci_bundle_dir=str(root / "bundles"),
                            checkpoint_dir=str(root / "checkpoint"),
                            restore_dir=str(root / "restore"))

    def app_log(self, uid: str) -> Path:
        return self.run_dir / "logs" / uid / "app.log"

    def spec(self) -> pb.WorkloadSpec:
        return pb.WorkloadSpec(containers=[pb.Container(name="app")])

    def start(self, uid: str, mib: int) -> float:
        """RunWorkload: the call's seconds (raises grpc.RpcError when refused)."""
        began = time.monotonic()
        self.ateom.RunWorkload(pb.RunWorkloadRequest(
            actor_uid=uid, actor_name=uid, actor_dirs=self.dirs(uid), spec=self.spec(),
            gpus=pb.GpuRequest(count=1)), timeout=self.call_bound(mib))
        return time.monotonic() - began

    def call_bound(self, mib: int) -> float:
        return 120 + mib / 100  # 100 MB/s: far below any disk a GPU machine has

    def checkpoint(self, uid: str, mib: int) -> float:
        began = time.monotonic()
        self.ateom.CheckpointWorkload(pb.CheckpointWorkloadRequest(
            actor_uid=uid, actor_name=uid, actor_dirs=self.dirs(uid)),
            timeout=self.call_bound(mib))
        return time.monotonic() - began

    def hand_over(self, uid: str) -> None:
        """The node agent's part between a checkpoint and its restore."""
        d = self.dirs(uid)
        shutil.rmtree(d.restore_dir, ignore_errors=True)
        os.rename(d.checkpoint_dir, d.restore_dir)

    def restore(self, uid: str, mib: int) -> float:
        began = time.monotonic()
        self.ateom.RestoreWorkload(pb.RestoreWorkloadRequest(
            actor_uid=uid, actor_name=uid, actor_dirs=self.dirs(uid), spec=self.spec()),
            timeout=self.call_bound(mib))
        return time.monotonic() - began

    def terminate(self, uid: str) -> None:
        self.ateom.TerminateWorkload(pb.TerminateWorkloadRequest(
            actor_uid=uid, actor_name=uid, actor_dirs=self.dirs(uid)), timeout=120)

    def settle(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.inspect.GetStatus(pb.GetStatusRequest(), timeout=10)
            if not any(a.phase == "releasing" for a in status.actors):
                return
            time.sleep(0.05)
        raise StepFailed(f"actors still releasing after {timeout:.0f} s")

    # -- the GPU, as nvidia-smi sees it --------------------------------------------------

    def gpu_use(self) -> dict[str, Any]:
        """Processes on the GPU (pid -> MiB, as ateom reads them) and its memory in use."""
        held, why = device_memory_by_pid(self.args.nvidia_smi, subprocess_runner)
        if held is None:
            raise StepFailed(why)
        return {"processes": {str(pid): mib for pid, mib in held.items()},
                "memory_used_mib": self.memory_used()}

    def memory_used(self) -> int:
        """MiB in use on the node's GPUs, summed (nvidia-smi's memory.used)."""
        r = run([self.args.nvidia_smi, *MEMORY_ARGS], 10)
        if not r.ok:
            raise StepFailed(f"nvidia-smi {MEMORY_ARGS[0]}: {r.why()}")
        rows = [line.split(",") for line in r.out.splitlines() if line.count(",") >= 2]
        return sum(int(row[1]) for row in rows if row[1].strip().isdigit())

    def sample_memory(self, stop: threading.Event, out: list[tuple[float, int]]) -> None:
        began = time.monotonic()
        while not stop.is_set():
            with contextlib.suppress(StepFailed):
                out.append((time.monotonic() - began, self.memory_used()))
            stop.wait(0.2)

    # -- one turn ---------------------------------------------------------------------

    def turn(self, uid: str, mib: int, data: dict[str, Any], *, detail: bool) -> None:
        """Run -> (stats) -> checkpoint -> restore -> terminate of one actor of `mib` MiB,
        every check the issue names; the timings in `data`."""
        self.app.actor_bundles(self.actors, uid, mib)
        baseline = self.gpu_use()["memory_used_mib"]
        log = self.app_log(uid)
        data["run_s"] = round(self.start(uid, mib), 3)
        before = wait_ticks(log, 0, 3, 60 + mib / 500, f"{uid} after RunWorkload")
        text = log.read_text(errors="replace")
        m = re.search(r"turn_app: filled bytes=(\d+) seconds=([\d.]+)", text)
        data["fill_s"] = float(m.group(2)) if m else None
        if any(b for _, b, _ in before):
            raise StepFailed(f"{uid}: the pattern was wrong before any checkpoint: {before}")
        if detail:
            sample = self.ateom.GetWorkloadStats(pb.GetWorkloadStatsRequest(actor_uid=uid),
                                                 timeout=30).sample
            data["stats"] = {"memory_current_bytes": sample.memory_current_bytes,
                             "cpu_usage_usec": sample.cpu_usage_usec}
        running = self.gpu_use()
        data["gpu_while_running"] = running
        samples: list[tuple[float, int]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=self.sample_memory, args=(stop, samples), daemon=True)
        sampler.start()
        try:
            data["checkpoint_s"] = round(self.checkpoint(uid, mib), 3)
        finally:
            stop.set()
            sampler.join(15)
        last = ticks(log)[-1]
        freed_at = next((t for t, used in samples if used <= baseline + max(64, mib // 20)),
                        None)
        data["gpu_released_after_s"] = None if freed_at is None else round(freed_at, 2)
        self.settle()
        after = self.gpu_use()
        data["gpu_after_checkpoint"] = after
        data["gpu_freed"] = (not after["processes"]
                             and after["memory_used_mib"] <= baseline + max(64, mib // 20))
        ckpt = Path(self.dirs(uid).checkpoint_dir)
        size = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
        data["image_bytes"] = size
        data["checkpoint_mb_s"] = round(size / 1e6 / data["checkpoint_s"], 1)
        record = ckpt / "ateom-compat.json"
        if detail:
            data["record"] = json.loads(record.read_text()) if record.exists() else None
        if not data["gpu_freed"]:
            raise StepFailed(f"{uid}: the GPU was not freed by the checkpoint: {after}"
                             f" (baseline {baseline} MiB)")
        self.hand_over(uid)
        mark = log.stat().st_size
        data["restore_s"] = round(self.restore(uid, mib), 3)
        answered = time.time()
        resumed = wait_ticks(log, mark, 3, 60 + mib / 500, f"{uid} after RestoreWorkload")
        data["restore_mb_s"] = round(size / 1e6 / data["restore_s"], 1)
        data["first_tick_after_restore_s"] = round(max(0.0, resumed[0][2] - answered), 3)
        data["counter"] = {"last_before_checkpoint": last[0], "first_after_restore": resumed[0][0]}
        if resumed[0][0] != last[0] + 1:
            raise StepFailed(f"{uid}: the counter did not go on from {last[0]}: after the"
                             f" restore it read {resumed[0][0]}")
        if any(b for _, b, _ in resumed):
            raise StepFailed(f"{uid}: the pattern changed across the turn: {resumed[:3]}")
        self.terminate(uid)
        self.settle()
        shutil.rmtree(self.dirs(uid).restore_dir, ignore_errors=True)

    def take_turns(self, mib: int, data: dict[str, Any]) -> None:
        """A holds the GPU, B is refused; A checkpointed, B runs; B checkpointed,
        A restored and going on."""
        for uid in ("turn-a", "turn-b"):
            self.app.actor_bundles(self.actors, uid, mib)
        self.start("turn-a", mib)
        wait_ticks(self.app_log("turn-a"), 0, 2, 60 + mib / 500, "turn-a after RunWorkload")
        try:
            self.start("turn-b", mib)
            raise StepFailed("turn-b ran while turn-a held the only GPU (exclusive placement)")
        except grpc.RpcError as exc:
            data["b_refused"] = f"{exc.code().name}: {exc.details()}"
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise StepFailed(f"turn-b refused, but not RESOURCE_EXHAUSTED: "
                                 f"{data['b_refused']}") from exc
        data["a_checkpoint_s"] = round(self.checkpoint("turn-a", mib), 3)
        a_last = ticks(self.app_log("turn-a"))[-1][0]
        self.settle()
        self.hand_over("turn-a")
        data["b_run_s"] = round(self.start("turn-b", mib), 3)
        wait_ticks(self.app_log("turn-b"), 0, 2, 60 + mib / 500, "turn-b after RunWorkload")
        data["b_checkpoint_s"] = round(self.checkpoint("turn-b", mib), 3)
        self.settle()
        mark = self.app_log("turn-a").stat().st_size
        data["a_restore_s"] = round(self.restore("turn-a", mib), 3)
        resumed = wait_ticks(self.app_log("turn-a"), mark, 2, 60 + mib / 500,
                             "turn-a after RestoreWorkload")
        data["a_counter"] = {"last_before_checkpoint": a_last,
                             "first_after_restore": resumed[0][0]}
        if resumed[0][0] != a_last + 1 or any(b for _, b, _ in resumed):
            raise StepFailed(f"turn-a did not go on where it stopped: {a_last} then {resumed}")
        self.terminate("turn-a")
        self.terminate("turn-b")
        self.settle()

    def pack_logs(self, out: Path) -> None:
        with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
            add_file_tail(tar, "ateom.log", self.daemon_log, 4 << 20)
            for path in sorted(self.run_dir.glob("logs/**/*")):
                if path.is_file():
                    add_file_tail(tar, f"logs/{path.relative_to(self.run_dir / 'logs')}",
                                  path, 1 << 20)


def summary(report: Report) -> str:
    rows = ["| MiB | run s | checkpoint s | GPU released after s | image MB | ckpt MB/s |"
            " restore s | restore MB/s | first tick after restore s |",
            "|---|---|---|---|---|---|---|---|---|"]
    for s in report.steps:
        if s["step"].startswith("turn ") and s["status"] == "ok":
            rows.append(f"| {s['mib']} | {s['run_s']} | {s['checkpoint_s']} |"
                        f" {s['gpu_released_after_s']} | {s['image_bytes'] / 1e6:.0f} |"
                        f" {s['checkpoint_mb_s']} | {s['restore_s']} | {s['restore_mb_s']} |"
                        f" {s['first_tick_after_restore_s']} |")
    steps = "\n".join(f"- {s['step']}: **{s['status']}** ({s['seconds']} s)"
                      f"{': ' + s['why'] if s['why'] else ''}" for s in report.steps)
    facts = {k: v for k, v in report.facts.items() if k != "records"}
    return (f"# A real CUDA actor's turn\n\n{steps}\n\n{chr(10).join(rows)}\n\n"
            f"```json\n{dump(facts)}```\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", required=True, type=Path, help="where the results go ($OUT)")
    p.add_argument("--work", type=Path, default=Path("/var/tmp/ateom-gpu-turn"),
                   help="scratch dir: actors, images, run dir [/var/tmp/ateom-gpu-turn]")
    p.add_argument("--runsc", required=True)
    p.add_argument("--busybox", required=True, help="a static busybox for the rootfs")
    p.add_argument("--cuda-checkpoint", required=True)
    p.add_argument("--driver-root", default="/usr/local/nvidia")
    p.add_argument("--lib-dir", help="the driver's libraries [<driver root>/lib64 or /lib, else"
                   " where ldconfig finds libcuda.so.1]")
    p.add_argument("--proc-root", default="/proc")
    p.add_argument("--gpu-glob", default="/dev/nvidia[0-9]*")
    p.add_argument("--nvidia-smi", help="[<driver root>/bin/nvidia-smi, else on PATH]")
    p.add_argument("--sizes", default="1024,8192,32768", help="MiB per turn [1024,8192,32768]")
    p.add_argument("--budget", type=float, default=420.0,
                   help="seconds for the whole run; a turn that would not fit is skipped [420]")
    p.add_argument("--fixture-name", default="h200")
    args = p.parse_args(argv)
    smi = Path(args.driver_root) / "bin" / "nvidia-smi"
    args.nvidia_smi = args.nvidia_smi or (str(smi) if smi.exists() else
                                          shutil.which("nvidia-smi") or str(smi))
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    report = Report(args.out / "report.json")
    report.facts["records"] = {}
    turns = Turns(args, report)
    left = lambda: args.budget - (time.monotonic() - report.started)  # noqa: E731
    try:
        facts = report.facts
        noted = report.step("node", lambda d: record_node(args, facts, d))
        built = noted and report.step("app", turns.app.build)
        if built:
            report.step("app on the host", turns.app.on_host)
        if noted:
            report.step("spec", lambda d: write_spec(args, facts, turns.app, turns.env(), d))
            report.step("doctor", lambda d: doctor(args, facts, turns.env(), d))
        report.step("fixtures", lambda d: pack_fixtures(args, facts, d))
        runs = noted and report.step("runsc runs here",
                                     lambda d: can_run_runsc(args, facts, args.work, d))
        if runs and built and report.step("serve", turns.serve):
            first, *rest = args.sizes
            def first_turn(d: dict[str, Any]) -> None:
                d["mib"] = first
                turns.turn("turn-0", first, d, detail=True)
            ok = report.step(f"turn {first} MiB", first_turn)
            if ok:
                report.step(f"two actors, {first} MiB each",
                            lambda d: turns.take_turns(first, d))
            for mib in rest if ok else []:
                def sized(d: dict[str, Any], mib: int = mib) -> None:
                    need = 30 + 2 * mib / 1000
                    if left() < need:
                        raise Skip(f"{left():.0f} s left of --budget, a {mib} MiB turn needs"
                                   f" about {need:.0f} s")
                    free = shutil.disk_usage(args.work).free >> 20
                    if free < mib + 2048:
                        raise Skip(f"{free} MiB free under {args.work}: a {mib} MiB image"
                                   " and 2 GiB to spare do not fit")
                    d["mib"] = mib
                    turns.turn(f"turn-{mib}", mib, d, detail=False)
                report.step(f"turn {mib} MiB", sized)
    finally:
        turns.stop()
        report.facts.pop("records", None)
        report.write()
        turns.pack_logs(args.out)
        (args.out / "summary.md").write_text(summary(report))
    print((args.out / "summary.md").read_text())
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
