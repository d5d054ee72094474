#!/usr/bin/env bash
# Issue 12: programmatic dependent launch (PDL) and the products' grid, on the whole GPU and on the LM's
# partition, in one GPU call (each step skippable through STEPS):
#   chains     bench/gpu_gemv_pdl.py: the frame's product chains per variant (grid, first tile, PDL, the
#              tensor-core product), whole GPU and a 60-SM partition; the tensor-core product per config, flag
#   frame      bench/gpu_frame.py on the whole GPU, KV context 128: fused against fused-pdl
#   best       the frame with the variant (grid, first tile, PDL or not) the chains found fastest at one row
#   partition  fused against fused-pdl (best grid) on the LM's green-context partition, batch 1 and 64
#   skinny     the frame at 8 / 64 / 128 rows with the code predictor's products on the tensor-core product and
#              PDL (fused-skinny-pdl, the talker's on cuBLAS), in the config the chains' per-shape step found
#              fastest over the predictor's shapes at 64 rows
#   sampler    bench/gpu_kernels.py --only sampler (the sort-based and 16-bit searches against the rounds)
#   tune       bench/gpu_kernels.py --only paged,sampler (the talker's paged decode attention per tokens a round,
#              warps and stages; the sampler's threshold searches, radix among them), then the frame (fused,
#              whole GPU) with the committed defaults against the fastest of each (VOXRT_PAGED_DECODE_CONFIG,
#              VOXRT_SAMPLER_SEARCH; with them also fused-tritonattn: the tuned paged kernel at 1-8 rows too,
#              where `auto` takes FA3), and the fused check with them (teacher-forced logits against the reference)
#   inflight   the loop's bytes in flight at one row: the chains per bench/gpu_gemv_pdl.py "inflight" variant (grid,
#              plain first tile, the pipelined loop, warps), the frame with the defaults against VOXRT_GEMV set to
#              the fastest (bench/pick_tuned.py --gemv), and the fused check with it
#   pdlauto    the frame with VOXRT_PDL=auto (the default) against off, on the whole GPU and on the LM's partition;
#              with other PDL first tiles (FIRSTS); the fused check with the defaults
#   table      issue 12's frame table with the defaults (1.7B with TTFA alone and throughput, 0.6B), batches above
#              4 rows with PyTorch's cuBLAS workspace (TABLE_WS, empty: skipped; the engine runs with none), and
#              with PDL on at the batches in TABLE_PDL_ON; TABLE_TTFA=0: the 1.7B's frame table without TTFA
#   splitk     the tensor-core product split over K (kernels/gemv.py) at 5..128 rows: per shape against cuBLAS (each
#              split output checked against F.linear, twice for the same bits), the chains at 64 / 128 rows
#              (cuBLAS, split plan, unsplit), the frame at 8 / 64 / 128 with VOXRT_SKINNY=1 against the defaults
#              (whole GPU, and batch 64 on the LM's partition), with VOXRT_PDL=on beside it (the products' own
#              weight slice asked of the L2 before the wait), and the fused check (CHECK_ARGS --skinny on)
#   smtarget   the frame on the LM's green-context partition (--lanes auto) at SMT_BATCHES (64,96,128) with the
#              defaults against VOXRT_BLAS_SM_TARGET=lanes (cuBLAS's kernels chosen for the partition's SMs at
#              capture, runtime/cublas.py), then the lanes smoke test with it (bench/gpu_lanes_smoke.py)
#   check      bench/gpu_fused_check.py --pdl on: the fused path with PDL against the reference and against itself
#              without PDL (teacher-forced logits, greedy codes), with CHECK_ARGS (e.g. --skinny on)
# Run from the repository root on the GPU machine:
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_frame_pdl.sh
set -uo pipefail
OUT=${OUT:-out/pdl}
R=$OUT/r
mkdir -p "$R"
CKPT=/tmp/q17
STEPS=${STEPS:-frame chains skinny best sampler partition}
. bench/gpu_setup.sh
BEST_ARGS=""
BUDGET_S=${BUDGET_S:-540}  # a step that starts after this many seconds of the script is skipped
frame_run() {  # frame_run NAME LABEL LANES BATCHES [VAR=value ...]: the fused frame table (bench/gpu_frame.py,
  # kernels only) of checkpoint ${CK:-$CKPT} in its own process with that environment, printed under LABEL
  local name=$1 label=$2 lanes=$3 batches=$4; shift 4
  (cd bench && env "$@" timeout "${FRAME_TIMEOUT:-200}" python -u gpu_frame.py --checkpoint "${CK:-$CKPT}" \
    --lanes "$lanes" --batches "$batches" --paths fused --kernels-only --out "$R/$name") > "$R/$name.log" 2>&1
  echo "== frame, $label (rc $?)"; sed -n '/^== /,$p' "$R/$name.log" | grep -v "^\[trans"
  grep -i "Traceback\|Error" "$R/$name.log" | head -5
}
for step in $STEPS; do
  if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "== $step skipped (budget: ${SECONDS} s of ${BUDGET_S})"; continue; fi
  case $step in
    chains)
      (cd bench && timeout "${CHAINS_TIMEOUT:-200}" python -u gpu_gemv_pdl.py --out "$R" --rows "${ROWS:-1,8,64}") > "$R/chains.log" 2>&1
      echo "== chains (rc $?)"; sed -n '/^== /,$p' "$R/chains.log"; grep -i "Traceback" -A3 "$R/chains.log" | head -8 ;;
    frame)
      (cd bench && timeout "${FRAME_TIMEOUT:-200}" python -u gpu_frame.py --checkpoint $CKPT --lanes off \
        --batches "${BATCHES:-1,8,64,128}" --paths fused,fused-pdl --kernels-only --out "$R/frame") > "$R/frame.log" 2>&1
      echo "== frame (rc $?)"; sed -n '/^== /,$p' "$R/frame.log"; grep -i "Traceback\|Error" "$R/frame.log" | head -5 ;;
    best|partition)
      if [ -z "$BEST_ARGS" ]; then
        BEST_ARGS=$(python - "$R/gemv_pdl.json" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    rows = [r for r in d["chains"] if r.get("rows") == 1 and "ms" in r]
except Exception:
    d, rows = {}, []
tot = {}
for r in rows:
    tot[r["variant"]] = tot.get(r["variant"], 0.0) + r["ms"]
v = d.get("variants", {}).get(min(tot, key=tot.get) if tot else "pdl",
                             {"programs": 256, "first": 8192, "plain_first": 0, "pdl": True})
path = "fused-pdl" if v["pdl"] else "fused-nopdl"
print(f"--gemv-programs {v['programs']} --gemv-first {v['first']} --gemv-plain-first {v['plain_first']} --paths {path}")
EOF
        )
        echo "best PDL grid at one row: $BEST_ARGS"
      fi
      if [ "$step" = best ]; then
        (cd bench && timeout "${FRAME_TIMEOUT:-200}" python -u gpu_frame.py --checkpoint $CKPT --lanes off $BEST_ARGS \
          --batches "${BATCHES:-1,8,64,128}" --kernels-only --out "$R/best") > "$R/best.log" 2>&1
        echo "== best (rc $?)"; sed -n '/^== /,$p' "$R/best.log"; grep -i "Traceback\|Error" "$R/best.log" | head -5
      else
        (cd bench && timeout "${FRAME_TIMEOUT:-200}" python -u gpu_frame.py --checkpoint $CKPT --lanes auto \
          ${BEST_ARGS% --paths*} --batches 1,64 --paths fused,fused-pdl --kernels-only --out "$R/partition") > "$R/partition.log" 2>&1
        echo "== partition (rc $?)"; sed -n '/^== /,$p' "$R/partition.log"; grep -i "Traceback\|Error" "$R/partition.log" | head -5
      fi ;;
    skinny)
      SKINNY_CFG=$(python - "$R/gemv_pdl.json" <<'EOF'
import json, sys
try:
    rows = [r for r in json.load(open(sys.argv[1]))["skinny"] if r["rows"] == 64 and r["shape"].startswith("pred.")]
except Exception:
    rows = []
tot = {}
for r in rows:
    for key, us in r.items():
        if key.endswith("_us") and key not in ("cublas_us", "residual_us", "rstd_us", "silu+residual_us") \
                and isinstance(us, (int, float)):
            tot[key[:-3]] = tot.get(key[:-3], 0.0) + us
best = min(tot, key=tot.get) if tot else "plan"
print("" if best == "plan" else "--gemv-skinny-config " + best.replace("x", ","))
EOF
      )
      echo "skinny config: ${SKINNY_CFG:-planned}"
      (cd bench && timeout "${FRAME_TIMEOUT:-200}" python -u gpu_frame.py --checkpoint $CKPT --lanes off $SKINNY_CFG \
        --gemv-skinny-max-dim 1024 --batches 8,64,128 --paths fused-skinny,fused-skinny-pdl --kernels-only \
        --out "$R/skinny") > "$R/skinny.log" 2>&1
      echo "== skinny (rc $?)"; sed -n '/^== /,$p' "$R/skinny.log"; grep -i "Traceback\|Error" "$R/skinny.log" | head -5 ;;
    check)
      (cd bench && timeout "${CHECK_TIMEOUT:-280}" python -u gpu_fused_check.py --checkpoint $CKPT --out "$R" --pdl on \
        --requests 8 ${CHECK_ARGS:-}) > "$R/check.log" 2>&1
      echo "== fused check (rc $?)"; grep -v " INFO \|^ *warn" "$R/check.log" | tail -8 ;;
    tune)
      (cd bench && timeout "${TUNE_KERNELS_TIMEOUT:-240}" python -u gpu_kernels.py --only paged,sampler --out "$R/tune") \
        > "$R/tune-kernels.log" 2>&1
      echo "== tune kernels (rc $?)"; grep -i "Traceback\|MISMATCH\|FAILED" "$R/tune-kernels.log" | head -5
      TUNED=$(python bench/pick_tuned.py "$R/tune/kernels.json")
      echo "tuned: ${TUNED:-(the defaults won)}"; echo "$TUNED" > "$R/tuned.txt"
      (cd bench && timeout "${FRAME_TIMEOUT:-200}" python -u gpu_frame.py --checkpoint $CKPT --lanes off \
        --batches "${BATCHES:-1,8,64,128}" --paths fused --kernels-only --out "$R/tune-base") > "$R/tune-base.log" 2>&1
      echo "== frame, defaults (rc $?)"; sed -n '/^== /,$p' "$R/tune-base.log"; grep -i "Traceback\|Error" "$R/tune-base.log" | head -5
      if [ -n "$TUNED" ]; then
        (cd bench && env $TUNED timeout "${FRAME_TIMEOUT:-200}" python -u gpu_frame.py --checkpoint $CKPT --lanes off \
          --batches "${BATCHES:-1,8,64,128}" --paths fused,fused-tritonattn --kernels-only --out "$R/tune-best") \
          > "$R/tune-best.log" 2>&1
        echo "== frame, $TUNED (rc $?)"; sed -n '/^== /,$p' "$R/tune-best.log"; grep -i "Traceback\|Error" "$R/tune-best.log" | head -5
        (cd bench && env $TUNED timeout "${CHECK_TIMEOUT:-280}" python -u gpu_fused_check.py --checkpoint $CKPT \
          --out "$R/tune-check" --requests 16 --pdl off --decode-attention auto,triton) > "$R/tune-check.log" 2>&1
        echo "== fused check, $TUNED (rc $?)"; grep -v " INFO \|^ *warn" "$R/tune-check.log" | tail -8
      fi ;;
    inflight)
      # the loop's bytes in flight at one row (issue 12): bench/gpu_gemv_pdl.py's "inflight" variants on the
      # chains, then the frame with the defaults against VOXRT_GEMV set to the fastest, then the fused check
      (cd bench && timeout "${CHAINS_TIMEOUT:-240}" python -u gpu_gemv_pdl.py --out "$R/inflight" --only chains \
        --rows 1 --variants "${INFLIGHT_VARIANTS:-inflight}") > "$R/inflight.log" 2>&1
      echo "== inflight chains (rc $?)"; sed -n '/^== /,$p' "$R/inflight.log"; grep -i "Traceback" -A3 "$R/inflight.log" | head -8
      GEMV_BEST=$(python bench/pick_tuned.py --gemv "$R/inflight/gemv_pdl.json")
      echo "fastest at one row: ${GEMV_BEST:-(the defaults)}"; echo "$GEMV_BEST" > "$R/gemv-best.txt"
      (cd bench && timeout "${FRAME_TIMEOUT:-200}" python -u gpu_frame.py --checkpoint $CKPT --lanes off \
        --batches "${BATCHES:-1,8,64,128}" --paths fused --kernels-only --out "$R/inflight-base") > "$R/inflight-base.log" 2>&1
      echo "== frame, defaults (rc $?)"; sed -n '/^== /,$p' "$R/inflight-base.log"; grep -i "Traceback\|Error" "$R/inflight-base.log" | head -5
      if [ -n "$GEMV_BEST" ]; then
        (cd bench && env $GEMV_BEST timeout "${FRAME_TIMEOUT:-200}" python -u gpu_frame.py --checkpoint $CKPT \
          --lanes off --batches "${BEST_BATCHES:-1,4}" --paths fused --kernels-only --out "$R/inflight-best") \
          > "$R/inflight-best.log" 2>&1
        echo "== frame, $GEMV_BEST (rc $?)"; sed -n '/^== /,$p' "$R/inflight-best.log"; grep -i "Traceback\|Error" "$R/inflight-best.log" | head -5
        if [ "$SECONDS" -lt "${CHECK_BEFORE_S:-420}" ]; then
          (cd bench && env $GEMV_BEST timeout "${CHECK_TIMEOUT:-150}" python -u gpu_fused_check.py --checkpoint $CKPT \
            --out "$R/inflight-check" --requests 4 --pdl on) > "$R/inflight-check.log" 2>&1
          echo "== fused check, $GEMV_BEST (rc $?)"; grep -v " INFO \|^ *warn" "$R/inflight-check.log" | tail -8
        fi
      fi ;;
    pdlauto)
      # VOXRT_PDL=auto (PDL for launches of <= 4 rows) against off, whole GPU and on the LM's partition, each in
      # its own process; then the fused check with the defaults (PDL on against off, both against the reference)
      for mode in off auto; do
        frame_run pdl-$mode "whole GPU, VOXRT_PDL=$mode" off "${BATCHES:-1,2,4,8,64}" VOXRT_PDL=$mode
      done
      for mode in off auto; do
        frame_run pdl-part-$mode "LM partition, VOXRT_PDL=$mode" auto "${PART_BATCHES:-1,4}" VOXRT_PDL=$mode
      done
      for first in ${FIRSTS:-8192}; do
        frame_run pdl-first$first "whole GPU, VOXRT_GEMV=pdlfirst=$first" off 1 VOXRT_GEMV=pdlfirst=$first
      done
      if [ "$SECONDS" -lt "${CHECK_BEFORE_S:-440}" ]; then
        (cd bench && timeout "${CHECK_TIMEOUT:-150}" python -u gpu_fused_check.py --checkpoint $CKPT \
          --out "$R/pdl-check" --requests 4 --pdl on) > "$R/pdl-check.log" 2>&1
        echo "== fused check, defaults (rc $?)"; grep -v " INFO \|^ *warn\|^\[trans" "$R/pdl-check.log" | tail -6
      fi ;;
    table)
      # issue 12's table with the defaults, whole GPU, KV context 128: 1.7B (with TTFA alone and throughput) and
      # 0.6B
      ttfa=(); [ "${TABLE_TTFA:-1}" = 1 ] || ttfa=(--kernels-only)  # TABLE_TTFA=0: the frame table alone
      (cd bench && timeout "${FRAME_TIMEOUT:-200}" python -u gpu_frame.py --checkpoint $CKPT --lanes off \
        --batches "${BATCHES:-1,8,32,64,128}" --paths fused "${ttfa[@]}" --out "$R/table-17") > "$R/table-17.log" 2>&1
      echo "== frame, 1.7B, defaults (rc $?)"; sed -n '/^== /,$p' "$R/table-17.log" | grep -v "^\[trans"
      [ -f /tmp/q06/config.json ] || python -m voxrt.cli make-checkpoint --arch qwen3-tts-0.6b /tmp/q06 \
        --tokenizer-dir .gpu/qwen-tokenizer >> "$R/mk.log" 2>&1
      CK=/tmp/q06 frame_run table-06 "0.6B, defaults" off "${BATCHES:-1,8,32,64,128}"
      # the engine's cuBLAS runs without a workspace (runtime/cublas.py); PyTorch's own size on Hopper for contrast
      if [ -n "${TABLE_WS-:4096:8}" ]; then
        frame_run table-ws "1.7B, CUBLAS_WORKSPACE_CONFIG=${TABLE_WS:-:4096:8}" off 8,64,128 \
          CUBLAS_WORKSPACE_CONFIG="${TABLE_WS:-:4096:8}"
      fi
      if [ -n "${TABLE_PDL_ON:-}" ]; then  # PDL above 4 rows too (VOXRT_PDL=on), now with no split-K between
        frame_run table-pdlon "1.7B, VOXRT_PDL=on" off "$TABLE_PDL_ON" VOXRT_PDL=on
      fi ;;
    splitk)
      (cd bench && timeout "${CHAINS_TIMEOUT:-200}" python -u gpu_gemv_pdl.py --out "$R/splitk" --only skinny,chains \
        --rows "${SPLITK_ROWS:-64,128}") > "$R/splitk.log" 2>&1
      echo "== split-K products and chains (rc $?)"; sed -n '/^== /,$p' "$R/splitk.log"
      grep -i "Traceback" -A3 "$R/splitk.log" | head -8
      frame_run splitk-base "whole GPU, defaults (cuBLAS above 4 rows)" off "${SPLITK_BATCHES:-8,64,128}"
      frame_run splitk-on "whole GPU, VOXRT_SKINNY=1 (split-K tensor-core products above 4 rows)" off \
        "${SPLITK_BATCHES:-8,64,128}" VOXRT_SKINNY=1
      # every product ours, so PDL can chain them all: each asks the L2 for its weight slice before its wait
      frame_run splitk-pdl "whole GPU, VOXRT_SKINNY=1 VOXRT_PDL=on" off "${SPLITK_BATCHES:-8,64,128}" \
        VOXRT_SKINNY=1 VOXRT_PDL=on
      frame_run splitk-part-base "LM partition, defaults" auto 64
      frame_run splitk-part-on "LM partition, VOXRT_SKINNY=1" auto 64 VOXRT_SKINNY=1
      if [ "$SECONDS" -lt "${CHECK_BEFORE_S:-440}" ]; then
        (cd bench && timeout "${CHECK_TIMEOUT:-150}" python -u gpu_fused_check.py --checkpoint $CKPT \
          --out "$R/splitk-check" --requests 8 --tf-rows 16 --pdl off --skinny on) > "$R/splitk-check.log" 2>&1
        echo "== fused check, VOXRT_SKINNY (rc $?)"; grep -v " INFO \|^ *warn\|^\[trans" "$R/splitk-check.log" | tail -6
      fi ;;
    smtarget)
      frame_run smt-base "LM partition, defaults" auto "${SMT_BATCHES:-64,96,128}"
      frame_run smt-lanes "LM partition, VOXRT_BLAS_SM_TARGET=lanes" auto "${SMT_BATCHES:-64,96,128}" \
        VOXRT_BLAS_SM_TARGET=lanes
      grep -h "cuBLAS kernels chosen" "$R/smt-lanes.log" | head -1
      (VOXRT_BLAS_SM_TARGET=lanes timeout 200 python -u bench/gpu_lanes_smoke.py --model qwen3-tts --checkpoint $CKPT \
        --out "$R/smt-smoke") > "$R/smt-smoke.log" 2>&1
      echo "== lanes smoke, VOXRT_BLAS_SM_TARGET=lanes (rc $?)"; sed -n '/^lanes /,$p' "$R/smt-smoke.log" | head -12 ;;
    sampler)
      (cd bench && timeout 200 python -u gpu_kernels.py --only sampler --out "$R") > "$R/sampler.log" 2>&1
      echo "== sampler (rc $?)"; tail -6 "$R/sampler.log" | cut -c1-1500 ;;
  esac
done
tar czf "$OUT/pdl-results.tgz" -C "$OUT" r
[ -d ~/.triton/cache ] && tar czf "$OUT/triton-cache.tgz" -C ~/.triton cache
ls -la "$OUT"
