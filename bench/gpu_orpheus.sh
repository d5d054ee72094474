#!/usr/bin/env bash
# Issue 16's GPU figures in one call: a full-size random Orpheus 3B checkpoint (make-checkpoint --arch
# orpheus-3b, with its byte-level test tokenizer: the Llama-3 vocabulary ships with no package here; prompts
# ~4x longer than Llama-3's), then bench/gpu_orpheus.py (graphs against eager, LM tokens/s per stream at BATCHES, TTFA),
# then an engine-direct capacity sweep on LibriTTS with the deadline scheduler and lanes (RATES, DURATION s of
# arrivals a point, pinned lengths). Run from the repository root on the GPU machine:
#
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_orpheus.sh
#
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
R=$OUT/orpheus
mkdir -p "$R"
{ [ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  date -u; git log --oneline -1 2>/dev/null; } > "$R/gpu.txt" 2>&1
cat "$R/gpu.txt"
if [ ! -f "$CKPT/config.json" ]; then
  python -m voxrt.cli make-checkpoint --arch "$ARCH" "$CKPT" > "$R/mk.log" 2>&1  # with its byte-level test tokenizer
  echo "== checkpoint $ARCH at $CKPT (rc $?)"; tail -2 "$R/mk.log"
fi
timeout 420 python -u bench/gpu_orpheus.py --checkpoint "$CKPT" --device "$DEVICE" --batches "$BATCHES" \
  --frames "$FRAMES" --out "$R" > "$R/bench.log" 2>&1
echo "== gpu_orpheus.py (rc $?)"; grep -v " INFO \| WARNING " "$R/bench.log" | tail -14
lanes=auto; [ "$DEVICE" = cpu ] && lanes=off
timeout 420 python -m voxrt.cli -v loadgen --engine-direct --model orpheus --checkpoint "$CKPT" --device "$DEVICE" \
  --scheduler-type deadline --lanes "$lanes" --workload bench/workloads/libritts_test_clean.jsonl --sweep "$RATES" \
  --stop-below 0.8 --duration "$DURATION" --seed 0 --max-requests 600 --out "$R/capacity" > "$R/capacity.log" 2>&1
echo "== capacity sweep (rc $?)"; sed -n '/rate   reqs/,$p' "$R/capacity.log"
tar czf "$OUT/orpheus.tgz" -C "$OUT" orpheus
