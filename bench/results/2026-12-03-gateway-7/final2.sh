#!/bin/bash
# final grids, alternating base (b2dd50f's tree) and new (d0a91d9 from git archive), each run from its own copy's directory
. /work/main/.venv/bin/activate; unset PYTHONPATH
run() { # tree name sessions lead extra
  tree=$1; name=$2; sessions=$3; lead=$4; extra=$5
  cd /tmp/gw7/$tree
  leadarg=""; [ "$lead" != "300" ] && leadarg="--lead-ms $lead"
  echo "$name start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw7/final2/load.txt
  python -m voxrt.loadgen.gateway_bench --sessions $sessions --duration 8 --ramp 2 --warmup 3 \
    --gateway-cpus 0 --client-cpus 1 --nice -10 $leadarg --opus-floor --out /tmp/gw7/final2/$name.json -- --opus-signal=music $extra > /tmp/gw7/final2/$name.log 2>&1
  echo "$name end $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $(grep '^cpu0' /proc/stat)" >> /tmp/gw7/final2/load.txt
}
run base base-lead60-run3 10,20,30,40,50,60,70,80,90 60 "--encode-threads 1"
run new new-lead60-run3 10,20,30,40,50,60,70,80,90 60 "--encode-threads 1"
run base base-lead60-run4 10,20,30,40,50,60,70,80,90 60 "--encode-threads 1"
run new new-lead60-run4 10,20,30,40,50,60,70,80,90 60 "--encode-threads 1"
echo done >> /tmp/gw7/final2/load.txt
