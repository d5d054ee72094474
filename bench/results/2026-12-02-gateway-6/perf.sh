#!/bin/bash
tree=$1; name=$2; n=$3; lead=$4
cd /work/main && . .venv/bin/activate
if [ "$tree" = base ]; then export PYTHONPATH=/tmp/gw6/base; else unset PYTHONPATH; fi
echo "$name start $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw6/runs/load.txt
python -m voxrt.loadgen.gateway_bench --sessions $n --duration 20 --ramp 2 --warmup 3 --gateway-cpus 0 --client-cpus 1 \
  --nice -10 --lead-ms $lead --out /tmp/gw6/runs/$name.json -- --opus-signal=music $SERVE_EXTRA > /tmp/gw6/runs/$name.log 2>&1 &
bp=$!
sleep 12
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1); pid=$(basename $f | cut -d. -f2)
timeout 8 perf trace -s -p $pid -o /tmp/gw6/runs/$name.trace.txt >/dev/null 2>&1
perf record -e cpu-clock -F 1000 -g -p $pid -o /tmp/gw6/runs/$name.perf.data -- sleep 8 >/dev/null 2>&1
wait $bp
echo "$name end $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw6/runs/load.txt
