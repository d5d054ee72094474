#!/bin/bash
# usage: grid.sh TREE NAME : the round-9 grid from /tmp/gw10/TREE
tree=$1; name=$2
cd /tmp/gw10/$tree
echo "$name start $(date -u +%T) load $(cut -d" " -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw10/out/load.txt
/work/main/.venv/bin/python -m voxrt.loadgen.gateway_bench --sessions ${GRID:-10,20,30,40,50,60,70,80} --duration 8 --ramp 2 --warmup 3 \
    --gateway-cpus 0 --client-cpus 1 --nice -10 --lead-ms 60 --opus-floor --out /tmp/gw10/out/$name.json \
    -- --opus-signal=music --encode-threads 1 > /tmp/gw10/out/$name.log 2>&1
echo "$name end $(date -u +%T) load $(cut -d" " -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw10/out/load.txt
grep -E "libopus alone|ceiling" /tmp/gw10/out/$name.log
