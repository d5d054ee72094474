#!/bin/bash
# usage: prof2.sh TREE OPUS_RATE NAME [SESSIONS] : run1 plus py-spy of the loop thread alone on CPU 0 (the encode worker moved to CPU 1), 10 s
tree=$1; loop=$2; name=$3; n=${4:-60}
DUR=${DUR:-20} /tmp/gw13/run1.sh $tree $loop $name $n &
bp=$!
sleep 12
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1); pid=$(basename $f | cut -d. -f2)
for t in /proc/$pid/task/*; do if grep -q voxrt-encode $t/comm; then taskset -pc 1 $(basename $t) >/dev/null; fi; done
sleep 2
/work/main/.venv/bin/py-spy record -p $pid -d 10 -r ${RATE:-200} --threads --nonblocking -f raw -o /tmp/gw13/out/$name.collapsed > /tmp/gw13/out/$name.pyspy.log 2>&1
wait $bp
