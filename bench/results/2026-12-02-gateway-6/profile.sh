#!/bin/bash
# usage: profile.sh TREE NAME SESSIONS LEAD  (SERVE_EXTRA env)
tree=$1; name=$2; n=$3; lead=$4
cd /work/main && . .venv/bin/activate
if [ "$tree" = base ]; then export PYTHONPATH=/tmp/gw6/base; else unset PYTHONPATH; fi
echo "$name start $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw6/runs/load.txt
python -m voxrt.loadgen.gateway_bench --sessions $n --duration 20 --ramp 2 --warmup 3 --gateway-cpus 0 --client-cpus 1 \
  --nice -10 --lead-ms $lead --out /tmp/gw6/runs/$name.json -- --opus-signal=music $SERVE_EXTRA > /tmp/gw6/runs/$name.log 2>&1 &
bp=$!
sleep 12
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1); pid=$(basename $f | cut -d. -f2)
echo "gateway pid $pid"
/tmp/gw6/pyspy/bin/py-spy record -r 200 -f raw --nonblocking -d 15 -p $pid -o /tmp/gw6/runs/$name.pyspy.txt > /dev/null 2>&1
wait $bp
echo "$name end $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw6/runs/load.txt
