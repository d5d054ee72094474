#!/bin/bash
name=$1; n=$2
cd /work/main && . .venv/bin/activate; unset PYTHONPATH
python -m voxrt.loadgen.gateway_bench --sessions $n --duration 15 --ramp 2 --warmup 3 --gateway-cpus 0 --client-cpus 1 \
  --nice -10 --lead-ms 60 --out /tmp/gw6/runs/$name.json -- --opus-signal=music $SERVE_EXTRA > /tmp/gw6/runs/$name.log 2>&1 &
bp=$!
sleep 10
f=$(ls -t /tmp/voxrt-gwbench-*/stats.*.json | head -1); pid=$(basename $f | cut -d. -f2)
perf stat --per-thread -e syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sendto,syscalls:sys_enter_write,syscalls:sys_enter_recvfrom,syscalls:sys_enter_futex,syscalls:sys_enter_read -p $pid -- sleep 5 2>&1 | grep -v "^$" 
wait $bp
