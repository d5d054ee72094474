#!/usr/bin/env bash
# Issue 16's GPU figures in one call: a full-size random Orpheus 3B checkpoint (make-checkpoint --arch
# orpheus-3b, with its byte-level test tokenizer: the Llama-3 vocabulary ships with no package here; prompts
# ~4x longer than Llama-3's), then bench/gpu_orpheus.py (graphs against eager, LM tokens/s per stream at BATCHES, TTFA),
# then an engine-direct capacity sweep on LibriTTS with the deadline scheduler and lanes (RATES, DURATION s of
# arrivals a point, pinned lengths). Run from the repository root on the GPU machine:
#
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_orpheus.sh
#
# STEPS (bench capacity), BENCH_TIMEOUT / CAP_TIMEOUT (420 s each) cut it into calls that fit 600 s each; the
# checkpoint stays in CKPT while the machine is warm.
# A CPU dry run: DEVICE=cpu CKPT=/tmp/orp ARCH=orpheus-tiny BATCHES=1,4 FRAMES=12 RATES=1 DURATION=4 OUT=/tmp/o bash bench/gpu_orpheus.sh
set -uo pipefail
OUT=${OUT:-out/orpheus}
CKPT=${CKPT:-/tmp/orpheus3b}
ARCH=${ARCH:-orpheus-3b}
DEVICE=${DEVICE:-cuda}
BATCHES=${BATCHES:-1,16,64}
FRAMES=${FRAMES:-40}
RATES=${RATES:-2,4,6,8,10,12}
DURATION=${DURATION:-30}
EXTRA=${EXTRA:-}
TAG=${TAG:-}  # suffix of the capacity sweep's directory and log (several sweeps in one $OUT)  # more loadgen / engine flags for the capacity sweep (e.g. --sm-modes 16)
STOP_BELOW=${STOP_BELOW:-0.8}  # the sweep stops after the first point under this attainment (none: run every rate)
stop=(--stop-below "$STOP_BELOW"); [ "$STOP_BELOW" = none ] && stop=()
BENCH_TIMEOUT=${BENCH_TIMEOUT:-420}  # seconds for gpu_orpheus.py
CAP_TIMEOUT=${CAP_TIMEOUT:-420}  # seconds for the capacity sweep
STEPS=${STEPS:-bench capacity}  # which steps run (a 600 s call may not hold both with the checkpoint write)
R=$OUT/orpheus
mkdir -p "$R"
{ [ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  date -u; git log --oneline -1 2>/dev/null; } > "$R/gpu.txt" 2>&1
cat "$R/gpu.txt"
if [ ! -f "$CKPT/config.json" ]; then
  python -m voxrt.cli make-checkpoint --arch "$ARCH" "$CKPT" > "$R/mk.log" 2>&1  # with its byte-level test tokenizer
  echo "== checkpoint $ARCH at $CKPT (rc $?)"; tail -2 "$R/mk.log"
fi
pack() { tar czf "$OUT/orpheus.tgz" -C "$OUT" orpheus; }  # after each step, so that a cut call keeps what ran
if [[ " $STEPS " == *" bench "* ]]; then
timeout "$BENCH_TIMEOUT" python -u bench/gpu_orpheus.py --checkpoint "$CKPT" --device "$DEVICE" --batches "$BATCHES" \
  --frames "$FRAMES" --out "$R" > "$R/bench.log" 2>&1
echo "== gpu_orpheus.py (rc $?)"; grep -v " INFO \| WARNING " "$R/bench.log" | tail -14
pack
fi
if [[ " $STEPS " == *" capacity "* ]]; then
lanes=auto; [ "$DEVICE" = cpu ] && lanes=off
timeout "$CAP_TIMEOUT" python -m voxrt.cli -v loadgen --engine-direct --model orpheus --checkpoint "$CKPT" --device "$DEVICE" \
  --scheduler-type deadline --lanes "$lanes" --workload bench/workloads/libritts_test_clean.jsonl --sweep "$RATES" \
  "${stop[@]}" --max-seq-len 4096 --duration "$DURATION" --seed 0 --max-requests 600 --out "$R/capacity$TAG" $EXTRA > "$R/capacity$TAG.log" 2>&1
echo "== capacity sweep (rc $?)"; sed -n '/rate   reqs/,$p' "$R/capacity$TAG.log"
pack
fi
