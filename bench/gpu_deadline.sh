#!/usr/bin/env bash
# Issue 7's comparison in one GPU call: SLO capacity (engine-direct, LibriTTS test-clean, Poisson, pinned
# lengths) of (c) `deadline` with green-context lanes and the urgent lane, (b) `base` with the same lanes,
# (a) `base` in the time-shared synchronous loop (--lanes off). Then a short lanes smoke test (tokens and audio
# against the loop). Run from the repository root on the GPU machine:
#
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_deadline.sh
#
# Knobs: SPLIT (codec-lane SMs, from `voxrt profile-split`), DURATION, TOL, START, PER_RUN_S, CONFIGS (which
# of smoke deadline-lanes base-sync base-lanes to run (smoke: tokens and audio of the lanes against the loop): split them over calls when points are long, e.g. DURATION=30
# takes ~260 s per config). The 2026-11-29 run used the defaults below and its 150 s limit cut (c) short.
set -uo pipefail
OUT=${OUT:-out/deadline}
SPLIT=${SPLIT:-32}
PER_RUN_S=${PER_RUN_S:-160}
export DURATION=${DURATION:-10} TOL=${TOL:-0.15} START=${START:-8} SWEEP=${SWEEP:-8} MODE=direct OUT
python -m voxrt.cli make-checkpoint --arch qwen3-tts-1.7b /tmp/q17 --tokenizer-dir .gpu/qwen-tokenizer > "$OUT/mk.log" 2>&1
run() {  # TAG SCHED EXTRA
  TAG=$1 SCHED=$2 EXTRA=$3 timeout "$PER_RUN_S" bash bench/gpu_loadgen.sh > "$OUT/$1.log" 2>&1
  echo "== $1 (rc $?)"; grep -E "capacity at|lanes|error|Error" "$OUT/$1.log" | grep -v INFO | tail -4
}
mkdir -p "$OUT"
CONFIGS=${CONFIGS:-deadline-lanes base-sync base-lanes}
for c in $CONFIGS; do
  case $c in
    deadline-lanes) run deadline-lanes deadline "--lanes auto --sm-modes $SPLIT --trace-dir $OUT/trace-deadline"
      if ! grep -q "capacity at" "$OUT/deadline-lanes.log"; then  # lanes failed: the policy alone, one stream
        run deadline-sync deadline "--lanes off"
      fi ;;
    base-sync) run base-sync base "--lanes off" ;;
    base-lanes) run base-lanes base "--lanes auto --sm-modes $SPLIT" ;;
    smoke) timeout "$PER_RUN_S" python -u bench/gpu_lanes_smoke.py --checkpoint /tmp/q17 --out "$OUT" \
             > "$OUT/smoke.log" 2>&1; echo "== smoke (rc $?)"; sed -n '/^lanes /,$p' "$OUT/smoke.log" ;;
    *) echo "unknown config $c" ;;
  esac
done
for t in deadline-lanes deadline-sync base-lanes base-sync; do
  [ -f "$OUT/$t.log" ] || continue
  echo "== $t"; sed -n '/rate   reqs/,$p' "$OUT/$t.log"
done
