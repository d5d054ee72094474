#!/bin/bash
# usage: grid.sh TREE OPUS_RATE NAME : round 12's flags, GRID's points, from /tmp/gw13/TREE, voxrt serve --opus-rate OPUS_RATE
tree=$1; rate=$2; name=$3
cd /tmp/gw13/$tree
echo "$name start $(date -u +%T) load $(cut -d" " -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw13/out/load.txt
/work/main/.venv/bin/python -m voxrt.loadgen.gateway_bench --sessions ${GRID:-60,100,120,130,140,150,160,170,180} --duration 8 --ramp 2 --warmup 3 \
    --gateway-cpus 0 --client-cpus 1 --nice -10 --lead-ms 60 --opus-floor --client-loop auto --out /tmp/gw13/out/$name.json \
    -- --opus-signal=music --encode-threads 1 --loop uvloop --opus-rate $rate > /tmp/gw13/out/$name.log 2>&1
echo "$name end $(date -u +%T) load $(cut -d" " -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw13/out/load.txt
grep -E "libopus alone|ceiling|event loop" /tmp/gw13/out/$name.log
