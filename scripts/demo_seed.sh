#!/usr/bin/env bash
# The seed (scripts/demo.sh's last step; alone: `bash scripts/demo_seed.sh [DIR]` as root,
# once scripts/bootstrap.sh has run): Agent Substrate's first GPU actor, gpu-1 in atespace
# gpu-demo, whose app answers GET /gpu by running nvidia-smi (the simulated node's
# stand-in). The router's way to it: HTTPS to ateom's ingress with the router's client
# certificate (certificates made here), routed by the Host header
# gpu-1.gpu-demo.actors.resources.substrate.ate.dev to the actor's own network; then a
# checkpoint, a restore, and the same request again. grpcurl drives ateom; the router's
# requests are python's (tests.support.demo_seed get: curl is not on a fresh Debian).
#
# The real runsc behind the emulated release: $ATEOM_DEMO_REAL_RUNSC, else runsc on PATH.
# An actor's own network needs one that can take a network namespace over on this kernel
# (Debian's 0.0~20240729 cannot on 6.18-like kernels, where every namespace looks like the
# host's): without one the step says why and how to run it, and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (runsc needs it)" >&2; exit 1; }

REAL_RUNSC=${ATEOM_DEMO_REAL_RUNSC:-$(command -v runsc || true)}
if ! why=$("$PYTHON" -m tests.support.demo_seed why-not "$REAL_RUNSC"); then
    echo "skipped: $why"
    echo "to run it: ATEOM_DEMO_REAL_RUNSC=<runsc of release-20240731 or newer> bash scripts/demo.sh"
    exit 0
fi

D=${1:-$(mktemp -d /tmp/ateom-seed.XXXXXX)}
mkdir -p "$D"
SOCK=$D/run/ateom.sock
A=$D/actors/seed-gpu-1  # the actor's root_dir (tests.support.demo_seed's layout)
HOST=gpu-1.gpu-demo.actors.resources.substrate.ate.dev
ROUTER_ID=spiffe://cluster.local/ns/ate-system/sa/atenet-router
# Every call names the actor as the node agent does: the router finds it by atespace and
# name, so a restore must carry the same ones as the run.
WHO='"atespace":"gpu-demo","actor_name":"gpu-1","actor_uid":"seed-gpu-1"'
DIRS="{\"root_dir\":\"$A\",\"oci_bundle_dir\":\"$A/bundles\",\"checkpoint_dir\":\"$A/checkpoint\",\"restore_dir\":\"$A/restore\"}"
# The app container: its GPU is the Pod's (no device choice); Run answers once GET /gpu
# answered 200 at the actor's address (its wakeup probe).
SPEC='{"containers":[{"name":"app","wakeup_probe":{"http_get":{"path":"/gpu","port":80},"timeout_seconds":30}}]}'
DAEMON_PID=""
stop_daemon() {
    if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID"; wait "$DAEMON_PID" || true
    fi
    DAEMON_PID=""
}
trap stop_daemon EXIT
call() { grpcurl -plaintext -unix -d "$2" "$SOCK" "$1"; }
router() { # router PATH: GET PATH as the router sends it; prints HTTP <status>, Retry-After, body
    "$PYTHON" -m tests.support.demo_seed get "$INGRESS" "$1" --certs "$D/certs"
}
shown() { sed 's/^/    /'; }
oneline() { # oneline ANSWER: "200: 2" for a short answer
    local head=${1%%$'\n'*}
    echo "${head#HTTP }: $(tail -n +2 <<<"$1" | paste -sd ' ' -)"
}
expect() { # expect WHAT TEXT PATTERN: fail the demo unless TEXT has a line matching PATTERN
    grep -qE "$3" <<<"$2" || { echo "demo: $1: expected /$3/, got:" >&2; echo "$2" >&2; exit 1; }
}

"$PYTHON" -m tests.support.demo_seed worker "$D" --real-runsc "$REAL_RUNSC"
echo "its real runsc: $("$REAL_RUNSC" --version | head -n 1)"

# Not --runsc-global-flag=--network=none: each actor gets a network of its own, which the
# ingress (ateom's data plane child) proxies to. with-gpu-nodes: a newer runsc's nvproxy
# opens /dev/nvidiactl and the rest at their paths, so ateom runs where stand-ins are
# there; its nvidia-cdi-hook is the worker's stand-in, in $D/toolkit.
PATH="$D/node/bin:$PATH" ATEOM_NVIDIA_TOOLKIT_DIR="$D/toolkit" "$D/bin/with-gpu-nodes" \
    "$PYTHON" -m ateom serve --socket "$SOCK" --actors-root "$D/actors" \
    --run-dir "$D/run" --runsc "$D/bin/runsc" --runsc-global-flag=--ignore-cgroups \
    --spec-dir "$D/cdi" --gpu-glob "$D/node/dev/nvidia[0-9]*" --proc-root "$D/node/proc" \
    --cuda-checkpoint "$D/cuda-checkpoint/cuda-checkpoint" --kill-grace 0.5 \
    --atunnel-listen-address 127.0.0.1:0 \
    --atunnel-credential-bundle "$D/certs/worker-credential-bundle.pem" \
    --atunnel-trust-bundle "$D/certs/root.pem" --atunnel-client-identity "$ROUTER_ID" \
    >>"$D/daemon.log" 2>&1 &
