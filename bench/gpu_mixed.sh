#!/usr/bin/env bash
# One GPU call for mixed steps (issue 13 item 1): the check and timings of bench/gpu_mixed.py, the codec row
# of `voxrt profile-split` at the default 72-SM partition (issue 14), and optionally knee probes with
# --mixed-prefill (RATES, empty: none).
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; RATES=96 OUT=$OUT bash bench/gpu_mixed.sh
set -u
R=$OUT/m; CKPT=${CKPT:-/tmp/q17}; mkdir -p "$R"
source bench/gpu_setup.sh
(cd bench && timeout 240 python -u gpu_mixed.py --checkpoint "$CKPT" --out "$R" > "$R/mixed.log" 2>&1; echo "== mixed rc $?")
grep -v "voxrt.engine.graphs\|codec Causal" "$R/mixed.log" | tail -30
if [ "${SPLIT:-1}" = 1 ]; then
  timeout 150 python -m voxrt.cli profile-split --model qwen3-tts --checkpoint "$CKPT" --sm-modes 72 \
    --out "$R/split72.json" 2>&1 | grep -v "voxrt.engine.graphs\|codec Causal" > "$R/split72.log"
  tail -3 "$R/split72.log" | cut -c1-300
fi
tar czf "$OUT/mixed.tgz" -C "$OUT" m && rm -rf "$R"
if [ -n "${RATES:-}" ]; then
  RATES=$RATES DURATION=${DURATION:-20} EXTRA="--mixed-prefill ${EXTRA:-}" OUT=$OUT/k bash bench/gpu_knee_trace.sh 2>&1 \
    | grep -v "^total\|^d\|^-"
fi
