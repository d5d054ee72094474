#!/usr/bin/env bash
# Issue 12: the talker's decode attention kernel and the sampler's early-stopping threshold search, in one GPU
# call (each step skippable through STEPS):
#   frame   bench/gpu_frame.py on the whole GPU, KV context 128: fused (the default decode kernel rule, auto),
#           fused-cudacores (FlashInfer's CUDA-core decode kernel at every batch,
#           split KV + merge), fused-fa2nosplit (its FA2 tensor-core kernel, one pass), fused-fa3
#   sampler bench/gpu_kernels.py --only sampler: us a draw per rule, candidates per round and warps, each
#           draw checked equal to the torch rule
#   check   bench/gpu_fused_check.py: the fused path (greedy runs on each of DECODE_CHECK's kernels) against the reference
#   long    bench/gpu_frame.py at KV context 512, batch 1 and 8: what no split costs a long sequence
#   kernel  bench/gpu_paged_decode_check.py: our decode kernel against its torch reference (and FlashInfer's)
# Run from the repository root on the GPU machine:
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_frame_attn.sh
set -uo pipefail
OUT=${OUT:-out/attn}
R=$OUT/r
mkdir -p "$R"
CKPT=/tmp/q17
STEPS=${STEPS:-kernel frame sampler check long}
. bench/gpu_setup.sh
for step in $STEPS; do
  case $step in
    frame)
      (cd bench && timeout "${FRAME_TIMEOUT:-300}" python -u gpu_frame.py --checkpoint $CKPT --lanes off \
        --batches "${BATCHES:-1,8,64,128}" --paths "${FRAME_PATHS:-fused,fused-cudacores,fused-fa3,fused-fa2nosplit}" --kernels-only \
        --out "$R/frame") > "$R/frame.log" 2>&1
      echo "== frame (rc $?)"; sed -n '/^== /,$p' "$R/frame.log"; grep -i "Traceback\|Error" "$R/frame.log" | head -5 ;;
    sampler)
      (cd bench && timeout 150 python -u gpu_kernels.py --only sampler --out "$R") > "$R/sampler.log" 2>&1
      echo "== sampler (rc $?)"; tail -4 "$R/sampler.log" | cut -c1-1500 ;;
    check)
      (cd bench && timeout 280 python -u gpu_fused_check.py --checkpoint $CKPT --out "$R" --pdl off --requests 8 \
        --decode-attention "${DECODE_CHECK:-fa3}") > "$R/check.log" 2>&1
      echo "== fused check (rc $?)"; grep -v " INFO \|^ *warn" "$R/check.log" | tail -5 ;;
    long)
      (cd bench && timeout 150 python -u gpu_frame.py --checkpoint $CKPT --lanes off --context 512 --batches "${LONG_BATCHES:-1,8}" \
        --paths "${LONG_PATHS:-fused,fused-cudacores}" --kernels-only --out "$R/long") > "$R/long.log" 2>&1
      echo "== long context (rc $?)"; sed -n '/^== /,$p' "$R/long.log"; grep -i "Traceback\|Error" "$R/long.log" | head -5 ;;
    kernel)
      (cd bench && timeout 120 python -u gpu_paged_decode_check.py) > "$R/kernel.log" 2>&1
      echo "== paged decode kernel check (rc $?)"; tail -3 "$R/kernel.log" ;;
  esac
done
tar czf "$OUT/attn-results.tgz" -C "$OUT" r
[ -d ~/.triton/cache ] && tar czf "$OUT/triton-cache.tgz" -C ~/.triton cache
ls -la "$OUT"
