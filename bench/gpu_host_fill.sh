#!/usr/bin/env bash
# Issue 13: the runner's host fill of one decode step (bench/host_fill.py) on the GPU machine's host, this tree
# against BASE (the commit before the fill changes), alternated ROUNDS times, then one table of the least and
# most of each tree's per-round figures. The base tree is `git archive BASE voxrt models` of this checkout's
# .git into /tmp; when that commit is not there (a stale .git), this tree alone is timed (the H200 host's
# earlier figures, bench/results/2026-12-03-host-plan/, were FlashInfer contexts: not the same context).
# Run from the repository root on the GPU machine:
#   source .gpu/prelude.sh; OUT=$OUT bash bench/gpu_host_fill.sh
set -uo pipefail
OUT=${OUT:-out/host-fill}
BASE=${BASE:-123db7a}
ROUNDS=${ROUNDS:-3}
ARGS="--device ${DEVICE:-cuda} --batches ${BATCHES:-64,128,192} --tokens 200 --iters ${ITERS:-100} --repeats 5 --decode-attention triton"
mkdir -p "$OUT"
here=$PWD
base_dir=/tmp/host-fill-base
rm -rf "$base_dir" && mkdir -p "$base_dir"
trees="new"
if git archive "$BASE" voxrt models 2>/dev/null | tar x -C "$base_dir" 2>/dev/null && [ -f "$base_dir/voxrt/__init__.py" ]; then
  trees="new base"
else
  echo "no base tree: $BASE is not in this checkout's .git; timing this tree only"
fi
nproc; grep -m1 "model name" /proc/cpuinfo; uptime
for round in $(seq "$ROUNDS"); do
  for tree in $trees; do
    dir=$here; [ "$tree" = base ] && dir=$base_dir
    echo "== round $round, $tree"
    (cd "$dir" && PYTHONPATH=$dir:${PYTHONPATH:-} timeout 280 python3 "$here/bench/host_fill.py" $ARGS) 2>&1 \
      | tee -a "$OUT/$tree.txt" | grep -v "^ *warn"
  done
done
python3 - "$OUT" $trees <<'PY'
import re, sys
out, trees = sys.argv[1], sys.argv[2:]
rows = {}  # (batch, part) -> tree -> [ms per round]
for tree in trees:
    for line in open(f"{out}/{tree}.txt"):
        m = re.match(r"batch +(\d+),", line)
        if m:
            parts = {part: float(ms) for part, ms in re.findall(r"([\w.]+) ([\d.]+) ms", line)}
            if "depth_filler" in parts:  # the step's two fills: what the host runs before the LM launch
                parts["decode+depth"] = parts["decode_filler"] + parts["depth_filler"]
            for part, ms in parts.items():
                rows.setdefault((int(m.group(1)), part), {}).setdefault(tree, []).append(ms)
print("| batch | part | " + " | ".join(f"{t}: least / most of {len(rows[next(iter(rows))].get(t, []))}" for t in trees) + " |")
print("|---:|---|" + "---:|" * len(trees))
for (batch, part), by_tree in sorted(rows.items()):
    cells = [f"{min(v):.3f} / {max(v):.3f}" if (v := by_tree.get(t)) else "-" for t in trees]
    print(f"| {batch} | {part} | " + " | ".join(cells) + " |")
PY
