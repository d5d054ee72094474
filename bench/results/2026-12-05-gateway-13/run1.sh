#!/bin/bash
# usage: run1.sh TREE OPUS_RATE NAME [SESSIONS] : one point (15 s window), the gateway on uvloop with --opus-rate OPUS_RATE, clients on uvloop
tree=$1; loop=$2; name=$3; n=${4:-60}
cd /tmp/gw13/$tree && /work/main/.venv/bin/python -m voxrt.loadgen.gateway_bench --sessions $n --duration ${DUR:-15} --ramp 2 --warmup 3 --gateway-cpus 0 --client-cpus 1 --nice -10 --lead-ms 60 --client-loop ${CLIENT_LOOP:-auto} --out /tmp/gw13/out/$name.json -- --opus-signal=music --encode-threads 1 --loop uvloop --opus-rate $loop ${SERVE:-} > /tmp/gw13/out/$name.log 2>&1
/work/main/.venv/bin/python - "$name" <<'PY'
import json,sys
name=sys.argv[1]; r=json.load(open(f'/tmp/gw13/out/{name}.json'))['rows'][0]
print(f"{name}: {r['gateway_loop'].split(' (')[0]} us/frame {1e6*r['cpu_cores']/r['frames_per_s']:.1f} loop {1e6*r['loop_cpu_cores']/r['frames_per_s']:.1f} p50 {r['jitter']['p50_ms']} p99 {r['jitter']['p99_ms']} lag99 {r['loop_lag']['p99_ms']} wake/frame {r['pacer_wakeups_per_s']/r['frames_per_s']:.3f} frames/s {r['frames_per_s']:.0f} clientlag99 {r['client_loop_lag_p99_ms']}")
PY
