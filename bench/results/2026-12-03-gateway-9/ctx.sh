#!/bin/bash
tree=$1; name=$2; n=$3
. /work/main/.venv/bin/activate; cd $tree; unset PYTHONPATH
python -m voxrt.loadgen.gateway_bench --sessions $n --duration 20 --ramp 2 --warmup 3 --gateway-cpus 0 --client-cpus 1 \
  --nice -10 --lead-ms 60 --out /tmp/gw9/prof/$name.json -- --opus-signal=music --encode-threads 1 > /tmp/gw9/prof/$name.log 2>&1 &
bp=$!
sleep 12
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1); pid=$(basename $f | cut -d. -f2)
snap() { for t in /proc/$pid/task/*; do echo "$(basename $t) $(grep -h ctxt $t/status | awk '{print $2}' | tr '\n' ' ') $(awk '{print $14+$15}' $t/stat)"; done; }
snap > /tmp/gw9/prof/$name.c0; cp $f /tmp/gw9/prof/$name.s0
sleep 15
snap > /tmp/gw9/prof/$name.c1; cp $f /tmp/gw9/prof/$name.s1
wait $bp
