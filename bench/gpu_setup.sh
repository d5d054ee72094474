# Sourced by the one-call GPU scripts (bench/gpu_async.sh, bench/gpu_knee_trace.sh) after they set R (the
# results dir) and CKPT: unpacks the carried Triton cache, records the GPU, library versions, date, commit
# and a line on the host (bench/host_probe.sh) in $R/gpu.txt (printed), logs every GPU's clocks, temperature,
# power and clock-limit reasons every 5 s to $R/gpu-clocks.csv while the script runs (a run near the knee that falls over where another held may have
# run at lower clocks: bench/results/2026-12-06-h100-overload/), and makes the full-size random 1.7B checkpoint
# at $CKPT if it is missing.
source bench/gpu_tokenizer.sh  # the stand-in tokenizer, unpacked
if [ -f .gpu/triton-cache.tgz ] && [ ! -d ~/.triton/cache ]; then mkdir -p ~/.triton && tar xzf .gpu/triton-cache.tgz -C ~/.triton; fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import torch, triton, flashinfer; print('torch', torch.__version__, 'triton', triton.__version__, 'flashinfer', flashinfer.__version__)"
  date -u; git log --oneline -1 2>/dev/null; } > "$R/gpu.txt" 2>&1
source bench/host_probe.sh; host_probe "$R/gpu.txt"  # the host's CPU and its planner's speed
cat "$R/gpu.txt"
clock_fields=timestamp,index,clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active
nvidia-smi --query-gpu=$clock_fields --format=csv,noheader > /dev/null 2>&1 \
  || clock_fields=${clock_fields/clocks_event_reasons/clocks_throttle_reasons}  # older drivers' name
echo "$clock_fields" > "$R/gpu-clocks.csv"
( while kill -0 $$ 2> /dev/null; do
    nvidia-smi --query-gpu=$clock_fields --format=csv,noheader,nounits 2> /dev/null; sleep 5
  done >> "$R/gpu-clocks.csv" ) &
if [ ! -f "$CKPT/config.json" ]; then
  python -m voxrt.cli make-checkpoint --arch qwen3-tts-1.7b "$CKPT" --tokenizer-dir .gpu/qwen-tokenizer > "$R/mk.log" 2>&1
  # its ~4 GB are written back to disk for minutes after: wait here, not during a measured point (a stall of every
  # process of the machine at once, bench/results/2026-12-05-h100-opentext/, came 4 minutes after one)
  sync
fi
