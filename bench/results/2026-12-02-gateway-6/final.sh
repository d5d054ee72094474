#!/bin/bash
cd /tmp/gw6
run() { # tree name sessions lead extra
  tree=$1; name=$2; sessions=$3; lead=$4; extra=$5
  cd /work/main && . .venv/bin/activate
  if [ "$tree" = base ]; then export PYTHONPATH=/tmp/gw6/base; else unset PYTHONPATH; fi
  leadarg=""; [ "$lead" != "300" ] && leadarg="--lead-ms $lead"
  echo "$name start $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw6/final/load.txt
  python -m voxrt.loadgen.gateway_bench --sessions $sessions --duration 8 --ramp 2 --warmup 3 \
    --gateway-cpus 0 --client-cpus 1 --nice -10 $leadarg --opus-floor --out /tmp/gw6/final/$name.json -- --opus-signal=music $extra > /tmp/gw6/final/$name.log 2>&1
  echo "$name end $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw6/final/load.txt
}
run base base-lead60-run1 10,20,30,40,50,60 60 ""
run new new-lead60-run1 10,20,30,40,50,60 60 "--encode-threads 1"
run base base-lead60-run2 10,20,30,40,50,60 60 ""
run new new-lead60-run2 10,20,30,40,50,60 60 "--encode-threads 1"
run base base-lead300-run1 10,20,30,40,50 300 ""
run new new-lead300-run1 10,20,30,40,50 300 "--encode-threads 1"
echo done >> /tmp/gw6/final/load.txt
