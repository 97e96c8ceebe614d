#!/usr/bin/env bash
# The main job on bundled fixtures: start the daemon, run an actor with a simulated GPU,
# show what it sees, checkpoint, restore and terminate it, then stop. Needs root (runsc).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. scripts/venv.sh
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (runsc needs it)" >&2; exit 1; }

DEMO=$(mktemp -d /tmp/ateom-demo.XXXXXX)
SOCK=$DEMO/run/ateom.sock
DAEMON_PID=""
cleanup() {
    if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID"; wait "$DAEMON_PID" || true
    fi
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
call() { # call METHOD JSON: a gRPC call over the unix socket, as an operator makes it
    grpcurl -plaintext -unix -d "$2" "$SOCK" "$1"
}

step "fixtures in $DEMO: fake NVIDIA driver libs (real ELF), a CDI spec, busybox bundles"
"$PYTHON" - "$DEMO" <<'PY'
import sys
from pathlib import Path
from ateom.testing import build_busybox_bundle, build_fake_driver_libs, write_sim_gpu_spec
base = Path(sys.argv[1])
libs = build_fake_driver_libs(base / "driver" / "lib64")
spec = write_sim_gpu_spec(base / "cdi", libs, gpus=2)
(base / "dev").mkdir()
(base / "dev" / "nvidia0").touch()  # GPU presence: --gpu-glob matches this
lib = "/usr/local/nvidia/lib64"
report = (f"echo '--- env'; env | grep -E 'NVIDIA|LD_LIBRARY' | sort; "
          f"echo '--- /dev (runsc without nvproxy emulates no /dev/nvidia*)'; ls /dev; "
          f"echo '--- driver libraries'; ls -l {lib}; echo '--- end'; sleep 100000")
gpu = base / "actors" / "gpu-demo" / "bundles"
build_busybox_bundle(gpu / "_pause", ["sleep", "100000"])
build_busybox_bundle(gpu / "trainer", ["sh", "-c", report])
count = "i=0; while true; do i=$((i+1)); echo counter=$i; sleep 0.2; done"
build_busybox_bundle(base / "actors" / "counter" / "bundles" / "_pause", ["sh", "-c", count])
print(f"spec {spec}: devices nvidia.com/gpu=0, =1, =all; libraries {[l.name for l in libs]}")
PY

# Debian's runsc (2022) has no --nvproxy, and ateom refuses a GPU actor on such a runsc.
# The demo runs an emulated gVisor release in front of it (ateom.testing.runsc_emu, as
# the e2e tests do): it answers as that release (--version, flags, help), applies its
# GPU rules, runs the real runsc without the flags Debian lacks, and records each call.
RUNSC_RELEASE=${ATEOM_DEMO_RUNSC_RELEASE:-20260817}
"$PYTHON" - "$DEMO" "$RUNSC_RELEASE" "$(command -v runsc)" <<'PY'
import sys
from ateom.testing import install_runsc, sim_gpus
emu = install_runsc(sys.argv[2], sys.argv[1] + "/bin", real_runsc=sys.argv[3], gpus=sim_gpus(2))
print(f"runsc {emu.tag} emulated at {emu.path}, calls recorded in {emu.record_path}")
PY

step "ateom serve (JSON logs in $DEMO/daemon.log)"
"$PYTHON" -m ateom serve --socket "$SOCK" --actors-root "$DEMO/actors" --run-dir "$DEMO/run" \
    --runsc "$DEMO/bin/runsc" --runsc-global-flag=--network=none \
    --runsc-global-flag=--ignore-cgroups --spec-dir "$DEMO/cdi" \
    --gpu-glob "$DEMO/dev/nvidia[0-9]*" --kill-grace 1 >"$DEMO/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do
    grpcurl -plaintext -unix "$SOCK" grpc.health.v1.Health/Check 2>/dev/null | grep -q SERVING && break
    sleep 0.1
done
grpcurl -plaintext -unix "$SOCK" list
call ateom.Inspect/GetStatus '{}'

dirs() { echo "{\"root_dir\":\"$DEMO/actors/$1\",\"oci_bundle_dir\":\"$DEMO/actors/$1/bundles\",\"checkpoint_dir\":\"$DEMO/actors/$1/checkpoint\",\"restore_dir\":\"$DEMO/actors/$1/restore\"}"; }

step "RunWorkload gpu-demo: sandbox root _pause + app container 'trainer' with the Pod's GPUs"
call ateom.Ateom/RunWorkload "{\"actor_uid\":\"gpu-demo\",\"atespace\":\"demo\",\"actor_name\":\"gpu-demo\",
  \"spec\":{\"containers\":[{\"name\":\"trainer\"}]},\"actor_dirs\":$(dirs gpu-demo)}"
for _ in $(seq 100); do grep -q -- '--- end' "$DEMO/run/logs/gpu-demo/trainer.log" && break; sleep 0.1; done
step "what the trainer container sees (its stdout, from ateom's per-container log)"
sed -n '/^--- env/,/^--- end/p' "$DEMO/run/logs/gpu-demo/trainer.log"
echo "--- device nodes ateom wrote into the trainer's config.json (what nvproxy would serve):"
"$PYTHON" -c 'import json,sys; [print("  ", d["path"], d["type"], str(d["major"])+":"+str(d["minor"])) for d in json.load(open(sys.argv[1]))["linux"]["devices"]]' \
    "$DEMO/actors/gpu-demo/bundles/trainer/config.json"
echo "--- runsc calls that got nvproxy flags (the emulated release decides; Debian's runsc runs without them):"
"$PYTHON" - "$DEMO/bin/runsc.calls.jsonl" <<'PY'
import json, sys
for call in map(json.loads, open(sys.argv[1])):
    if any(a.lstrip("-").startswith("nvproxy") for a in call["argv"]):
        print(f"  runsc {' '.join(call['argv'])}\n    nvproxy={call['nvproxy']}"
              f" stripped={call['stripped']} exit={call['exit_code']}")
PY
call ateom.Inspect/GetStatus '{}' | grep -A12 '"actors"'
call ateom.Ateom/GetWorkloadStats '{"actor_uid":"gpu-demo"}'

step "CheckpointWorkload gpu-demo (FULL): the image files, then the worker is free"
call ateom.Ateom/CheckpointWorkload "{\"actor_uid\":\"gpu-demo\",\"scope\":\"SNAPSHOT_SCOPE_FULL\",\"actor_dirs\":$(dirs gpu-demo)}"
cp -r "$DEMO/actors/gpu-demo/checkpoint" "$DEMO/actors/gpu-demo/restore"
step "RestoreWorkload gpu-demo: the release restores multi-container sandboxes, Debian's runsc under the emulator cannot"
call ateom.Ateom/RestoreWorkload "{\"actor_uid\":\"gpu-demo\",\"spec\":{\"containers\":[{\"name\":\"trainer\"}]},\"actor_dirs\":$(dirs gpu-demo)}" \
    2>&1 | head -c 700 || true
echo; echo "(ateom reported runsc's reason and cleaned up: runsc list is empty)"
runsc --root "$DEMO/run/actors/gpu-demo" list 2>/dev/null || true

step "a single-container actor restores fine: a counter in memory survives checkpoint/restore"
call ateom.Ateom/RunWorkload "{\"actor_uid\":\"counter\",\"actor_dirs\":$(dirs counter)}"
sleep 1.5
echo "before checkpoint: $(grep counter= "$DEMO/run/logs/counter/_pause.log" | tail -1)"
call ateom.Ateom/CheckpointWorkload "{\"actor_uid\":\"counter\",\"actor_dirs\":$(dirs counter)}"
cp -r "$DEMO/actors/counter/checkpoint" "$DEMO/actors/counter/restore"
call ateom.Ateom/RestoreWorkload "{\"actor_uid\":\"counter\",\"actor_dirs\":$(dirs counter)}"
sleep 1
echo "after restore:     $(grep counter= "$DEMO/run/logs/counter/_pause.log" | tail -1)  (continued, not restarted)"

step "TerminateWorkload counter, then stop the daemon (SIGTERM: drain, exit 0)"
call ateom.Ateom/TerminateWorkload "{\"actor_uid\":\"counter\"}"
kill -TERM "$DAEMON_PID"; wait "$DAEMON_PID"; echo "ateom serve exited $?"
DAEMON_PID=""
echo "phase durations (ms) from the JSON log:"
"$PYTHON" - "$DEMO/daemon.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line) if line.startswith("{") else {}
    if e.get("event") == "phase":
        print(f"  {e.get('actor_uid', ''):9} {e['phase']:17} {e.get('container', ''):8}"
              f" {e['duration_ms']:8.1f} {e['outcome']}")
PY
echo "logs and state kept in $DEMO"
