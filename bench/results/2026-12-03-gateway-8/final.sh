#!/bin/bash
# final grids, alternating base (a23ed92's tree) and new (a23ed92 + ec96a5f's worker order), each run from its own
# copy's directory; run as three scripts (the first four grids, the next two after 'done', the last four), in this order
. /work/main/.venv/bin/activate; unset PYTHONPATH
run() { # tree name sessions
  tree=$1; name=$2; sessions=$3
  cd /tmp/gw8/$tree
  echo "$name start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw8/final/load.txt
  python -m voxrt.loadgen.gateway_bench --sessions $sessions --duration 8 --ramp 2 --warmup 3 \
    --gateway-cpus 0 --client-cpus 1 --nice -10 --lead-ms 60 --opus-floor --out /tmp/gw8/final/$name.json -- --opus-signal=music --encode-threads 1 > /tmp/gw8/final/$name.log 2>&1
  echo "$name end $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw8/final/load.txt
}
S=10,20,30,40,50,60,70,80
run base base-lead60-run1 $S
run new new-lead60-run1 $S
run new new-lead60-run2 $S
run base base-lead60-run2 $S
echo done >> /tmp/gw8/final/load.txt
run base base-lead60-run3 $S
run new new-lead60-run3 $S
echo done3 >> /tmp/gw8/final/load.txt
run new new-lead60-run4 $S
run base base-lead60-run4 $S
run base base-lead60-run5 $S
run new new-lead60-run5 $S
echo done5 >> /tmp/gw8/final/load.txt
