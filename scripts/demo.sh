#!/usr/bin/env bash
# The main job on bundled fixtures, driven with grpcurl as an operator would:
#   1. a GPU actor: what it sees, a GPU checkpoint through cuda-checkpoint, its record,
#      and its restore (root, then app) with the app continuing from memory;
#   2. that checkpoint offered to a worker whose driver differs: not restorable there, and why;
#   3. a CPU actor whose in-memory counter survives checkpoint -> restore;
#   4. a 4-GPU worker in exclusive mode: 6 intermittent actors take turns;
#   5. the same six in shared mode;
#   6. the seed: a GPU actor serving GET /gpu (nvidia-smi), reached through ateom's ingress
#      by its Host header over mTLS, checkpointed, restored and reached again
#      (scripts/demo_seed.sh; its real runsc: $ATEOM_DEMO_REAL_RUNSC, else runsc on PATH;
#      skipped, saying why, where that runsc cannot give actors networks here).
# Needs root (runsc). No GPU: a simulated node (see "fixtures").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. scripts/venv.sh
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (runsc needs it)" >&2; exit 1; }

DEMO=$(mktemp -d /tmp/ateom-demo.XXXXXX)
SOCK=$DEMO/run/ateom.sock
DAEMON_PID=""
stop_daemon() {
    if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID"; wait "$DAEMON_PID" || true
    fi
    DAEMON_PID=""
}
trap stop_daemon EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
call() { # call METHOD JSON: a gRPC call over the unix socket, as an operator makes it
    grpcurl -plaintext -unix -d "$2" "$SOCK" "$1"
}
refused() { # refused METHOD JSON: a call that must be answered no; prints its code and message
    if out=$(call "$1" "$2" 2>&1); then echo "unexpected success: $out" >&2; exit 1; fi
    printf '%s\n' "$out" | sed -n 's/^ *Code: /  answer:  /p; s/^ *Message: /  because: /p' | cut -c1-400
}
dirs() { echo "{\"root_dir\":\"$DEMO/actors/$1\",\"oci_bundle_dir\":\"$DEMO/actors/$1/bundles\",\"checkpoint_dir\":\"$DEMO/actors/$1/checkpoint\",\"restore_dir\":\"$DEMO/actors/$1/restore\"}"; }
run_gpu() { # run_gpu UID [GPUS_JSON]: an actor whose app container takes its GPUs
    call ateom.Ateom/RunWorkload "{\"actor_uid\":\"$1\",\"spec\":{\"containers\":[{\"name\":\"app\"}]},${2:+\"gpus\":$2,}\"actor_dirs\":$(dirs "$1")}" >/dev/null
}
serve() { # serve NODE [FLAGS...]: ateom serve on a simulated GPU node (logs in $DEMO/daemon.log)
    local node=$1; shift
    PATH="$node/bin:$PATH" "$PYTHON" -m ateom serve --socket "$SOCK" --actors-root "$DEMO/actors" \
        --run-dir "$DEMO/run" --runsc "$DEMO/bin/runsc" --runsc-global-flag=--network=none \
        --runsc-global-flag=--ignore-cgroups --spec-dir "$DEMO/cdi-$(basename "$node")" \
        --gpu-glob "$node/dev/nvidia[0-9]*" --proc-root "$node/proc" \
        --cuda-checkpoint "$DEMO/cuda-checkpoint/cuda-checkpoint" --kill-grace 0.5 "$@" \
        >>"$DEMO/daemon.log" 2>&1 &
    DAEMON_PID=$!
    for _ in $(seq 200); do
        grpcurl -plaintext -unix "$SOCK" grpc.health.v1.Health/Check 2>/dev/null | grep -q SERVING && return
        sleep 0.1
    done
    echo "ateom serve did not come up:" >&2; tail -20 "$DEMO/daemon.log" >&2; exit 1
}
holders() { # who holds which GPU, from Inspect/ListActors
    call ateom.Inspect/ListActors '{}' | "$PYTHON" -c "$HOLDERS"
}
HOLDERS='
import json, sys
r = json.load(sys.stdin)
gpus = [g["gpu"].split("=")[1] + "<-" + ("+".join(g.get("actor_uids", [])) or "free")
        for g in r.get("gpus", [])]
print("  placement", r.get("gpu_placement"), ":", ", ".join(gpus))
'

