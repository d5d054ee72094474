#!/bin/bash
# usage: grid.sh TREE LOOP NAME : round 11's flags, GRID's points, from /tmp/gw12/TREE, the gateway on --loop LOOP
tree=$1; loop=$2; name=$3
cd /tmp/gw12/$tree
echo "$name start $(date -u +%T) load $(cut -d" " -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw12/out/load.txt
/work/main/.venv/bin/python -m voxrt.loadgen.gateway_bench --sessions ${GRID:-10,20,30,40,50,60,70,80,100,120,140,160,180} --duration 8 --ramp 2 --warmup 3 \
    --gateway-cpus 0 --client-cpus 1 --nice -10 --lead-ms 60 --opus-floor --client-loop ${CLIENT_LOOP:-auto} --out /tmp/gw12/out/$name.json \
    -- --opus-signal=music --encode-threads 1 --loop $loop > /tmp/gw12/out/$name.log 2>&1
echo "$name end $(date -u +%T) load $(cut -d" " -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw12/out/load.txt
grep -E "libopus alone|ceiling|event loop" /tmp/gw12/out/$name.log
