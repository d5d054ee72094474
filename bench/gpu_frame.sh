#!/usr/bin/env bash
# Issue 12 in one GPU call: the fused frame path against the reference path on full-size random checkpoints.
#   1. bench/gpu_fused_check.py: teacher-forced logits and greedy codes of both paths (1.7B), and of the fused
#      path with PDL on against off; exits 1 on a mismatch
#   2. bench/gpu_frame.py: per batch talker / predictor / frame ms, floor, ratio, kernels per frame and the
#      per-kernel profile at batch 1 and 64; TTFA alone; 64 x 50 frames in-process; per checkpoint; per path of
#      FRAME_PATHS (reference, fused = with PDL, fused-nopdl = the same kernels launched plainly, fused-cublas)
#   3. `voxrt bench` (the engine process) with 64 requests on each path (BENCH=0 skips it)
# KERNELS_ONLY=1: step 2 without TTFA and throughput. LANES=off: step 2 on the whole GPU (no SM partition). Run from the repository root on the GPU machine:
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_frame.sh
# PDL against no PDL at 1.7B, about 3-4 minutes:
#   BATCHES=1,8,64,128 CKPTS=/tmp/q17 BENCH=0 FRAME_PATHS=fused,fused-nopdl OUT=$OUT bash bench/gpu_frame.sh
# Everything lands in $OUT/frame-results.tgz; Triton's compiled kernels in $OUT/triton-cache.tgz.
set -uo pipefail
OUT=${OUT:-out/frame}
R=$OUT/r
mkdir -p "$R"
BATCHES=${BATCHES:-1,8,32,64,128}
CKPTS=${CKPTS:-"/tmp/q17 /tmp/q06"}
BENCH=${BENCH:-1}
CHECK=${CHECK:-1}  # 0 skips the fused-vs-reference check
KERNELS_ONLY=${KERNELS_ONLY:-0}
LANES=${LANES:-auto}  # auto: the LM on its green-context partition (as the engine serves); off: the whole GPU
extra=(--lanes "$LANES"); [ "$KERNELS_ONLY" = 1 ] && extra+=(--kernels-only)
if [ -f .gpu/triton-cache.tgz ] && [ ! -d ~/.triton/cache ]; then mkdir -p ~/.triton && tar xzf .gpu/triton-cache.tgz -C ~/.triton; fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import torch, triton, flashinfer; print('torch', torch.__version__, 'triton', triton.__version__, 'flashinfer', flashinfer.__version__)"
  date -u; git log --oneline -1 2>/dev/null; } > "$R/gpu.txt" 2>&1
cat "$R/gpu.txt"
source bench/gpu_tokenizer.sh  # the stand-in tokenizer, unpacked
[ -f /tmp/q17/config.json ] || python -m voxrt.cli make-checkpoint --arch qwen3-tts-1.7b /tmp/q17 --tokenizer-dir .gpu/qwen-tokenizer > "$R/mk.log" 2>&1
case "$CKPTS" in *q06*) python -m voxrt.cli make-checkpoint --arch qwen3-tts-0.6b /tmp/q06 --tokenizer-dir .gpu/qwen-tokenizer >> "$R/mk.log" 2>&1 ;; esac
tail -2 "$R/mk.log"
if [ "$CHECK" = 1 ]; then
  (cd bench && timeout 240 python -u gpu_fused_check.py --checkpoint /tmp/q17 --out "$R") > "$R/check.log" 2>&1
  echo "== fused check (rc $?)"; grep -v " INFO \|^ *warn" "$R/check.log" | tail -6
fi
args=(); for c in $CKPTS; do args+=(--checkpoint "$c"); done
(cd bench && timeout 420 python -u gpu_frame.py "${args[@]}" --batches "$BATCHES" --paths "${FRAME_PATHS:-reference,fused}" \
  "${extra[@]}" --out "$R") > "$R/frame.log" 2>&1
echo "== frame (rc $?)"; grep -A16 " batch 1: kernel time\| batch 64: kernel time" "$R/frame.log" | grep -v " frame {"
sed -n '/^== /,$p' "$R/frame.log"; grep -i "error\|Traceback" "$R/frame.log" | head -5
if [ "$BENCH" = 1 ]; then
  for path in reference fused; do
    timeout 120 python -m voxrt.cli bench --model qwen3-tts --checkpoint /tmp/q17 --requests 64 --num-frames 50 \
      --frame-path $path > "$R/bench64-$path.txt" 2>&1
    echo "== voxrt bench --frame-path $path (rc $?)"; grep -i "realtime factor\|requests,\|ready" "$R/bench64-$path.txt"
  done
fi
tar czf "$OUT/frame-results.tgz" -C "$OUT" r
[ -d ~/.triton/cache ] && tar czf "$OUT/triton-cache.tgz" -C ~/.triton cache
ls -la "$OUT"
