# Sourced by the GPU scripts: `host_probe FILE` appends one line that tells this host apart from the pool's others.
# Machines of one GPU kind have held the same arrivals at the knee 30 points apart (four H100s: 56.8-90.3% at 160
# req/s, bench/results/2026-12-07-h100-codecfix/), one of them with a host that captured the same CUDA graphs
# 1.5x slower; the engine's step loop is Python. The line names the host, its CPU and cores, and times the
# deadline planner on this CPU as bench/host_plan.py does on the dev machine (~600 live requests, the batch of 256
# full: the least of 2 runs, ~6 s, once a machine: kept in /tmp/voxrt-host-probe.txt), so a report can set a
# point's attainment beside its host's speed:
#   host: NAME, CPU MODEL, N cores, plan_step X ms (...)
host_probe() {
  local plan cpu saved=${HOST_PROBE_SAVED:-/tmp/voxrt-host-probe.txt}
  if [ -s "$saved" ]; then cat "$saved" >> "$1"; return 0; fi  # once a machine: the host does not change
  # (a failure only leaves a field "?": sourced under `set -e` too, the probe never stops a script)
  plan=$(timeout 120 python bench/host_plan.py --crowd --batch 256 --rates 200 --duration 10 --repeats 2 2>/dev/null \
    | sed -n 's/.*plan_step \([0-9.]*\) ms\/step.*/\1/p' | head -1) || plan=""
  cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//') || cpu=""
  echo "host: $(hostname 2>/dev/null || echo unknown), ${cpu:-unknown CPU}, $(nproc) cores, plan_step ${plan:-?} ms" \
    "(bench/host_plan.py --crowd --batch 256 --rates 200 --duration 10)" > "$saved.tmp" || true
  cat "$saved.tmp" >> "$1" 2>/dev/null || true
  if [ -n "$plan" ]; then mv -f "$saved.tmp" "$saved" 2>/dev/null || true; fi  # a failed probe: the next job tries
  rm -f "$saved.tmp"
  return 0
}
