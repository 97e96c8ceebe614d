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
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ateom._proto import ateom_pb2 as pb
from ateom._proto import ateom_pb2_grpc as pb_grpc
from scripts.gpu_real_turn.actor import App, ticks, wait_ticks
from scripts.gpu_real_turn.gpu_watch import GpuWatch
from scripts.gpu_real_turn.node import (
    CallFailed,
    Skip,
    StepFailed,
    add_file_tail,
)
from scripts.gpu_real_turn.records import (
    can_run_runsc,
    doctor,
    pack_fixtures,
    record_node,
    write_spec,
)
from scripts.gpu_real_turn.report import Report, summary

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
        self.gpu = GpuWatch(args.nvidia_smi)

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

    def call(self, method: str, uid: str, request: Any, timeout: float) -> Any:
        """``Ateom.<method>`` for `uid`, bounded by `timeout`; a failure names the call,
        the actor and the bound (`CallFailed`, its gRPC code kept)."""
        try:
            return getattr(self.ateom, method)(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise CallFailed(f"{method} {uid}: {exc.code().name}: {exc.details()}"
                             f" (bounded at {timeout:.0f} s)", exc.code().name) from exc

    def timed(self, method: str, uid: str, request: Any, mib: int) -> float:
        """The call's seconds; an actor of `mib` MiB gets 120 s plus 100 MB/s, far below
        what any GPU machine's disk does."""
        began = time.monotonic()
        self.call(method, uid, request, 120 + mib / 100)
        return time.monotonic() - began

    def start(self, uid: str, mib: int) -> float:
        return self.timed("RunWorkload", uid, pb.RunWorkloadRequest(
            actor_uid=uid, actor_name=uid, actor_dirs=self.dirs(uid), spec=self.spec(),
            gpus=pb.GpuRequest(count=1)), mib)

    def checkpoint(self, uid: str, mib: int) -> float:
        return self.timed("CheckpointWorkload", uid, pb.CheckpointWorkloadRequest(
            actor_uid=uid, actor_name=uid, actor_dirs=self.dirs(uid)), mib)

    def hand_over(self, uid: str) -> None:
        """The node agent's part between a checkpoint and its restore."""
        d = self.dirs(uid)
        shutil.rmtree(d.restore_dir, ignore_errors=True)
        os.rename(d.checkpoint_dir, d.restore_dir)

    def restore(self, uid: str, mib: int) -> float:
        return self.timed("RestoreWorkload", uid, pb.RestoreWorkloadRequest(
            actor_uid=uid, actor_name=uid, actor_dirs=self.dirs(uid), spec=self.spec()), mib)

    def terminate(self, uid: str) -> None:
        self.call("TerminateWorkload", uid, pb.TerminateWorkloadRequest(
            actor_uid=uid, actor_name=uid, actor_dirs=self.dirs(uid)), 120)

    def settle(self, timeout: float = 120) -> None:
        """Until no actor is releasing (a checkpointed sandbox reaped, its GPU free)."""
        deadline = time.monotonic() + timeout
        releasing: list[str] = []
        while time.monotonic() < deadline:
            status = self.inspect.GetStatus(pb.GetStatusRequest(), timeout=10)
            releasing = [a.actor_uid for a in status.actors if a.phase == "releasing"]
            if not releasing:
                return
            time.sleep(0.05)
        raise StepFailed(f"GetStatus: {', '.join(releasing)} still releasing after"
                         f" {timeout:.0f} s")

    # -- one turn ---------------------------------------------------------------------

    def turn(self, uid: str, mib: int, data: dict[str, Any], *, detail: bool) -> None:
        """Run -> (stats) -> checkpoint -> restore -> terminate of one actor of `mib` MiB,
        every check the issue names; the timings in `data`."""
        self.app.actor_bundles(self.actors, uid, mib)
        baseline = self.gpu.use()["memory_used_mib"]
        log = self.app_log(uid)
        data["run_s"] = round(self.start(uid, mib), 3)
        before = wait_ticks(log, 0, 3, 60 + mib / 500, f"{uid} after RunWorkload")
        m = re.search(r"turn_app: filled bytes=(\d+) seconds=([\d.]+)",
                      log.read_text(errors="replace"))
        data["fill_s"] = float(m.group(2)) if m else None
        if any(b for _, b, _ in before):
            raise StepFailed(f"{uid}: the pattern was wrong before any checkpoint: {before}")
        if detail:
            sample = self.call("GetWorkloadStats", uid,
                               pb.GetWorkloadStatsRequest(actor_uid=uid), 30).sample
            data["stats"] = {"memory_current_bytes": sample.memory_current_bytes,
                             "cpu_usage_usec": sample.cpu_usage_usec}
        data["gpu_while_running"] = self.gpu.use()
        last, size = self.measured_checkpoint(uid, mib, baseline, data, detail=detail)
        self.hand_over(uid)
        self.checked_restore(uid, mib, last, data)
        data["restore_mb_s"] = round(size / 1e6 / data["restore_s"], 1)
        self.terminate(uid)
        self.settle()
        shutil.rmtree(self.dirs(uid).restore_dir, ignore_errors=True)

    def measured_checkpoint(self, uid: str, mib: int, baseline: int, data: dict[str, Any],
                            *, detail: bool) -> tuple[int, int]:
        """CheckpointWorkload with nvidia-smi sampled meanwhile: when the GPU's memory
        came back, that no process is left on it, the image's size (and the record);
        returns (the last tick before it, the image's bytes)."""
        samples: list[tuple[float, int]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=self.gpu.sample, args=(stop, samples), daemon=True)
        sampler.start()
        try:
            data["checkpoint_s"] = round(self.checkpoint(uid, mib), 3)
        finally:
            stop.set()
            sampler.join(15)
        last = ticks(self.app_log(uid))[-1][0]
        back = baseline + max(64, mib // 20)  # what the GPU held before, give or take
        freed_at = next((t for t, used in samples if used <= back), None)
        data["gpu_released_after_s"] = None if freed_at is None else round(freed_at, 2)
        self.settle()
        after = self.gpu.use()
        data["gpu_after_checkpoint"] = after
        data["gpu_freed"] = not after["processes"] and after["memory_used_mib"] <= back
        ckpt = Path(self.dirs(uid).checkpoint_dir)
        size = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
        data["image_bytes"] = size
        data["checkpoint_mb_s"] = round(size / 1e6 / data["checkpoint_s"], 1)
        if detail:
            record = ckpt / "ateom-compat.json"
            data["record"] = json.loads(record.read_text()) if record.exists() else None
        if not data["gpu_freed"]:
            raise StepFailed(f"{uid}: the GPU was not freed by the checkpoint: {after}"
                             f" (baseline {baseline} MiB)")
        return last, size

    def checked_restore(self, uid: str, mib: int, last: int, data: dict[str, Any]) -> None:
        """RestoreWorkload, then its first ticks: the counter going on from `last` by
        one, no word of the pattern wrong."""
        log = self.app_log(uid)
        mark = log.stat().st_size
        data["restore_s"] = round(self.restore(uid, mib), 3)
        answered = time.time()
        resumed = wait_ticks(log, mark, 3, 60 + mib / 500, f"{uid} after RestoreWorkload")
        data["first_tick_after_restore_s"] = round(max(0.0, resumed[0][2] - answered), 3)
        data["counter"] = {"last_before_checkpoint": last, "first_after_restore": resumed[0][0]}
        if resumed[0][0] != last + 1:
            raise StepFailed(f"{uid}: the counter did not go on from {last}: after the"
                             f" restore it read {resumed[0][0]}")
        if any(b for _, b, _ in resumed):
            raise StepFailed(f"{uid}: the pattern changed across the turn: {resumed[:3]}")

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
        except CallFailed as exc:
            data["b_refused"] = str(exc)
            if exc.code != "RESOURCE_EXHAUSTED":
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
