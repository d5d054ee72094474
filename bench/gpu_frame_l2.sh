#!/usr/bin/env bash
# Issue 12, the L2 prefetch and the tensor-core product (kernels/gemv.py), in one GPU call:
#   1. bench/gpu_gemv_sweep.py: the frame's product chains (predictor 15 steps, talker step) at 1..128 rows per
#      variant (base, l2, skinny, l2+skinny), and the tensor-core product's tile configs against cuBLAS
#   2. bench/gpu_frame.py on the whole GPU (LANES, default off) for FRAME_PATHS (default fused, fused-l2,
#      fused-skinny, fused-l2-skinny): talker / predictor / frame ms, floor, kernels per frame
#   3. CHECK=1: bench/gpu_fused_check.py with both switches on and 8 requests (the tensor-core product runs)
# Run from the repository root on the GPU machine:
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_frame_l2.sh
set -uo pipefail
OUT=${OUT:-out/l2}
R=$OUT/r
mkdir -p "$R"
CKPT=/tmp/q17
SWEEP=${SWEEP:-1}
CHECK=${CHECK:-0}
if [ "$SWEEP" = 1 ]; then
  (cd bench && timeout "${SWEEP_TIMEOUT:-200}" python -u gpu_gemv_sweep.py --out "$R" --rows "${ROWS:-1,8,32,64,128}" \
    ${SWEEP_ARGS:-}) > "$R/sweep.log" 2>&1
  echo "== sweep (rc $?)"; sed -n '/^== /,$p' "$R/sweep.log"; grep -i "Traceback\|Error" "$R/sweep.log" | head -5
fi
. bench/gpu_setup.sh
if [ "$CHECK" = 1 ]; then
  (cd bench && timeout 240 python -u gpu_fused_check.py --checkpoint $CKPT --out "$R" --pdl off --l2-prefetch on \
    --skinny on --requests 8) > "$R/check.log" 2>&1
  echo "== fused check, L2 prefetch + tensor-core product (rc $?)"; grep -v " INFO \|^ *warn" "$R/check.log" | tail -6
fi
(cd bench && timeout "${FRAME_TIMEOUT:-330}" python -u gpu_frame.py --checkpoint $CKPT --lanes "${LANES:-off}" \
  --batches "${BATCHES:-1,8,64,128}" --paths "${FRAME_PATHS:-fused,fused-l2,fused-skinny,fused-l2-skinny}" --kernels-only \
  --out "$R") > "$R/frame.log" 2>&1
echo "== frame (rc $?)"; sed -n '/^== /,$p' "$R/frame.log"; grep -i "Traceback\|Error" "$R/frame.log" | head -5
tar czf "$OUT/l2-results.tgz" -C "$OUT" r
[ -d ~/.triton/cache ] && tar czf "$OUT/triton-cache.tgz" -C ~/.triton cache
ls -la "$OUT"
