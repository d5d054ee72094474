# Sourced by perf.sh, profile.sh and threadcpu.sh with their arguments TREE NAME SESSIONS LEAD (SERVE_EXTRA env):
# starts one gateway_bench run in the background (bp: its pid) and, 12 s in, finds the gateway's pid (pid).
tree=$1; name=$2; n=$3; lead=$4
cd /work/main && . .venv/bin/activate
if [ "$tree" = base ]; then export PYTHONPATH=/tmp/gw6/base; else unset PYTHONPATH; fi
echo "$name start $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw6/runs/load.txt
python -m voxrt.loadgen.gateway_bench --sessions $n --duration 20 --ramp 2 --warmup 3 --gateway-cpus 0 --client-cpus 1 \
  --nice -10 --lead-ms $lead --out /tmp/gw6/runs/$name.json -- --opus-signal=music $SERVE_EXTRA > /tmp/gw6/runs/$name.log 2>&1 &
bp=$!
sleep 12
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1); pid=$(basename $f | cut -d. -f2)
