#!/bin/bash
# usage: profile.sh TREE NAME SESSIONS LEAD  (SERVE_EXTRA env)
source "$(dirname "$0")/start_gateway.sh" "$@"  # tree name n lead, bp, pid
echo "gateway pid $pid"
/tmp/gw6/pyspy/bin/py-spy record -r 200 -f raw --nonblocking -d 15 -p $pid -o /tmp/gw6/runs/$name.pyspy.txt > /dev/null 2>&1
wait $bp
echo "$name end $(date +%T) $(cat /proc/loadavg)" >> /tmp/gw6/runs/load.txt
