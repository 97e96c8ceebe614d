#!/usr/bin/env bash
# A real CUDA actor's turn through ateom on a lent GPU machine (issue 30): the one
# command to run there. What it does, step by step: scripts/gpu_real_turn/turn.py.
#
# 1. Here, once: gather what the GPU machine lacks into .gpu/ (git-ignored, ~25 MB):
#      bash scripts/gpu_real_turn.sh --pack RUNSC CUDA_CHECKPOINT
#    RUNSC: a gVisor release with checkpoint --cuda-checkpoint-path (stored xz'd);
#    CUDA_CHECKPOINT: NVIDIA's binary, used there only where the driver has none of its
#    own; also this machine's static busybox and wheels of ateom's dependencies for
#    the GPU machine's python3 (3.12; it reaches no package index).
# 2. There (the device tool), with a limit that leaves room for a rerun:
#      run(command="bash scripts/gpu_real_turn.sh", carry=[".gpu"], timeout_s=480)
#    Everything comes back under $OUT: report.json, summary.md, run.log,
#    fixtures.tar.gz, logs.tar.gz. Arguments after the command go to turn.py (--sizes, --budget...).
#
# The dry run, against the stand-in node of the newest-runsc suites, is
# tests/test_gpu_real_turn.py: it runs this script with ATEOM_GPU_PACK naming a pack
# of the stand-ins and PYTHON the project's interpreter (no wheels then).
#
# Exit codes: 0 every step that ran passed; 1 a step failed (report.json says which);
# 2 usage or a missing part of the pack.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
pack=${ATEOM_GPU_PACK:-$repo/.gpu}
PY=${PYTHON:-python3}

err=2  # where die() speaks: stderr, also once the output goes through tee
die() { echo "gpu_real_turn.sh: $*" >&"$err"; exit 2; }

if [[ ${1:-} == --pack ]]; then
    [[ $# -eq 3 ]] || die "usage: $0 --pack RUNSC CUDA_CHECKPOINT"
    [[ -x $2 ]] || die "--pack: $2 is not an executable runsc"
    [[ -f $3 ]] || die "--pack: $3 is not a file (cuda-checkpoint)"
    busybox=$(command -v busybox || true)
    [[ -n $busybox ]] && file -L "$busybox" | grep -q 'statically linked' \
        || die "--pack: needs a static busybox on PATH (Debian: busybox-static)"
    mkdir -p "$pack/wheels"
    xz -T0 -3 -c "$2" > "$pack/runsc.xz"
    cp "$3" "$pack/cuda-checkpoint"
    cp "$busybox" "$pack/busybox"
    # ateom's runtime dependencies (pyproject.toml's, pip resolving what they need) at
    # the versions CI passes with (constraints.txt), as wheels for CPython 3.12.
    mapfile -t deps < <("$PY" -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' \
        "$repo/pyproject.toml")
    rm -f "$pack"/wheels/*.whl
    "$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -c "$repo/constraints.txt" -d "$pack/wheels" "${deps[@]}"
    du -sh "$pack"
    exit 0
fi

[[ -n ${OUT:-} ]] || die "\$OUT is not set: the directory the results go to"
mkdir -p "$OUT"
exec 3>&2
err=3
exec > >(tee "$OUT/run.log") 2>&1  # the whole run's output comes back too
work=/var/tmp/ateom-gpu-turn-bin  # the unpacked runsc and wheels
if [[ -d $pack/wheels ]]; then
    mkdir -p "$work"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$work/site" "$pack"/wheels/*.whl
    export PYTHONPATH=$repo:$work/site
else
    export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}
fi
if [[ -f $pack/runsc.xz ]]; then
    mkdir -p "$work"
    xz -dc "$pack/runsc.xz" > "$work/runsc"
    chmod 755 "$work/runsc"
    runsc=$work/runsc
elif [[ -x $pack/runsc ]]; then
    runsc=$pack/runsc
else
    die "no runsc in $pack (runsc.xz or runsc): prepare it with --pack"
fi
# The driver's own cuda-checkpoint matches the driver; the pack's is the fallback.
driver_root=/usr/local/nvidia
for ((i = 1; i <= $#; i++)); do
    [[ ${!i} == --driver-root ]] && { j=$((i + 1)); driver_root=${!j}; }
done
cuda_checkpoint=$driver_root/bin/cuda-checkpoint
[[ -x $cuda_checkpoint ]] || cuda_checkpoint=$(command -v cuda-checkpoint || true)
[[ -n $cuda_checkpoint ]] || cuda_checkpoint=$pack/cuda-checkpoint
[[ -f $cuda_checkpoint ]] || die "no cuda-checkpoint (driver, PATH or $pack)"
chmod 755 "$cuda_checkpoint" 2>/dev/null || true
busybox=$pack/busybox
[[ -x $busybox ]] || busybox=/bin/busybox
cd "$repo"
exec "$PY" -m scripts.gpu_real_turn.turn --out "$OUT" --runsc "$runsc" --busybox "$busybox" \
    --cuda-checkpoint "$cuda_checkpoint" "$@"
