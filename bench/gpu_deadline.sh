#!/usr/bin/env bash
# Issue 7's comparison in one GPU call: SLO attainment over one grid of rates (engine-direct `voxrt loadgen`,
# LibriTTS test-clean, Poisson, pinned lengths, the same arrivals and rows at each rate for every config) of
#   (a) `base` in the time-shared synchronous loop (--lanes off),
#   (b) `base` with the lanes (LM and codec on green-context SM partitions, urgent lane),
#   (c) `deadline` with the lanes and the urgent lane,
# then a lanes smoke test (tokens and audio of the lanes against the loop) and `voxrt profile-split`.
# Capacity is read on the grid: the highest rate with every rate up to it at or above 90% / 99%.
# Each sweep climbs the grid and stops after a point below STOP (an overloaded point only takes long to drain).
# On a machine with two GPUs the configs run as two groups in parallel, one GPU each (GROUP0, GROUP1);
# on one GPU, one after the other. Run from the repository root on the GPU machine:
#
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_deadline.sh
#
# Knobs: SPLIT (codec-lane SMs; empty: the engine's default partition), RATES (RATES_deadline_lanes=... sets one
# config's grid: a config's sweep may start higher up the same grid), DURATION (s of arrivals per point), STOP,
# SEED, WORKLOAD (bench/workloads/*.jsonl, default LibriTTS test-clean), MAX_REQUESTS (per point), TRACE=1 (a
# --trace-dir for (c), summarised by bench/trace_summary.py),
# PER_RUN_S (limit per config; LIMIT_deadline_lanes=400 sets one config's), GROUP0 / GROUP1 (configs among
# base-sync base-lanes deadline-lanes smoke split (GROUP1="" runs none), deadline-demote (deadline-lanes with
# --deadline-late-start-demotion-ms $DEMOTION_MS, default 2000: bench/results/2026-12-04-late-start), and deadline-adaptive (--sm-modes $MODES --sm-mode adaptive)
# adaptive-smoke (its audio against the loop, switching every step)), and deadline+NAME: deadline-lanes with the
# engine/loadgen flags in $ARGS_NAME, NAME=value words among them the engine's environment (e.g. ARGS_skinny="VOXRT_SKINNY=1";
# GROUP0="deadline-lanes deadline+b256 deadline+live512"
# ARGS_b256="--max-batch-size 256" ARGS_live512="--max-live-requests 512": levers against (c) on the same arrivals;
# its results are runs/deadline-NAME, RATES_deadline_NAME / LIMIT_deadline_NAME set its grid and limit), and
# base-sync+NAME the same for the time-shared loop (runs/base-sync-NAME; e.g. ARGS_w100="--max-admission-wait-ms 100"
# on both (a) and (c): GROUP0="base-sync+w100 deadline-lanes deadline+w100").
# Every config runs with the load generator's default overload bound (`--max-admission-wait-ms auto`: 100 ms on a
# GPU; refusals count as misses); ARGS_off="--max-admission-wait-ms off" with deadline+off / base-sync+off measures
# without it, as every result dated 2026-12-06 or earlier did.
# Everything lands in $OUT/deadline.tgz (the device tool brings back few files) and compare.md.
set -uo pipefail
OUT=${OUT:-out/deadline}
SPLIT=${SPLIT:-}
DEMOTION_MS=${DEMOTION_MS:-2000}  # deadline-demote: --deadline-late-start-demotion-ms
MODES=${MODES:-32,64}  # deadline-adaptive: the SM modes it moves between
RATES=${RATES:-6,8,10,12,14,16,18,20,22,24}
DURATION=${DURATION:-15}
STOP=${STOP:-0.8}
SEED=${SEED:-0}
PER_RUN_S=${PER_RUN_S:-280}
GROUP0=${GROUP0-base-sync base-lanes}
GROUP1=${GROUP1-deadline-lanes smoke split}
WORKLOAD=${WORKLOAD:-bench/workloads/libritts_test_clean.jsonl}
MAX_REQUESTS=${MAX_REQUESTS:-600}
TRACE=${TRACE:-0}
CKPT=/tmp/q17
MODEL=${MODEL:-qwen3-tts}  # MODEL=tiny: a CPU dry run of the script (GROUP1="deadline-lanes", tiny RATES)
MODEL_ARGS=(--model "$MODEL")
[ "$MODEL" = qwen3-tts ] && MODEL_ARGS+=(--checkpoint $CKPT)
R=$OUT/runs
mkdir -p "$R"
if [ "$MODEL" = qwen3-tts ]; then
  source bench/gpu_setup.sh  # the tokenizer and Triton caches, $R/gpu.txt, the checkpoint at $CKPT
else
  python -c "import torch; print('torch', torch.__version__)" > "$R/gpu.txt" 2>&1
fi
split_args=(); [ -n "$SPLIT" ] && split_args=(--sm-modes "$SPLIT")

