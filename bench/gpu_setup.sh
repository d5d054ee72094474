# Sourced by the one-call GPU scripts (bench/gpu_async.sh, bench/gpu_knee_trace.sh) after they set R (the
# results dir) and CKPT: unpacks the carried Triton cache, records the GPU, library versions, date and
# commit in $R/gpu.txt (printed), and makes the full-size random 1.7B checkpoint at $CKPT if it is missing.
source bench/gpu_tokenizer.sh  # the stand-in tokenizer, unpacked
if [ -f .gpu/triton-cache.tgz ] && [ ! -d ~/.triton/cache ]; then mkdir -p ~/.triton && tar xzf .gpu/triton-cache.tgz -C ~/.triton; fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import torch, triton, flashinfer; print('torch', torch.__version__, 'triton', triton.__version__, 'flashinfer', flashinfer.__version__)"
  date -u; git log --oneline -1 2>/dev/null; } > "$R/gpu.txt" 2>&1
cat "$R/gpu.txt"
if [ ! -f "$CKPT/config.json" ]; then
  python -m voxrt.cli make-checkpoint --arch qwen3-tts-1.7b "$CKPT" --tokenizer-dir .gpu/qwen-tokenizer > "$R/mk.log" 2>&1
  # its ~4 GB are written back to disk for minutes after: wait here, not during a measured point (a stall of every
  # process of the machine at once, bench/results/2026-12-05-h100-opentext/, came 4 minutes after one)
  sync
fi
