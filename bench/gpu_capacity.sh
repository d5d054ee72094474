#!/usr/bin/env bash
# Issue 15's one run, in jobs that fit the device tool's 10-minute calls: SLO capacity of
#   (a) `base`, the time-shared loop (--lanes off)          job a
#   (b) `base` with the lanes                                job b
#   (c) `deadline` with the lanes and the urgent lane        job c
#   (c) over the WebSocket, tokens at 30/s (gateway + load generator on the GPU host)   job ws
#   (c) traced at its knee (bench/trace_summary.py: LM busy %, codec busy %, prefill share)   job trace
#   the SM-split levers against (c), 30 s points (issue 15's Build 1: codec SMs, priority streams, adaptive)  job split
# on LibriTTS test-clean and the Seed-TTS eval set (DATASET libritts / seedtts), 60 s points, Poisson, seed 0:
# the same arrivals and rows at a rate for every config and call. Each job runs bench/gpu_deadline.sh,
# bench/gpu_product_path.sh or bench/gpu_knee_trace.sh with the grid of its dataset below, into $OUT/<dataset>-<job>/
# (a tgz and a table each: the tool brings back 8 files). bench/capacity_report.py assembles the jobs of every
# call into compare.md, the plots and the acceptance checks, and says when the calls ran on different GPU kinds.
# From the repository root on the GPU machine:
#
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH
#   CALL=1 OUT=$OUT bash bench/gpu_capacity.sh       # or JOBS="libritts:a libritts:b" ...
#
# A job of 60 s points costs ~75 s a point (arrivals, then the drain) plus ~40 s for the engine's start; STOP
# (0.8) ends a sweep after its first point below it. The whole run in six calls (~9 minutes each on one GPU), CALL=N
# (or JOBS=... for any other set), (c) and (a) in one call so that their ratio comes from one machine:
#   CALL=1: JOBS="libritts:c libritts:a"   2: "libritts:trace libritts:b"   3: "libritts:ws"
#   CALL=4: JOBS="seedtts:c seedtts:a"     5: "seedtts:trace seedtts:b"     6: "seedtts:ws"
# Give calls 2 and 5 the knee call 1 / 4 found: CALL=2 KNEE_libritts=<(c)'s 90% capacity> (the trace goes first, so
# that (b)'s sweep, of unknown length, takes what is left of the call rather than the trace).
# Run them back to back on one warm machine where the device allows (machines of one kind have differed by points
# at the knee). A job the budget cuts short (its log says which rates ran) goes on in a later call with its
# remaining rates, e.g. JOBS="libritts:a" GRID_libritts_a=96: bench/capacity_report.py merges a config's points by rate.
# A 4-point job took ~290 s on an H100 (2026-12-06-h100-capacity-run), the trace ~60 s. To check the split on the GPU
# of the run: JOBS="libritts:split" (the default lanes beside two levers a call,
# SPLIT_VARIANTS below; the same arrivals, 30 s points at SPLIT_RATES, every rate run: no early stop).
# The grids depend on the GPU (KIND: h200 when nvidia-smi names an H200, else h100; tiny for MODEL=tiny), set
# around the knees measured there with max batch 256 (below); each starts where the lower capacity (99%) needs it.
# Knobs: CALL, JOBS, BUDGET_S (570: every job's limit is cut to what is left), DURATION (60), STOP (0.8), KIND,
# GRID_<dataset>_<job> (a job's rates, e.g. GRID_libritts_c=104,112,120), KNEE_<dataset> (the traced rate; unset: the
# (c) job's 90% capacity when that job ran earlier in the same call, else the kind's default), SPLIT_RATES (120,128),
# SPLIT_VARIANTS (the split job's levers: NAME=flags;..., VAR=value words among the flags set the engine's
# environment, e.g. "skinny=VOXRT_SKINNY=1"), MODEL=tiny (a CPU dry run: a, b, c and ws only).
set -uo pipefail
OUT=${OUT:-out/capacity}
CALL=${CALL:-}
case "$CALL" in
  1) JOBS=${JOBS:-libritts:c libritts:a} ;;  2) JOBS=${JOBS:-libritts:trace libritts:b} ;;  3) JOBS=${JOBS:-libritts:ws} ;;
  4) JOBS=${JOBS:-seedtts:c seedtts:a} ;;    5) JOBS=${JOBS:-seedtts:trace seedtts:b} ;;    6) JOBS=${JOBS:-seedtts:ws} ;;
  "") JOBS=${JOBS:-libritts:a} ;;
  *) echo "CALL is 1-6 (the header's calls), not $CALL" >&2; exit 2 ;;
