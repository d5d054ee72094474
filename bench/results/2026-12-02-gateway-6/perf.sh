#!/bin/bash
source "$(dirname "$0")/start_gateway.sh" "$@"  # tree name n lead, bp, pid
timeout 8 perf trace -s -p $pid -o /tmp/gw6/runs/$name.trace.txt >/dev/null 2>&1
perf record -e cpu-clock -F 1000 -g -p $pid -o /tmp/gw6/runs/$name.perf.data -- sleep 8 >/dev/null 2>&1
wait $bp
echo "$name end $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw6/runs/load.txt
