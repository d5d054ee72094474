#!/bin/bash
# usage: prof.sh TREEDIR NAME SESSIONS [pyspy|thread]  (SERVE_EXTRA env)
tree=$1; name=$2; n=$3; mode=${4:-pyspy}
. /work/main/.venv/bin/activate; cd $tree; unset PYTHONPATH
python -m voxrt.loadgen.gateway_bench --sessions $n --duration 20 --ramp 2 --warmup 3 --gateway-cpus 0 --client-cpus 1 \
  --nice -10 --lead-ms 60 --out /tmp/gw8/prof/$name.json -- --opus-signal=music --encode-threads 1 $SERVE_EXTRA > /tmp/gw8/prof/$name.log 2>&1 &
bp=$!
sleep 12
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1); pid=$(basename $f | cut -d. -f2)
if [ "$mode" = pyspy ]; then
/tmp/gw7/pyspy/bin/py-spy record -r 250 -f raw --nonblocking $PYSPY_EXTRA -d 15 -p $pid -o /tmp/gw8/prof/$name.pyspy.txt > /dev/null 2>&1
else
snap() { for t in /proc/$pid/task/*; do echo "$(basename $t) $(cat $t/comm) $(awk '{print $14+$15, $14, $15}' $t/stat)"; done; }
snap > /tmp/gw8/prof/$name.t0; sleep 15; snap > /tmp/gw8/prof/$name.t1
fi
wait $bp
tail -2 /tmp/gw8/prof/$name.log
