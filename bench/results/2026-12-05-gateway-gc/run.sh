#!/usr/bin/env bash
# The round's runs: run.sh TAG TREE (TREE: a checkout of the tree under test; ROOT: this repository, whose
# .venv and bench/gc_probe run it). DUR (s, default 15) sets the measured window; GC_PROBE_WINDOW_S for show.py.
tag=$1; tree=$2
ROOT=${ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}
rm -rf /tmp/gcstats; mkdir -p /tmp/gcstats /tmp/gcres
cd "$tree"
GC_PROBE_DIR=/tmp/gcstats PYTHONPATH=$ROOT/bench/gc_probe:$tree timeout 200 "$ROOT/.venv/bin/python" -m voxrt.loadgen.gateway_bench \
  --sessions 60 --duration "${DUR:-15}" --ramp 3 --warmup 3 --client-procs 1 --out "/tmp/gcres/$tag.json" > "/tmp/gcres/$tag.log" 2>&1
"$ROOT/.venv/bin/python" "$ROOT/bench/gc_probe/show.py" /tmp/gcstats > "/tmp/gcres/$tag.gc.txt"
echo "== $tag"; grep -E "^ +60 " "/tmp/gcres/$tag.log" | tail -1; cat "/tmp/gcres/$tag.gc.txt"
