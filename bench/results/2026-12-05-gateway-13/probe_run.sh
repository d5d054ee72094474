#!/bin/bash
# usage: probe_run.sh TREE LOOP NAME [SESSIONS] : run1 in a probe tree, the probe's sections over 10 s (us a frame sent)
tree=$1; loop=$2; name=$3; n=${4:-60}
DUR=${DUR:-20} /tmp/gw13/run1.sh $tree $loop $name $n &
bp=$!
sleep 14
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1)
cp $f /tmp/gw13/out/$name.s0.json; sleep 10; cp $f /tmp/gw13/out/$name.s1.json
wait $bp
/work/main/.venv/bin/python - $name <<'PY'
import json, sys
name = sys.argv[1]; d = '/tmp/gw13/out/'
a = json.load(open(f'{d}{name}.s0.json')); b = json.load(open(f'{d}{name}.s1.json'))
fr = b['frames_sent'] - a['frames_sent']
loop = (b['loop_cpu_s'] - a['loop_cpu_s']) * 1e6 / fr
out = [f"loop {loop:.1f}"]
for k, (n, ns) in b['probe'].items():
    n0, ns0 = a['probe'].get(k, [0, 0])
    out.append(f"{k} {(ns - ns0) / 1e3 / fr:.1f} ({(n - n0) / fr:.3f}/fr, {(ns - ns0) / 1e3 / max(1, n - n0):.1f} us each)")
print('   probe us/frame:', '; '.join(out))
PY
