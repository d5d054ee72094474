#!/usr/bin/env bash
# Where capacity goes at the knee, in one GPU call: engine-direct LibriTTS sweeps (1.7B random checkpoint,
# fused frame path, deadline scheduler with lanes, asynchronous LM loop), one traced run per rate, each
# summarised by bench/trace_summary.py (LM lane busy share and idle gaps, prefill share, decode batch,
# waiting queue, per codec lane busy share, launch sizes and late chunks).
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; RATES=32,40 OUT=$OUT bash bench/gpu_knee_trace.sh
# Knobs: RATES (32,40), DURATION (20), EXTRA (more loadgen/engine flags), CKPT (/tmp/q17), WORKLOAD
# (bench/workloads/libritts_test_clean.jsonl), MAXREQ (2000 a point).
set -uo pipefail
OUT=${OUT:-out/knee}
R=$OUT/r
mkdir -p "$R"
RATES=${RATES:-32,40}
DURATION=${DURATION:-20}
EXTRA=${EXTRA:-}
CKPT=${CKPT:-/tmp/q17}
WORKLOAD=${WORKLOAD:-bench/workloads/libritts_test_clean.jsonl}
MAXREQ=${MAXREQ:-2000}
[ -f "$WORKLOAD" ] || { echo "no workload file $WORKLOAD" >&2; exit 2; }
source bench/gpu_setup.sh  # Triton cache, $R/gpu.txt, the checkpoint
for rate in ${RATES//,/ }; do
  timeout 240 python -m voxrt.cli -v loadgen --engine-direct --model qwen3-tts --checkpoint $CKPT \
    --scheduler-type deadline --workload "$WORKLOAD" \
    --sweep "$rate" --duration "$DURATION" --seed 0 --max-requests "$MAXREQ" --out "$R/rate$rate" \
    --trace-dir "$R/trace-$rate" $EXTRA > "$R/rate$rate.log" 2>&1
  echo "== rate $rate (rc $?)"; sed -n '/rate   reqs/,$p' "$R/rate$rate.log" | grep -v "transformers\]"
  grep -m3 "lanes\|SM\|loop" "$R/rate$rate.log" | cut -c1-220
  python bench/trace_summary.py "$R/trace-$rate" --json "$R/trace-$rate.json"
  gzip -q "$R"/trace-$rate/*.jsonl
done
tar czf "$OUT/knee.tgz" -C "$OUT" r && rm -rf "$R"  # the device tool brings back at most 8 files
ls -la "$OUT"