esac
BUDGET_S=${BUDGET_S:-570}
DURATION=${DURATION:-60}
STOP=${STOP:-0.8}
MODEL=${MODEL:-qwen3-tts}
SPLIT_RATES=${SPLIT_RATES:-120,128}
# two levers a call beside the default lanes (3 sweeps of 2 points of 30 s: ~320 s on an H100); another call:
# SPLIT_VARIANTS="streams=--lanes streams;adaptive=--sm-modes 56,72 --sm-mode adaptive". The default is now codec
# 64 SMs / LM 68 for Qwen3-TTS: on an H100 it held 100% at 104-116 req/s as 72 / 60 did, and 72.3 / 66.0% at
# 120 / 128 where 72 held 60.6 / 48.2% and 56 69.8 / 61.2% (bench/results/2026-12-06-h100-split)
SPLIT_VARIANTS=${SPLIT_VARIANTS:-s56=--sm-modes 56;s72=--sm-modes 72}

# Each dataset's grid per job and GPU kind, around the knees measured with max batch 256 (the default since
# 2026-12-07 on GPUs of 64 GiB or more). LibriTTS: on an H200 (a) >= 96 at 90% and 88 at 99%, (c) 152 / 144
# (bench/results/2026-12-07-h200-lm-lane/); on an H100 (a) >= 88 / 80, (c) 160 / >= 144 (2026-12-07-h100-batch256/;
# other H100s 152-160 at 90%), over the WebSocket with tokens 152 (2026-12-07-host-loop/); (b) not measured at 256
# (112, as (c), with max batch 128 on an H100: 2026-12-06-h100-capacity-run/). Seed-TTS (rows ~60% as long): (c) 184
# with max batch 128 on an H100 (2026-12-06-h100-hold-codec-batch; its grid goes past it). A sweep climbs its grid
# and stops after a point below STOP, so each grid starts one step under the lower of the knees measured: every
# point costs ~75 s.
gpu_kind() {  # h200, h100 (any other GPU: the H100's grids), or tiny for the CPU dry run
  if [ "$MODEL" != qwen3-tts ]; then echo tiny; return; fi
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
    *H200*) echo h200 ;;
    *) echo h100 ;;
  esac
}
KIND=${KIND:-$(gpu_kind)}
case $KIND in
  h200) d_lt_a=88,96,104;    d_lt_c=144,152,160,168; d_lt_ws=136,144,152,160; d_lt_knee=152 ;;
  *)    d_lt_a=80,88,96,104; d_lt_c=144,152,160,168; d_lt_ws=136,144,152,160; d_lt_knee=160 ;;
esac
GRID_libritts_a=${GRID_libritts_a:-$d_lt_a}
GRID_libritts_b=${GRID_libritts_b:-112,120,128,136,144,152}
GRID_libritts_c=${GRID_libritts_c:-$d_lt_c}
GRID_libritts_ws=${GRID_libritts_ws:-$d_lt_ws}
GIVEN_KNEE_libritts=${KNEE_libritts:-}; GIVEN_KNEE_seedtts=${KNEE_seedtts:-}  # the trace job's rate, when given
KNEE_libritts=${KNEE_libritts:-$d_lt_knee}
GRID_seedtts_a=${GRID_seedtts_a:-88,104,120,136}
GRID_seedtts_b=${GRID_seedtts_b:-120,136,152,168}
GRID_seedtts_c=${GRID_seedtts_c:-168,184,200,216,232}
GRID_seedtts_ws=${GRID_seedtts_ws:-152,168,184,200,216}
KNEE_seedtts=${KNEE_seedtts:-192}
if [ "$KIND" = tiny ]; then  # the CPU dry run: rates a tiny model on two cores holds
  for v in GRID_libritts_a GRID_libritts_b GRID_libritts_c GRID_libritts_ws GRID_seedtts_a GRID_seedtts_b \
           GRID_seedtts_c GRID_seedtts_ws; do printf -v "$v" 1,2; done
fi

