#!/bin/bash
# usage: prof.sh TREE NAME SESSIONS LEAD [mode: pyspy|thread]  (SERVE_EXTRA env)
tree=$1; name=$2; n=$3; lead=$4; mode=${5:-pyspy}
. /work/main/.venv/bin/activate; if [ "$tree" = new ]; then cd /work/main; else cd /tmp/gw7/$tree; fi
unset PYTHONPATH
echo "$name start $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw7/runs/load.txt
python -m voxrt.loadgen.gateway_bench --sessions $n --duration 20 --ramp 2 --warmup 3 --gateway-cpus 0 --client-cpus 1 \
  --nice -10 --lead-ms $lead --out /tmp/gw7/runs/$name.json -- --opus-signal=music $SERVE_EXTRA > /tmp/gw7/runs/$name.log 2>&1 &
bp=$!
sleep 12
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1); pid=$(basename $f | cut -d. -f2)
if [ "$mode" = pyspy ]; then
/tmp/gw7/pyspy/bin/py-spy record -r 200 -f raw --nonblocking -d 15 -p $pid -o /tmp/gw7/runs/$name.pyspy.txt > /dev/null 2>&1
else
steal() { grep "^cpu0" /proc/stat; }
snap() { for t in /proc/$pid/task/*; do echo "$(basename $t) $(cat $t/comm) $(awk '{print $14+$15, $14, $15}' $t/stat) $(grep -E '^(voluntary|nonvoluntary)' $t/status | awk '{print $2}' | tr '\n' ' ')"; done; }
kill -USR1 $pid; fa=$(python -c "import json;print(json.load(open(\"$f\"))[\"frames_sent\"])"); sleep 10; kill -USR2 $pid; fb=$(python -c "import json;print(json.load(open(\"$f\"))[\"frames_sent\"])"); echo "frames $((fb-fa))" > /tmp/gw7/runs/$name.frames
fi
wait $bp
echo "$name end $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw7/runs/load.txt
tail -2 /tmp/gw7/runs/$name.log
