#!/usr/bin/env bash
# Issue 13 item 2 in one GPU call (1.7B random checkpoint, fused frame path, deadline scheduler with lanes),
# the asynchronous LM loop (--async-lm) against the synchronous one (the default):
#   1. bench/gpu_async_check.py: the asynchronous loop's frames equal the synchronous loop's; drain wall times
#   2. engine-direct LibriTTS sweep RATES (24,32,40) x DURATION (30 s), asynchronous: capacity
#   3. SYNC_RATE (32) traced, asynchronous and synchronous: the GPU idle between LM launches (median, p99)
#   4. TTFA at 1 req/s, asynchronous
# Run from the repository root on the GPU machine:
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_async.sh
set -uo pipefail
OUT=${OUT:-out/async}
R=$OUT/r
mkdir -p "$R"
RATES=${RATES:-24,32,40}
SYNC_RATE=${SYNC_RATE:-32}
DURATION=${DURATION:-30}
SWEEPS=${SWEEPS:-"async async-traced sync-traced ttfa-1rps"}  # which of the runs below
CHECK=${CHECK:-1}  # 0 skips gpu_async_check.py
CKPT=/tmp/q17
source bench/gpu_setup.sh  # Triton cache, $R/gpu.txt, the checkpoint
[ "$CHECK" = 1 ] && (cd bench && timeout 240 python -u gpu_async_check.py --checkpoint $CKPT --out "$R") > "$R/check.log" 2>&1
echo "== async check (rc $?)"; grep -v " INFO \|^ *warn\|transformers\]" "$R/check.log" | tail -4
idle() {  # median / p99 GPU idle between LM launches, per trace file
  python - "$1" <<'PY'
import json, sys, glob
import numpy as np
for path in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    idle = [r["gpu_idle_ms"] for r in map(json.loads, open(path)) if r.get("kind") == "lm" and r.get("gpu_idle_ms") is not None]
    gpu = [r["gpu_ms"] for r in map(json.loads, open(path)) if r.get("kind") == "lm" and r.get("gpu_ms") is not None]
    if idle:
        a = np.array(idle)
        print(f"  {path.split('/')[-1]}: {len(a)} LM steps, GPU idle between them p50 {np.median(a):.3f} ms, "
              f"p90 {np.percentile(a, 90):.3f}, p99 {np.percentile(a, 99):.3f}, mean {a.mean():.3f}; "
              f"LM step GPU ms p50 {np.median(gpu):.2f}")
PY
}
sweep() {  # name, rates, extra args
  local name=$1 rates=$2; shift 2
  timeout 280 python -m voxrt.cli -v loadgen --engine-direct --model qwen3-tts --checkpoint $CKPT \
    --scheduler-type deadline --workload bench/workloads/libritts_test_clean.jsonl \
    --sweep "$rates" --duration "$DURATION" --seed 0 --max-requests 2000 --out "$R/$name" "$@" > "$R/$name.log" 2>&1
  echo "== $name (rc $?)"; sed -n '/rate   reqs/,$p' "$R/$name.log" | grep -v "transformers\]"
}
on() { case " $SWEEPS " in *" $1 "*) return 0 ;; esac; return 1; }
on async && sweep async "$RATES" --async-lm
on async-traced && { sweep async-traced "$SYNC_RATE" --async-lm --trace-dir "$R/trace-async"; idle "$R/trace-async"; }
on sync-traced && { sweep sync-traced "$SYNC_RATE" --trace-dir "$R/trace-sync"; idle "$R/trace-sync"; }
on ttfa-1rps && sweep ttfa-1rps 1 --async-lm
tar czf "$OUT/async-results.tgz" -C "$OUT" r
ls -la "$OUT"
