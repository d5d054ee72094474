#!/usr/bin/env bash
# An A/B of an engine change on the serving paths, on one GPU machine in one device call: bench/gpu_product_path.sh
# twice with the same arrivals, first with PATCH applied (a diff that turns the tree into the "before", e.g.
# bench/results/2026-12-07-h100-b256-paths/before-host-changes.patch), then without it. Machines differ by ~5
# points near the knee (that folder's README), so a change's effect is only read between runs of one machine.
# From the repository root on the GPU machine:
#
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH
#   PATCH=bench/results/2026-12-07-h100-b256-paths/before-host-changes.patch OUT=$OUT bash bench/gpu_host_ab.sh
#
# Knobs: PATCH (required), ORDER ("before after"; "after before" runs the tree as it is first), PATHS
# ("ws-tokens direct"), RATES_ws_tokens (144), RATES_direct (152), DURATION_S (60), BUDGET_S (560: the whole
# script; each run gets half of what is left when it starts), ENGINE_TRACE (requests), MODEL (qwen3-tts;
# MODEL=standin is the CPU dry run of the script), PYSPY (a py-spy executable: each run's engine threads sampled,
# bench/gpu_product_path.sh). Out: $OUT/before/, $OUT/after/ (each run's table.txt and
# product_path.tgz) and $OUT/ab.txt: both tables and, for the WebSocket runs, `bench/product_path.py chunks`.
# The patch is reversed on exit whatever happens, so the tree is left as it was found.
set -uo pipefail
PATCH=${PATCH:?set PATCH to the diff that turns the tree into the before}
OUT=${OUT:-out/host-ab}
ORDER=${ORDER:-before after}
BUDGET_S=${BUDGET_S:-560}
export PATHS=${PATHS:-ws-tokens direct}
export RATES_ws_tokens=${RATES_ws_tokens:-144} RATES_direct=${RATES_direct:-152}
export DURATION_S=${DURATION_S:-60} GW_WORKERS=${GW_WORKERS:-6} LOADGEN_PROCS=${LOADGEN_PROCS:-4}
export MAXREQ=${MAXREQ:-9000} WS_WARMUP=${WS_WARMUP:-4} ENGINE_TRACE=${ENGINE_TRACE:-requests}
[ -f "$PATCH" ] || { echo "no patch file $PATCH" >&2; exit 2; }
git apply --check "$PATCH" || { echo "$PATCH does not apply to this tree" >&2; exit 2; }
mkdir -p "$OUT"
applied=0
trap '[ $applied = 1 ] && git apply -R "$PATCH"' EXIT
SECONDS=0
total=$(echo "$ORDER" | wc -w); i=0
for which in $ORDER; do
  case $which in before) git apply "$PATCH" && applied=1 ;; after) ;; *) echo "ORDER: before and after only" >&2; exit 2 ;; esac
  i=$((i + 1)); budget=$(( (BUDGET_S - SECONDS) / (total - i + 1) ))  # an equal share of what is left
  echo "== $which (budget ${budget} s)"
  BUDGET_S=$budget RUN_TIMEOUT_S=$((budget - 40)) OUT="$OUT/$which" bash bench/gpu_product_path.sh > "$OUT/$which.log" 2>&1
  echo "   rc $?"
  if [ "$applied" = 1 ]; then git apply -R "$PATCH" && applied=0; fi
done
{
  for which in $ORDER; do
    echo "== $which"
    sed -n '1,/^path /p' "$OUT/$which/table.txt" 2>/dev/null | grep -v "^path "
    tmp=$(mktemp -d)
    if tar xzf "$OUT/$which/product_path.tgz" -C "$tmp" 2>/dev/null; then
      if ls "$tmp"/runs/gw-trace.*.jsonl >/dev/null 2>&1; then python bench/product_path.py chunks "$tmp/runs"; fi
      for f in "$tmp"/runs/*.pyspy.txt "$tmp"/runs/*.pyspy-gil.txt; do  # PYSPY: the engine process, sampled
        [ -s "$f" ] || continue
        echo "-- $(basename "$f")"
        python bench/pyspy_summary.py "$f" --under EngineCore.step --under _Hub._run --top 25 \
          --rate "${PYSPY_RATE:-200}" --seconds "${PYSPY_S:-30}"
      done
    fi
    rm -rf "$tmp"
  done
} > "$OUT/ab.txt"
cat "$OUT/ab.txt"
