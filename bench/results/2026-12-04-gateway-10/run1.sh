#!/bin/bash
# usage: run1.sh TREE NAME [SESSIONS] : one point, enc counters on
tree=$1; name=$2; n=${3:-60}
cd /tmp/gw10/$tree && rm -f /tmp/gw10/out/enc.* && GW10_PROBE=1 /work/main/.venv/bin/python -m voxrt.loadgen.gateway_bench --sessions $n --duration 15 --ramp 2 --warmup 3 --gateway-cpus 0 --client-cpus 1 --nice -10 --lead-ms 60 --out /tmp/gw10/out/$name.json -- --opus-signal=music ${SERVE:---encode-threads 1} > /tmp/gw10/out/$name.log 2>&1
python3 - "$name" <<'PY'
import json,sys,glob
name=sys.argv[1]; r=json.load(open(f'/tmp/gw10/out/{name}.json'))['rows'][0]
enc=open(glob.glob('/tmp/gw10/out/enc.*.txt')[0]).read().splitlines()[-1] if glob.glob('/tmp/gw10/out/enc.*.txt') else ''
import ast; e=ast.literal_eval(enc.split(' ',1)[1]) if enc else None
s=f"{name}: us/frame {1e6*r['cpu_cores']/r['frames_per_s']:.1f} loop {1e6*r['loop_cpu_cores']/r['frames_per_s']:.1f} p99 {r['jitter']['p99_ms']} lag99 {r['loop_lag']['p99_ms']} wake/frame {r['pacer_wakeups_per_s']/r['frames_per_s']:.3f}"
if e: s+=f" loop-enc {e['loop'][0]/(e['loop'][0]+e['worker'][0])*100:.1f}% worker-enc {e['worker'][1]/max(1,e['worker'][0])/1e3:.1f}us loop-enc {e['loop'][1]/max(1,e['loop'][0])/1e3:.1f}us"
print(s)
PY