step "fixtures in $DEMO: simulated GPU nodes, fake driver libraries (real ELF), CDI specs, busybox bundles"
"$PYTHON" - "$DEMO" <<'PY'
import sys
from pathlib import Path
from tests.support import (build_busybox_bundle, build_fake_driver_libs, write_sim_gpu_spec,
                           install_cuda_checkpoint_stub)
from tests.support.gpu_node import SimGpu, write_gpu_node, write_sim_fixture
base = Path(sys.argv[1])
libs = build_fake_driver_libs(base / "driver" / "lib64")  # libcuda.so.580.65.06, ...
for name, gpus, driver in (("node2", 2, "580.65.06"), ("node2-newdriver", 2, "590.44.01"),
                           ("node4", 4, "580.65.06")):
    sims = [SimGpu(index=i, minor=i, uuid=f"GPU-{i:08d}-0000-4000-8000-00000000abcd")
            for i in range(gpus)]
    write_gpu_node(base / name, write_sim_fixture(base / f"fixture-{name}", sims,
                                                 driver_version=driver))
    write_sim_gpu_spec(base / f"cdi-{name}", libs, gpus=gpus)
    print(f"{name}: {gpus} simulated GPUs, driver {driver} (/proc/driver/nvidia, /dev/nvidiaN,"
          " nvidia-smi)")
# The worker's cuda-checkpoint: a stand-in that records each run from inside the
# sandbox into the actor's /cuda-stub (a writable mount of the actor's own dir).
install_cuda_checkpoint_stub(base / "cuda-checkpoint", record_dir="/cuda-stub")
lib = "/usr/local/nvidia/lib64"
report = (f"echo '--- env'; env | grep -E 'NVIDIA|LD_LIBRARY' | sort; "
          f"echo '--- driver libraries'; ls -l {lib}; echo '--- end'; "
          "i=0; while true; do i=$((i+1)); echo gpu-tick=$i; sleep 0.2; done")
def actor(uid, app_args, stub=False):
    bundles = base / "actors" / uid / "bundles"
    build_busybox_bundle(bundles / "_pause", ["sleep", "100000"])
    mounts = []
    if stub:
        (base / "actors" / uid / "cuda-stub").mkdir(parents=True)
        mounts = [{"destination": "/cuda-stub", "type": "bind", "options": ["rbind", "rw"],
                   "source": str(base / "actors" / uid / "cuda-stub")}]
    build_busybox_bundle(bundles / "app", app_args, mounts=mounts)
actor("gpu-demo", ["sh", "-c", report], stub=True)
for i in range(1, 7):
    actor(f"job{i}", ["sh", "-c", "while true; do sleep 1; done"], stub=True)
count = "i=0; while true; do i=$((i+1)); echo counter=$i; sleep 0.2; done"
build_busybox_bundle(base / "actors" / "counter" / "bundles" / "_pause", ["sh", "-c", count])
PY

# The set-up's runsc is Debian's 0.0~20240729 (or newer): it restores multi-container
# sandboxes and has --nvproxy, but no --cuda-checkpoint-path and no driver newer than
# 550.90.07. The demo runs an emulated gVisor release in front of it (tests.support, as
# the e2e tests do, built from the release facts in tests/fixtures/runsc): it answers as
# that release (--version, flags, help), applies its GPU rules, runs cuda-checkpoint
# inside the sandbox through the real runsc (runsc exec), and passes everything else to
# the real runsc, which does the real create, checkpoint and restore.
RUNSC_RELEASE=${ATEOM_DEMO_RUNSC_RELEASE:-20260817}
echo "real runsc: $(command -v runsc) ($(runsc --version | head -n 1))"
"$PYTHON" - "$DEMO" "$RUNSC_RELEASE" "$(command -v runsc)" <<'PY'
import sys
from tests.support import install_runsc, sim_gpus
emu = install_runsc(sys.argv[2], sys.argv[1] + "/bin", real_runsc=sys.argv[3], gpus=sim_gpus(2))
print(f"runsc {emu.tag} emulated at {emu.path}, calls recorded in {emu.record_path}")
PY