SECONDS=0
mkdir -p "$OUT"
left() { echo $((BUDGET_S - SECONDS)); }
note() { echo "[$(printf '%4d' $SECONDS) s] $*" | tee -a "$OUT/jobs.txt"; }
tree_hash() {  # the tree that ran (the device's .git is stale); `python bench/capacity_report.py --tree-hash` on the
  # dev machine prints the same for its checkout: every .py and .sh under voxrt/ and bench/ but bench/results/,
  # links followed (voxrt/models links to the model programs)
  find -L voxrt bench -path bench/results -prune -o \( -name '*.py' -o -name '*.sh' \) -type f -print | LC_ALL=C sort \
    | xargs sha1sum | sha1sum | cut -c1-12
}
knee_of() {  # knee_of DATASET: the trace job's rate: KNEE_<dataset> when given, else the (c) job's 90% capacity
  # in this call's $OUT (run it first: JOBS="libritts:c libritts:trace"), else KNEE_<dataset>'s default
  local given="GIVEN_KNEE_$1" fallback="KNEE_$1" found=""
  if [ -z "${!given}" ] && [ -f "$OUT/$1-c.log.gz" ]; then
    found=$(gzip -dc "$OUT/$1-c.log.gz" | sed -n 's/^capacity at 90% attainment: \([0-9][0-9]*\) req\/s.*/\1/p' | head -1)
  fi
  echo "${found:-${!fallback}}"
}
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
note "tree $(tree_hash); jobs: $JOBS; budget ${BUDGET_S} s; grids for $KIND${gpu_name:+ ($gpu_name)}"
for job in $JOBS; do
  dataset=${job%%:*}; what=${job#*:}
  case $dataset in
    libritts) workload=bench/workloads/libritts_test_clean.jsonl ;;
    seedtts) workload=bench/workloads/seedtts_eval_en.jsonl ;;
    *) note "unknown dataset in $job (libritts or seedtts)"; continue ;;
  esac
  grid_var="GRID_${dataset}_${what}"
  grid=${!grid_var:-}
  out="$OUT/$dataset-$what"
  t=$(left)
  if [ "$t" -lt 120 ]; then note "$job skipped: $t s of the budget left"; continue; fi
  # the most requests a point can hold: its rate's arrivals with room for Poisson's spread
  top=$(echo "${grid:-$SPLIT_RATES}" | tr ',' '\n' | sort -n | tail -1)
  maxreq=$(( (top * DURATION * 12) / 10 + 200 ))
  rates=$grid; [ "$what" = trace ] && rates=$(knee_of "$dataset"); [ "$what" = split ] && rates=$SPLIT_RATES
  note "$job: $workload, rates $rates, ${t} s left"
  case $what in
    a|b|c)
      config=$(case $what in a) echo base-sync ;; b) echo base-lanes ;; c) echo deadline-lanes ;; esac)
      var="RATES_${config//-/_}"; lim="LIMIT_${config//-/_}"
      env "$var=$grid" "$lim=$((t - 15))" GROUP0="$config" GROUP1=" " WORKLOAD="$workload" DURATION="$DURATION" \
        STOP="$STOP" MAX_REQUESTS="$maxreq" MODEL="$MODEL" OUT="$out" bash bench/gpu_deadline.sh > "$out.log" 2>&1
      ;;
    ws)
      model=$MODEL; [ "$MODEL" = tiny ] && model=standin
      # 6 gateway processes and 4 load generator processes, as the H200's 112 req/s runs (2026-12-05-h200-same-run)
      RATES="$grid" DURATION_S="$DURATION" PATHS="ws-tokens" WORKLOAD="$workload" GW_WORKERS=6 LOADGEN_PROCS=4 \
        MAXREQ="$maxreq" RUN_TIMEOUT_S=$((t - 60)) BUDGET_S=$((t - 10)) WS_WARMUP=4 ENGINE_TRACE=requests \
        MODEL="$model" OUT="$out" bash bench/gpu_product_path.sh > "$out.log" 2>&1
      ;;
    trace)
      RATES="$rates" DURATION=20 WORKLOAD="$workload" MAXREQ=$(( rates * 30 )) OUT="$out" \
        bash bench/gpu_knee_trace.sh > "$out.log" 2>&1
      ;;
    split)
      groups="deadline-lanes"; args=()
      IFS=';' read -ra variants <<< "$SPLIT_VARIANTS"
      for v in "${variants[@]}"; do
        name=${v%%=*}; groups+=" deadline+$name"; args+=("ARGS_$name=${v#*=}" "RATES_deadline_$name=$SPLIT_RATES")
      done
      n=${#variants[@]}
      env "${args[@]}" RATES="$SPLIT_RATES" PER_RUN_S=$(( (t - 20) / (n + 1) )) GROUP0="$groups" GROUP1=" " \
        WORKLOAD="$workload" DURATION=30 STOP=0.001 MAX_REQUESTS="$maxreq" MODEL="$MODEL" OUT="$out" \
        bash bench/gpu_deadline.sh > "$out.log" 2>&1
      ;;
    *) note "unknown job $what in $job (a, b, c, ws, trace, split)"; continue ;;
  esac
  note "$job done (rc $?)"
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ |capacity at|^== " "$out.log" | tee -a "$OUT/jobs.txt"
  gzip -f "$out.log"
done
note "done"
