#!/bin/bash
# usage: perf_run.sh TREE LOOP NAME [SESSIONS] : run1 plus perf record of the gateway's loop thread (8 s)
tree=$1; loop=$2; name=$3; n=${4:-60}
DUR=${DUR:-20} /tmp/gw12/run1.sh $tree $loop $name $n &
bp=$!
sleep 14
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1); pid=$(basename $f | cut -d. -f2)
perf record -F ${FREQ:-4000} -t $pid -o /tmp/gw12/out/$name.perf.data -- sleep 8 > /tmp/gw12/out/$name.perf.log 2>&1
wait $bp
perf report -i /tmp/gw12/out/$name.perf.data --sort dso --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -25 > /tmp/gw12/out/$name.dso.txt
perf report -i /tmp/gw12/out/$name.perf.data --sort dso,sym --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -70 > /tmp/gw12/out/$name.sym.txt