limit() {  # the time limit of one config: LIMIT_<config with _ for -> or PER_RUN_S
  local var="LIMIT_${1//-/_}"; echo "${!var:-$PER_RUN_S}"
}
rates() {  # the grid of one config: RATES_<config with _ for -> or RATES
  local var="RATES_${1//-/_}"; echo "${!var:-$RATES}"
}
loadgen() {  # TAG SCHED EXTRA...
  local tag=$1 sched=$2; shift 2
  timeout "$(limit "$tag")" python -m voxrt.cli -v loadgen --engine-direct "${MODEL_ARGS[@]}" \
    --scheduler-type "$sched" "$@" --workload "$WORKLOAD" --sweep "$(rates "$tag")" \
    --stop-below "$STOP" --duration "$DURATION" --seed "$SEED" --max-requests "$MAX_REQUESTS" --out "$R/$tag" \
    > "$R/$tag.log" 2>&1
  echo "== $tag (rc $?)"; sed -n '/rate   reqs/,$p' "$R/$tag.log"
}
config() {
  case $1 in
    base-sync) loadgen base-sync base --lanes off ;;
    base-lanes) loadgen base-lanes base --lanes auto "${split_args[@]}" ;;
    deadline-lanes) if [ "$TRACE" = 1 ]; then
                      loadgen deadline-lanes deadline --lanes auto "${split_args[@]}" --trace-dir "$R/trace-deadline"
                      python bench/trace_summary.py "$R/trace-deadline" --json "$R/trace-deadline.json" | tail -30
                      gzip -q "$R"/trace-deadline/*.jsonl
                    else
                      loadgen deadline-lanes deadline --lanes auto "${split_args[@]}"
                    fi ;;
    deadline-demote) loadgen deadline-demote deadline --lanes auto "${split_args[@]}" \
                       --deadline-late-start-demotion-ms "$DEMOTION_MS" ;;
    deadline-adaptive) loadgen deadline-adaptive deadline --lanes auto --sm-modes "$MODES" --sm-mode adaptive \
                         --trace-dir "$R/trace-adaptive"
                       echo "SM mode switches: $(cat "$R"/trace-adaptive/*.jsonl | grep -c '"kind":"sm_mode"')" ;;
    adaptive-smoke) timeout "$(limit adaptive-smoke)" python -u bench/gpu_lanes_smoke.py "${MODEL_ARGS[@]}" \
                      --rows adaptive --out "$R" > "$R/adaptive-smoke.log" 2>&1
                    echo "== adaptive-smoke (rc $?)"; sed -n '/^lanes /,$p' "$R/adaptive-smoke.log" ;;
    smoke) timeout "$(limit smoke)" python -u bench/gpu_lanes_smoke.py "${MODEL_ARGS[@]}" --out "$R" > "$R/smoke.log" 2>&1
           echo "== smoke (rc $?)"; sed -n '/^lanes /,$p' "$R/smoke.log" ;;
    split) timeout "$(limit split)" python -m voxrt.cli profile-split --model qwen3-tts --checkpoint $CKPT \
             --sm-modes 16,32,48,64,96 --out "$R/profile-split.json" > "$R/profile-split.log" 2>&1
           echo "== profile-split (rc $?)"; grep -v INFO "$R/profile-split.log" | tail -12 ;;
    deadline+*|base-sync+*)
                local base=${1%%+*} name=${1#*+} var; var="ARGS_${1#*+}"
                if [[ ! $name =~ ^[A-Za-z0-9_]+$ ]] || [ -z "${!var:-}" ]; then
                  echo "== $1: needs a name of letters, digits and _ and flags in $var"
                else
                  # words of the form NAME=value (e.g. VOXRT_SKINNY=1) are the engine's environment, the rest flags
                  local envs=() flags=() word
                  for word in ${!var}; do
                    if [[ $word =~ ^[A-Z][A-Z0-9_]*= ]]; then envs+=("$word"); else flags+=("$word"); fi
                  done
                  if [ "$base" = deadline ]; then flags=(--lanes auto "${split_args[@]}" "${flags[@]}"); sched=deadline
                  else flags=(--lanes off "${flags[@]}"); sched=base; fi
                  (for e in "${envs[@]}"; do export "${e?}"; done
                   loadgen "$base-$name" "$sched" "${flags[@]}")
                fi ;;
    *) echo "unknown config $1" ;;
  esac
}
group() {  # GPU CONFIGS...
  local gpu=$1; shift
  for c in "$@"; do CUDA_VISIBLE_DEVICES=$gpu config "$c"; done > "$R/group$gpu.out" 2>&1
}
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  group 0 $GROUP0 & group 1 $GROUP1 & wait
else
  group 0 $GROUP0 $GROUP1
fi
cat "$R"/group*.out
runs=()
for pair in "(a) base, time-shared loop=base-sync" "(b) base, lanes=base-lanes" \
            "(c) deadline, lanes + urgent lane=deadline-lanes" "(c) + late-start demotion ${DEMOTION_MS} ms=deadline-demote" \
            "(d) deadline, adaptive SM modes=deadline-adaptive"; do
  [ -f "$R/${pair##*=}/summary.json" ] && runs+=("${pair%=*}=$R/${pair##*=}")
done
for c in $GROUP0 $GROUP1; do  # the deadline+NAME and base-sync+NAME variants, each with its flags
  case $c in deadline+*|base-sync+*) var="ARGS_${c#*+}"; d="${c%%+*}-${c#*+}"; label="(c)"
    [ "${c%%+*}" = base-sync ] && label="(a)"
    [ -f "$R/$d/summary.json" ] && runs+=("$label + ${!var:-}=$R/$d") ;; esac
done
[ ${#runs[@]} -gt 0 ] && python -m voxrt.loadgen.compare --out "$R" "${runs[@]}"
cp "$R"/compare.md "$OUT"/ 2>/dev/null
tar czf "$OUT/deadline.tgz" -C "$OUT" runs && rm -rf "$R"
ls -la "$OUT"
