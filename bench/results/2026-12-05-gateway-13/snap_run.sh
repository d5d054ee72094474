#!/bin/bash
# usage: snap_run.sh TREE OPUS_RATE NAME [SESSIONS] : run1 plus per-thread CPU snapshots 10 s into the point, for 10 s
tree=$1; loop=$2; name=$3; n=${4:-60}
DUR=${DUR:-20} /tmp/gw13/run1.sh $tree $loop $name $n &
bp=$!
sleep 14
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1); pid=$(basename $f | cut -d. -f2)
snap() { for t in /proc/$pid/task/*; do echo "$(basename $t) $(cat $t/comm) $(awk '{print $14+$15, $14, $15}' $t/stat) $(grep ctxt $t/status | awk '{printf "%s ", $2}')"; done; }
snap > /tmp/gw13/out/$name.t0; sleep 10; snap > /tmp/gw13/out/$name.t1
wait $bp
/work/main/.venv/bin/python - $name <<'PY'
import sys, json
name = sys.argv[1]; d = '/tmp/gw13/out/'
a = {l.split()[0]: l.split() for l in open(f'{d}{name}.t0')}
b = {l.split()[0]: l.split() for l in open(f'{d}{name}.t1')}
r = json.load(open(f'{d}{name}.json'))['rows'][0]
fr = r['frames_per_s'] * 10
out = []
for k in b:
    if k in a:
        dt = int(b[k][2]) - int(a[k][2])
        if dt:
            out.append(f"{b[k][1]}:{dt*10000/fr:.1f}(u{(int(b[k][3])-int(a[k][3]))*10000/fr:.0f}/s{(int(b[k][4])-int(a[k][4]))*10000/fr:.0f} vcs{(int(b[k][5])-int(a[k][5]))/fr:.2f} ics{(int(b[k][6])-int(a[k][6]))/fr:.2f})")
print('   threads us/frame:', ' '.join(out))
PY