step "1. ateom serve on a 2-GPU worker; RunWorkload gpu-demo (sandbox root _pause + app with the Pod's GPUs)"
serve "$DEMO/node2" --max-actors 2
call ateom.Inspect/GetStatus '{}' | grep -E '"(state|gpu_present|version|gpu_checkpoint|gpu_remap|gpu_placement)"'
run_gpu gpu-demo
for _ in $(seq 100); do grep -q -- '--- end' "$DEMO/run/logs/gpu-demo/app.log" && break; sleep 0.1; done
echo "what the app container sees (its stdout, from ateom's per-container log):"
sed -n '/^--- env/,/^--- end/p' "$DEMO/run/logs/gpu-demo/app.log"
echo "--- device nodes and ateom's cuda-checkpoint mount in the config runsc reads for the app"
echo "    (ateom's own copy in its run dir; the node agent's bundle is read, never written):"
"$PYTHON" -c 'import json,sys; c=json.load(open(sys.argv[1]))
[print("  ", d["path"], d["type"], str(d["major"])+":"+str(d["minor"])) for d in c["linux"]["devices"]]
[print("  ", m["destination"], "<-", m["source"], m["options"]) for m in c["mounts"] if "cuda-checkpoint" in m["destination"]]' \
    "$DEMO/run/bundles/gpu-demo/app/config.json"
call ateom.Inspect/ListActors '{}' | grep -E -A3 '"(actor_uid|gpus|checkpointable)"' | grep -v -- -- | head -12

step "CheckpointWorkload gpu-demo: runsc runs cuda-checkpoint in the sandbox, then saves; ateom writes the record"
call ateom.Ateom/CheckpointWorkload "{\"actor_uid\":\"gpu-demo\",\"actor_dirs\":$(dirs gpu-demo)}"
echo "--- the cuda-checkpoint stand-in's runs, recorded from inside the sandbox:"
sed 's/^/  /' "$DEMO/actors/gpu-demo/cuda-stub/calls"
echo "--- the runsc checkpoint call:"
"$PYTHON" - "$DEMO/bin/runsc.calls.jsonl" <<'PY'
import json, sys
for call in map(json.loads, open(sys.argv[1])):
    if "checkpoint" in call["argv"] and "-image-path" in call["argv"]:
        print(f"  runsc {' '.join(call['argv'][call['argv'].index('checkpoint'):])}"
              f"  (exit {call['exit_code']})")
PY
echo "--- ateom checkpoint-info (the compatibility record that travels with the image):"
ateom checkpoint-info "$DEMO/actors/gpu-demo/checkpoint" | sed 's/^/  /'
holders

step "RestoreWorkload gpu-demo: the record fits this worker, runsc restores the root then the app"
cp -r "$DEMO/actors/gpu-demo/checkpoint" "$DEMO/actors/gpu-demo/restore"
applog=$DEMO/run/logs/gpu-demo/app.log
saved=$(grep -o 'gpu-tick=[0-9]*' "$applog" | tail -n 1)
call ateom.Ateom/RestoreWorkload "{\"actor_uid\":\"gpu-demo\",\"preserve_restore_dir\":true,\"spec\":{\"containers\":[{\"name\":\"app\"}]},\"actor_dirs\":$(dirs gpu-demo)}" >/dev/null
for _ in $(seq 100); do
    [ "$(grep -o 'gpu-tick=[0-9]*' "$applog" | tail -n 1)" != "$saved" ] && break; sleep 0.1
done
sleep 0.6
now=$(grep -o 'gpu-tick=[0-9]*' "$applog" | tail -n 1)
echo "the app's counter at the checkpoint: $saved; after the restore: $now (continued from memory)"
# Continued, not restarted: the tick after the saved one follows it, and the count never began again.
[ "${now#gpu-tick=}" -gt "${saved#gpu-tick=}" ] && [ "$(grep -c '^gpu-tick=1$' "$applog")" -eq 1 ] \
    || { echo "demo: the restored app did not continue from its checkpoint" >&2; exit 1; }
echo "the app's cuda-checkpoint runs after the restore (toggled back to running):"
tail -n 1 "$DEMO/actors/gpu-demo/cuda-stub/calls" | sed 's/^/  /'
call ateom.Inspect/ListActors '{}' | grep -E '"(actor_uid|phase|state)"' | head -4
call ateom.Ateom/TerminateWorkload '{"actor_uid":"gpu-demo"}' >/dev/null
echo "terminated: runsc list is empty: [$(runsc --root "$DEMO/run/actors/gpu-demo" list -quiet 2>/dev/null || true)]"

