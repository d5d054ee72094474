#!/usr/bin/env bash
# Issue 12 / 13 figures on the whole GPU beside the LM's partition, in one GPU call:
#   1. bench/gpu_frame.py --lanes off: the frame (talker + predictor, CUDA graphs) on all SMs, 1.7B and 0.6B
#   2. bench/gpu_prefill.py --lanes off and --lanes auto: the separate prefill stage (13 and 40 tokens, 1 and 8)
# (gpu_frame.sh with LANES=auto gives the frame on the LM partition, as the engine serves.) Run from the
# repository root on the GPU machine:
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_frame_whole.sh
set -uo pipefail
OUT=${OUT:-out/whole}
R=$OUT/r
mkdir -p "$R"
CKPT=/tmp/q17
. bench/gpu_setup.sh
[ -f /tmp/q06/config.json ] || python -m voxrt.cli make-checkpoint --arch qwen3-tts-0.6b /tmp/q06 \
  --tokenizer-dir .gpu/qwen-tokenizer >> "$R/mk.log" 2>&1
(cd bench && timeout 300 python -u gpu_frame.py --checkpoint /tmp/q17 --checkpoint /tmp/q06 --lanes off \
  --batches "${BATCHES:-1,8,32,64,128}" --paths fused --kernels-only --out "$R") > "$R/frame-whole.log" 2>&1
echo "== frame, whole GPU (rc $?)"; sed -n '/^== /,$p' "$R/frame-whole.log"
grep -A12 " batch 1: kernel time\| batch 64: kernel time" "$R/frame-whole.log" | head -30
grep -i "Traceback\|Error" "$R/frame-whole.log" | head -5
for lanes in off auto; do
  (cd bench && timeout 150 python -u gpu_prefill.py --checkpoint $CKPT --lanes $lanes --out "$R") > "$R/prefill-$lanes.log" 2>&1
  echo "== prefill, lanes $lanes (rc $?)"; grep -v " INFO \|^ *warn" "$R/prefill-$lanes.log" | tail -14
done
tar czf "$OUT/whole-results.tgz" -C "$OUT" r
[ -d ~/.triton/cache ] && tar czf "$OUT/triton-cache.tgz" -C ~/.triton cache
ls -la "$OUT"
