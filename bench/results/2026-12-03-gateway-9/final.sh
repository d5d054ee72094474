#!/bin/bash
. /work/main/.venv/bin/activate; unset PYTHONPATH
run() { # tree name sessions
  tree=$1; name=$2; sessions=$3
  cd /tmp/gw9/$tree
  echo "$name start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw9/final/load.txt
  python -m voxrt.loadgen.gateway_bench --sessions $sessions --duration 8 --ramp 2 --warmup 3 \
    --gateway-cpus 0 --client-cpus 1 --nice -10 --lead-ms 60 --opus-floor --out /tmp/gw9/final/$name.json -- --opus-signal=music --encode-threads 1 > /tmp/gw9/final/$name.log 2>&1
  echo "$name end $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw9/final/load.txt
}
S=10,20,30,40,50,60,70,80
run base base-lead60-run1 $S
run new new-lead60-run1 $S
run new new-lead60-run2 $S
run base base-lead60-run2 $S
run base base-lead60-run3 $S
run new new-lead60-run3 $S
echo done3 >> /tmp/gw9/final/load.txt
