#!/usr/bin/env bash
# usage: run.sh TAG TREE
tag=$1; tree=$2
rm -rf /tmp/gcstats; mkdir -p /tmp/gcstats
cd "$tree"
GC_PROBE_DIR=/tmp/gcstats PYTHONPATH=/work/main/bench/gc_probe:$tree timeout 200 /work/main/.venv/bin/python -m voxrt.loadgen.gateway_bench --sessions 60 --duration ${DUR:-15} --ramp 3 --warmup 3 --client-procs 1 --out /tmp/gcres/$tag.json > /tmp/gcres/$tag.log 2>&1
/work/main/.venv/bin/python /work/main/bench/gc_probe/show.py /tmp/gcstats > /tmp/gcres/$tag.gc.txt
echo "== $tag"; grep -E "^ +60 " /tmp/gcres/$tag.log | tail -1; cat /tmp/gcres/$tag.gc.txt