DAEMON_PID=$!
health=""
for _ in $(seq 200); do
    health=$(grpcurl -plaintext -unix "$SOCK" grpc.health.v1.Health/Check 2>/dev/null || true)
    grep -q '"SERVING"' <<<"$health" && break
    sleep 0.1
done
if grep -q NOT_SERVING <<<"$health"; then  # e.g. no nft or no CAP_NET_ADMIN: no networks
    echo "skipped: ateom cannot reach actors on this machine:"
    call ateom.Inspect/GetStatus '{}' | "$PYTHON" -c \
        'import json,sys; [print("  ", w) for w in json.load(sys.stdin).get("not_ready", [])]'
    exit 0
fi
grep -q '"SERVING"' <<<"$health" || { echo "ateom serve did not come up:" >&2; tail -20 "$D/daemon.log" >&2; exit 1; }
# The ingress's address, from the data plane's first log line (port 0: any free one).
INGRESS=$("$PYTHON" -c 'import json,sys
for line in open(sys.argv[1]):
    if "dataplane ready" in line:
        print(json.loads(line)["ingress"][0]); break' "$D/daemon.log")
echo "ateom serve: SERVING, its ingress on $INGRESS (mTLS; only $ROUTER_ID may call)"
echo "the router's request, as curl would send it:"
echo "    curl --cacert $D/certs/root.pem --cert $D/certs/router.pem --key $D/certs/router.key \\"
echo "        -H 'Host: $HOST' https://$INGRESS/gpu"

echo; echo "RunWorkload gpu-1 (answers once its wakeup probe, GET /gpu, answered 200):"
call ateom.Ateom/RunWorkload "{$WHO,\"spec\":$SPEC,\"actor_dirs\":$DIRS}" >/dev/null
out=$(router /gpu); echo "GET /gpu"; shown <<<"$out"
expect "GET /gpu" "$out" '^HTTP 200$'
expect "GET /gpu" "$out" '^GPU 0: NVIDIA H200 \(UUID: GPU-5eed0001-'
for _ in 1 2; do out=$(router /count); echo "GET /count -> $(oneline "$out")"; done
expect "GET /count" "$out" '^2$'

echo; echo "CheckpointWorkload gpu-1, while a request is in flight (GET /slow takes 10 s):"
router /slow >"$D/slow.out" &
slow=$!
sleep 1
answer=$(call ateom.Ateom/CheckpointWorkload "{$WHO,\"actor_dirs\":$DIRS}" | tr -d ' \n')
echo "    answer: $answer"
wait "$slow"
out=$(cat "$D/slow.out"); echo "GET /slow, cut by the checkpoint:"; shown <<<"$out"
expect "GET /slow" "$out" '^HTTP 503$'
expect "GET /slow" "$out" '^Retry-After: [0-9]+$'
out=$(router /gpu); echo "GET /gpu once the checkpoint answered (this worker hosts it no more):"
shown <<<"$out"
expect "GET /gpu after the checkpoint" "$out" '^HTTP 404$'

echo; echo "RestoreWorkload gpu-1 from that image (the node agent's part: checkpoint -> restore_dir):"
mv "$A/checkpoint" "$A/restore"
call ateom.Ateom/RestoreWorkload "{$WHO,\"spec\":$SPEC,\"actor_dirs\":$DIRS}" >/dev/null
out=$(router /gpu); echo "GET /gpu"; shown <<<"$out"
expect "GET /gpu after the restore" "$out" '^HTTP 200$'
out=$(router /count)
echo "GET /count -> $(oneline "$out") (the count went on from the checkpoint's memory)"
expect "GET /count after the restore" "$out" '^3$'

call ateom.Ateom/TerminateWorkload "{$WHO}" >/dev/null
out=$(router /gpu); echo "TerminateWorkload gpu-1; GET /gpu -> $(oneline "$out")"
expect "GET /gpu after the terminate" "$out" '^HTTP 404$'
kill -TERM "$DAEMON_PID"; wait "$DAEMON_PID"; echo "ateom serve exited $? (SIGTERM)"
DAEMON_PID=""
echo "the seed's logs and state kept in $D"
