#!/bin/bash
# usage: threadcpu.sh TREE NAME SESSIONS LEAD: per-thread CPU (jiffies) of the gateway over 15 s of the window
source "$(dirname "$0")/start_gateway.sh" "$@"  # tree name n lead, bp, pid
snap() { for t in /proc/$pid/task/*; do echo "$(basename $t) $(cat $t/comm) $(awk '{print $14+$15, $14, $15}' $t/stat) $(grep -E '^(voluntary|nonvoluntary)' $t/status | awk '{print $2}' | tr '\n' ' ')"; done; }
snap > /tmp/gw6/runs/$name.t0; sleep 15; snap > /tmp/gw6/runs/$name.t1
wait $bp
echo "$name end $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw6/runs/load.txt
python3 - "$name" <<'PY'
import sys,json
name=sys.argv[1]
a={l.split()[0]:l.split() for l in open(f'/tmp/gw6/runs/{name}.t0')}
b={l.split()[0]:l.split() for l in open(f'/tmp/gw6/runs/{name}.t1')}
row=json.load(open(f'/tmp/gw6/runs/{name}.json'))['rows'][0]
fr=row['frames_per_s']*15
print(name, 'us/frame', round(1e6*row['cpu_cores']/row['frames_per_s']), 'p99', row['jitter']['p99_ms'])
for k in b:
    if k in a:
        d=int(b[k][2])-int(a[k][2])
        if d: print(f"  {b[k][1]:16s} {d*10000/fr:7.1f} us/frame (user {(int(b[k][3])-int(a[k][3]))*10000/fr:.1f}, sys {(int(b[k][4])-int(a[k][4]))*10000/fr:.1f})  csw vol {int(b[k][5])-int(a[k][5])} invol {int(b[k][6])-int(a[k][6])}")
PY