step "2. the same checkpoint offered to a worker whose driver differs: ateom answers from the record, before any runsc call"
stop_daemon
serve "$DEMO/node2-newdriver" --max-actors 2
# Another actor of the node agent's, given gpu-demo's checkpoint as its restore image.
mkdir -p "$DEMO/actors/gpu-moved"
cp -r "$DEMO/actors/gpu-demo/bundles" "$DEMO/actors/gpu-demo/restore" "$DEMO/actors/gpu-moved/"
refused ateom.Ateom/RestoreWorkload "{\"actor_uid\":\"gpu-moved\",\"preserve_restore_dir\":true,\"spec\":{\"containers\":[{\"name\":\"app\"}]},\"actor_dirs\":$(dirs gpu-moved)}"
echo "--- ateom checkpoint-info --here says the same, offline:"
PATH="$DEMO/node2-newdriver/bin:$PATH" ATEOM_RUNSC="$DEMO/bin/runsc" \
    ATEOM_GPU_GLOB="$DEMO/node2-newdriver/dev/nvidia[0-9]*" \
    ateom checkpoint-info --here --proc-root "$DEMO/node2-newdriver/proc" \
    "$DEMO/actors/gpu-demo/restore" 2>&1 | tail -3 | sed 's/^/  /' || true

step "3. a CPU actor: a counter in memory survives checkpoint -> restore"
call ateom.Ateom/RunWorkload "{\"actor_uid\":\"counter\",\"actor_dirs\":$(dirs counter)}" >/dev/null
sleep 1.5
echo "before checkpoint: $(grep counter= "$DEMO/run/logs/counter/_pause.log" | tail -1)"
call ateom.Ateom/CheckpointWorkload "{\"actor_uid\":\"counter\",\"actor_dirs\":$(dirs counter)}" >/dev/null
cp -r "$DEMO/actors/counter/checkpoint" "$DEMO/actors/counter/restore"
call ateom.Ateom/RestoreWorkload "{\"actor_uid\":\"counter\",\"actor_dirs\":$(dirs counter)}" >/dev/null
sleep 1
echo "after restore:     $(grep counter= "$DEMO/run/logs/counter/_pause.log" | tail -1)  (continued, not restarted)"
call ateom.Ateom/TerminateWorkload "{\"actor_uid\":\"counter\"}" >/dev/null
stop_daemon

step "4. a 4-GPU worker, --gpu-placement exclusive: six intermittent one-GPU actors take turns"
serve "$DEMO/node4" --max-actors 8 --gpu-placement exclusive
for i in 1 2 3 4; do run_gpu "job$i" '{"count":1}'; echo "  job$i running"; done
holders
for i in 5 6; do echo "job$i:"; refused ateom.Ateom/RunWorkload "{\"actor_uid\":\"job$i\",\"spec\":{\"containers\":[{\"name\":\"app\"}]},\"gpus\":{\"count\":1},\"actor_dirs\":$(dirs "job$i")}"; done
echo "job2 is checkpointed: its GPU is freed at once"
call ateom.Ateom/CheckpointWorkload "{\"actor_uid\":\"job2\",\"actor_dirs\":$(dirs job2)}" >/dev/null
run_gpu job5 '{"count":1}'; echo "  job5 running on the freed GPU"
holders
for i in 1 3 4 5; do call ateom.Ateom/TerminateWorkload "{\"actor_uid\":\"job$i\"}" >/dev/null; done
stop_daemon

step "5. the same six on the same worker, --gpu-placement shared: every actor sees every GPU"
serve "$DEMO/node4" --max-actors 8 --gpu-placement shared
for i in 1 2 3 4 5 6; do run_gpu "job$i"; done
holders
for i in 1 2 3 4 5 6; do call ateom.Ateom/TerminateWorkload "{\"actor_uid\":\"job$i\"}" >/dev/null; done
kill -TERM "$DAEMON_PID"; wait "$DAEMON_PID"; echo "ateom serve exited $? (SIGTERM: drain, exit 0)"
DAEMON_PID=""

echo; echo "phase durations (ms) of gpu-demo's calls, from the JSON log:"
"$PYTHON" - "$DEMO/daemon.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line) if line.startswith("{") else {}
    if e.get("event") == "phase" and e.get("actor_uid") == "gpu-demo":
        print(f"  {e['phase']:17} {e.get('container', ''):8} {e['duration_ms']:8.1f} {e['outcome']}")
PY
step "6. the seed: GPU actor gpu-1 serves GET /gpu; the router reaches it through ateom's ingress, by Host, over mTLS"
bash scripts/demo_seed.sh "$DEMO/seed"

echo; echo "logs and state kept in $DEMO"
