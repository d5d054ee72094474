#!/usr/bin/env bash
# SLO capacity of Qwen3-TTS-1.7B (full-size random checkpoint) on one GPU, LibriTTS test-clean, Poisson arrivals,
# lengths pinned from the text: engine-direct (MODE=direct) or over the WebSocket of a local `voxrt serve`
# (MODE=ws). Run from the repository root on the GPU machine:
#
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH
#   MODE=direct OUT=out/lg bash bench/gpu_loadgen.sh
#
# Knobs (environment): SCHED (base), START (capacity search start rate), DURATION (s per point), TOL, SWEEP,
# MAXREQ, CKPT (made here when missing), EXTRA (more flags for both the engine and the server).
# The GPU image lacks the gateway's packages and libopus: carry their wheels and the library in .gpu/gw/ and
# install them first (see bench/results/2026-11-29-loadgen/README.md).
set -euo pipefail
MODE=${MODE:-direct}
OUT=${OUT:-out/lg}
SCHED=${SCHED:-base}
START=${START:-8}
DURATION=${DURATION:-15}
TOL=${TOL:-0.1}
SWEEP=${SWEEP:-4}
MAXREQ=${MAXREQ:-600}
CKPT=${CKPT:-/tmp/q17}
EXTRA=${EXTRA:-}
MODEL=${MODEL:-qwen3-tts}  # MODEL=tiny: a CPU dry run of this script (no checkpoint)
WORKLOAD=bench/workloads/libritts_test_clean.jsonl
mkdir -p "$OUT"
MODEL_ARGS=(--model "$MODEL")
if [ "$MODEL" = qwen3-tts ]; then
  [ -f "$CKPT/config.json" ] || python -m voxrt.cli make-checkpoint --arch qwen3-tts-1.7b "$CKPT" \
    --tokenizer-dir .gpu/qwen-tokenizer
  sync  # the checkpoint written back to disk before anything is measured (bench/gpu_setup.sh)
  MODEL_ARGS+=(--checkpoint "$CKPT")
fi
COMMON=(--workload "$WORKLOAD" --rate "$START" --sweep "$SWEEP" --capacity --capacity-tol "$TOL"
        --duration "$DURATION" --max-requests "$MAXREQ" --out "$OUT/$MODE-${TAG:-$SCHED}")
if [ "$MODE" = direct ]; then
  python -m voxrt.cli loadgen --engine-direct "${MODEL_ARGS[@]}" --scheduler-type "$SCHED" \
    $EXTRA "${COMMON[@]}"
else
  python -m voxrt.cli serve "${MODEL_ARGS[@]}" --scheduler-type "$SCHED" --port 8765 \
    --allow-pinned-lengths --max-sessions 2048 $EXTRA > "$OUT/serve-$SCHED.log" 2>&1 &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null || true' EXIT
  for _ in $(seq 1 240); do
    python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8765/readyz', timeout=2)" 2>/dev/null && break
    kill -0 $SERVER || { tail -30 "$OUT/serve-$SCHED.log"; exit 1; }
    sleep 1
  done
  python -m voxrt.cli loadgen --url ws://127.0.0.1:8765/v1/realtime "${COMMON[@]}"
fi
