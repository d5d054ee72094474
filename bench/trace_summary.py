"""Where an engine's time went, from its `--trace-dir` records (kinds `plan`, `lm`, `codec`, `step`, `sm_mode`:
voxrt/engine/runtime/trace.py): the LM lane's busy share and its idle gaps, step GPU time with and without
prefills, the decode batch, the waiting queue, per codec lane its busy share, launch sizes and late chunks, and
the host loop's time per step by phase (`step` records), the LM's and codec lanes' busy shares also while requests
were still arriving (`busy_pct_while_arriving`, from the `request` records: the whole window holds the drain), and
the LM's decode step time by how much of it each codec lane was running (`lm_interference`: the codec slows the LM
through the memory it shares on its own partition, and takes the LM's SMs on the urgent lane), and the step time at
the median decode batch by the prompts a step carried (`lm_by_prompts`: what admitting costs a step).
Answers "what limits capacity at this rate": a LM lane near 100% busy is the frame's limit; a codec lane near
100% or late chunks with an idle LM is the codec's; a long waiting queue with headroom on both is the
scheduler's (admission, live cap); idle gaps are the host loop's.

    python bench/trace_summary.py TRACE_DIR_OR_FILE [...] [--skip-s 3] [--json OUT]

`--skip-s`: seconds dropped at the start of each trace (warm-up requests, graph capture).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
from collections import defaultdict

import numpy as np


def _open(path: str):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def _files(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(glob.glob(os.path.join(p, "*.jsonl")) + glob.glob(os.path.join(p, "*.jsonl.gz")))
        else:
            out.append(p)
    return out


def _pct(values, q) -> float | None:
    return None if len(values) == 0 else round(float(np.percentile(values, q)), 3)


def summarize(records: list[dict], skip_s: float = 3.0) -> dict:
    """One trace's records -> the summary dict (times in ms, shares in %)."""
    timed = [r for r in records if "t_ms" in r]
    if not timed:
        return {"records": 0}
    t0 = min(r["t_ms"] for r in timed) + skip_s * 1e3
    recs = [r for r in timed if r["t_ms"] >= t0]
    if not recs:
        return {"records": 0}
    t1 = max(r["t_ms"] + (r.get("ms") or r.get("host_ms") or 0.0) for r in recs)
    window_ms = max(t1 - t0, 1e-9)
    lm = [r for r in recs if r.get("kind") == "lm"]
    plans = [r for r in recs if r.get("kind") == "plan"]
    codec = [r for r in recs if r.get("kind") == "codec"]
    out: dict = {"window_s": round(window_ms / 1e3, 2), "records": len(recs)}
    gpu = np.array([r["gpu_ms"] for r in lm if r.get("gpu_ms") is not None])
    idle = np.array([r["gpu_idle_ms"] for r in lm if r.get("gpu_idle_ms") is not None])
    with_prefill = np.array([r["gpu_ms"] for r in lm if r.get("gpu_ms") is not None and r.get("prefill")])
    decode_only = np.array([r["gpu_ms"] for r in lm if r.get("gpu_ms") is not None and not r.get("prefill")])
    batch = np.array([r.get("decode", 0) for r in lm])
    out["lm"] = {
        "steps": len(lm), "steps_per_s": round(len(lm) / (window_ms / 1e3), 1),
        "busy_pct": None if len(gpu) == 0 else round(100 * gpu.sum() / window_ms, 1),
        "idle_pct": None if len(idle) == 0 else round(100 * idle.sum() / window_ms, 1),
        "idle_p50_ms": _pct(idle, 50), "idle_p99_ms": _pct(idle, 99),
        "gpu_ms_decode_only_p50": _pct(decode_only, 50), "gpu_ms_with_prefill_p50": _pct(with_prefill, 50),
        "steps_with_prefill": int(len(with_prefill)),
        **prefill_share(lm, window_ms),
        "prefills_per_step_mean": round(float(np.mean([r.get("prefill", 0) for r in lm if r.get("prefill")] or [0])), 2),
        "decode_batch_p50": _pct(batch, 50), "decode_batch_max": int(batch.max()) if len(batch) else None,
    }
    if any("gc_ms" in r for r in lm):
        # the host's garbage collections (gc_ms: since the previous lm record, i.e. while the step before was
        # finished and this one planned): their share of the window, and how many long idle gaps had one next
        # to them (the record's own or the one before it)
        gc_ms = np.array([r.get("gc_ms") or 0.0 for r in lm])
        long_gaps = [i for i, r in enumerate(lm) if (r.get("gpu_idle_ms") or 0.0) > 1.0]
        out["lm"].update(gc_ms_total=round(float(gc_ms.sum()), 1), gc_pct=round(100 * float(gc_ms.sum()) / window_ms, 2),
                         gc_ms_max=round(float(gc_ms.max()), 2), gc_collections=int(sum(r.get("gc_count") or 0 for r in lm)),
                         idle_gaps_over_1ms=len(long_gaps),
                         idle_gaps_over_1ms_beside_gc=sum(1 for i in long_gaps if gc_ms[i] > 0 or (i and gc_ms[i - 1] > 0)))
    if plans:
        waiting = np.array([r.get("waiting", 0) for r in plans])
        out["plan"] = {"plans": len(plans), "waiting_p50": _pct(waiting, 50), "waiting_p99": _pct(waiting, 99),
                       "waiting_max": int(waiting.max()),
                       "deferred_p99": _pct(np.array([r.get("deferred", 0) for r in plans]), 99),
                       "held_plans": sum(1 for r in plans if r.get("held"))}  # admission held: the engine behind
    steps = [r for r in recs if r.get("kind") == "step"]
    if steps:
        # the host's time per loop step by phase (core.py `_trace_step`): p50 / p99 / mean ms, and the loop
        # step's whole host time (phases + outside) against the LM's GPU step: the host loop is the limit when
        # its mean reaches the GPU step's
        names = sorted({k for r in steps for k in r if k.endswith("_ms") and k != "t_ms"})
        host = {}
        for name in names:
            v = np.array([r[name] for r in steps if r.get(name) is not None])
            if len(v):
                host[name[:-3]] = [_pct(v, 50), _pct(v, 99), round(float(v.mean()), 3)]
        # the phases are disjoint but for `wait_lm`, which is measured inside `update_lm` (core.py): counted once
        total = np.array([sum(r.get(n) or 0.0 for n in names if n != "wait_lm_ms") for r in steps])
        busy = total - np.array([r.get("wait_lm_ms") or 0.0 for r in steps])
        host["total"] = [_pct(total, 50), _pct(total, 99), round(float(total.mean()), 3)]
        host["total_less_wait"] = [_pct(busy, 50), _pct(busy, 99), round(float(busy.mean()), 3)]
        out["host"] = {"steps": len(steps), "p50_p99_mean_ms": host,
                       "live_p50": _pct(np.array([r.get("live", 0) for r in steps]), 50)}
    hubs = [r for r in recs if r.get("kind") == "hub"]
    if hubs:
        # the engine process around each step (process.py `_trace_hub`): reading commands, by type, and
        # routing the step's events; together about the step record's `outside_ms`
        counts: dict[str, int] = defaultdict(int)
        for r in hubs:
            for name, n in (r.get("commands") or {}).items():
                counts[name] += n
        out["hub"] = {"steps": len(hubs),
                      "commands_per_step": {k: round(v / len(hubs), 2) for k, v in sorted(counts.items())}}
        for name in ("read_ms", "route_ms"):
            v = np.array([r.get(name) or 0.0 for r in hubs])
            out["hub"][f"{name}_p50_p99_mean"] = [_pct(v, 50), _pct(v, 99), round(float(v.mean()), 3)]
    lanes: dict[str, list[dict]] = defaultdict(list)
    for r in codec:
        lanes[r.get("lane", "?")].append(r)
    out["codec"] = {}
    for lane, rs in sorted(lanes.items()):
        g = np.array([r["gpu_ms"] for r in rs if r.get("gpu_ms") is not None])
        host = np.array([r["host_ms"] for r in rs if r.get("host_ms") is not None])
        slack = [s for r in rs for s in (r.get("slack_ms") or []) if s is not None]
        first_slack = [s for r in rs for s, f in zip(r.get("slack_ms") or [], r.get("first") or []) if s is not None and f]
        frames = [f for r in rs for f in (r.get("frames") or [])]
        jobs = [r.get("jobs", 0) for r in rs]
        out["codec"][lane] = {
            "launches": len(rs), "jobs_per_launch": round(float(np.mean(jobs)), 2),
            # launches as big as the lane's biggest (at a knee: the `--max-codec-batch` cap, every launch full:
            # chunks wait for the lane and turn urgent, bench/results/2026-12-06-h100-hold-codec-batch/)
            "jobs_max": max(jobs), "at_jobs_max_pct": round(100 * jobs.count(max(jobs)) / len(jobs), 1),
            "frames_per_job": round(float(np.mean(frames)), 2) if frames else None,
            "busy_pct": None if len(g) == 0 else round(100 * g.sum() / window_ms, 1),
            "gpu_ms_p50": _pct(g, 50), "host_ms_p50": _pct(host, 50), "host_ms_p99": _pct(host, 99),
            "chunks": len(slack), "late_chunks": sum(1 for s in slack if s < 0),
            "late_first_chunks": sum(1 for s in first_slack if s < 0),
            "slack_p1_ms": _pct(np.array(slack), 1) if slack else None,
        }
    # the same busy shares while requests were still arriving (from the skip to the last arrival in the `request`
    # records): the whole window also holds the drain, where the load falls away, so it reads low at a knee
    arrivals = [r["arrival_ms"] for r in records if r.get("kind") == "request" and r.get("arrival_ms") is not None]
    if arrivals and max(arrivals) > t0:
        hi = max(arrivals)
        span = hi - t0
        out["arriving_window_s"] = round(span / 1e3, 2)

        def busy(rs: list[dict]) -> float:
            return round(100 * sum(r["gpu_ms"] for r in rs if r.get("gpu_ms") is not None and r["t_ms"] < hi) / span, 1)

        out["lm"]["busy_pct_while_arriving"] = busy(lm)
        for lane, rs in sorted(lanes.items()):
            out["codec"][lane]["busy_pct_while_arriving"] = busy(rs)
    interference = lm_interference(lm, codec)
    if interference:
        out["lm_interference"] = interference
    by_prompts = lm_by_prompts(lm)
    if by_prompts:
        out["lm_by_prompts"] = by_prompts
    by_mode = lm_by_sm_mode(lm)
    if by_mode:
        out["lm_by_sm_mode"] = by_mode
    return out


SAME_BATCH = 0.0625  # steps within this fraction of a decode batch count as of that batch (prompt costs)


def prefill_share(lm: list[dict], window_ms: float, band: float = SAME_BATCH) -> dict:
    """`prefill_share_pct`: the LM time the steps' prompts added, as a share of the window: each step with prompts
    less the median decode-only step of its own decode batch (within `band`), summed. Steps with no decode-only
    step near their batch are left out (`prefill_share_steps`: the steps counted). (Before 2026-12-07 every step
    with prompts was set against the median of all decode-only steps, which under load are the ramp's, with fewer
    rows: that overstated the share.)"""
    timed = [r for r in lm if r.get("gpu_ms") is not None]
    plain = sorted((r.get("decode", 0), r["gpu_ms"]) for r in timed if not r.get("prefill"))
    with_prompts = [r for r in timed if r.get("prefill")]
    if not plain or not with_prompts:
        return {"prefill_share_pct": None, "prefill_share_steps": 0}
    batches = np.array([b for b, _ in plain], dtype=float)
    times = np.array([t for _, t in plain])
    extra, counted = 0.0, 0
    for r in with_prompts:
        b = float(r.get("decode", 0))
        lo, hi = np.searchsorted(batches, b * (1 - band), "left"), np.searchsorted(batches, b * (1 + band), "right")
        if hi > lo:
            extra += r["gpu_ms"] - float(np.median(times[lo:hi]))
            counted += 1
    return {"prefill_share_pct": round(100 * extra / window_ms, 1) if counted else None,
            "prefill_share_steps": counted}


PROMPT_BINS = ((0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 8), (9, None))


def lm_by_prompts(lm: list[dict], band: float = SAME_BATCH) -> dict | None:
    """The LM steps with a decode batch within `band` of the median decode batch of all steps, by the prompts the
    step carried (0, 1, 2, 3, 4, 5-8, 9+): steps and GPU ms p50. What a step's prompts cost at one batch size:
    `gpu_ms_with_prefill_p50` against `gpu_ms_decode_only_p50` compares steps of different batches under load
    (decode-only steps come when nothing arrives, mostly at the ramp, with fewer rows). None without decode steps."""
    steps = [r for r in lm if r.get("gpu_ms") and r.get("decode")]
    if not steps:
        return None
    median = float(np.median([r["decode"] for r in steps]))
    lo, hi = median * (1 - band), median * (1 + band)
    cells: dict[int, list[float]] = defaultdict(list)
    for r in steps:
        if lo <= r["decode"] <= hi:
            n = int(r.get("prefill") or 0)
            cells[next(i for i, (a, b) in enumerate(PROMPT_BINS) if a <= n and (b is None or n <= b))].append(r["gpu_ms"])

    def label(i):
        a, b = PROMPT_BINS[i]
        return str(a) if a == b else (f"{a}-{b}" if b is not None else f">={a}")

    return {"decode_batch": [round(lo, 1), round(hi, 1)],
            "cells": [{"prompts": label(i), "steps": len(v), "gpu_ms_p50": _pct(np.array(v), 50)}
                      for i, v in sorted(cells.items())]}


def lm_by_sm_mode(lm: list[dict], band: float = SAME_BATCH) -> dict | None:
    """With several SM modes (`lm` records carry `sm_mode`: `--sm-mode adaptive`, `VOXRT_LM_LANE=idle`, whose mode
    1 is the whole GPU): each mode's share of the steps, and the GPU ms p50 of its steps within `band` of the
    median decode batch (what the placement does to a step of one size). None without the field."""
    steps = [r for r in lm if r.get("sm_mode") is not None]
    if not steps:
        return None
    timed = [r for r in steps if r.get("gpu_ms") and r.get("decode")]
    median = float(np.median([r["decode"] for r in timed])) if timed else 0.0
    lo, hi = median * (1 - band), median * (1 + band)
    modes = sorted({int(r["sm_mode"]) for r in steps})
    cells = []
    for m in modes:
        same = [r["gpu_ms"] for r in timed if r["sm_mode"] == m and lo <= r["decode"] <= hi]
        cells.append({"mode": m, "steps_pct": round(100 * sum(r["sm_mode"] == m for r in steps) / len(steps), 1),
                      "steps_at_batch": len(same), "gpu_ms_p50": _pct(np.array(same), 50) if same else None})
    return {"decode_batch": [round(lo, 1), round(hi, 1)], "cells": cells}


URGENT_BINS = ((0.0, 0.1), (0.1, 0.3), (0.3, 0.5), (0.5, float("inf")))
BACKGROUND_BINS = ((0.0, 0.5), (0.5, 0.9), (0.9, float("inf")))


def _gpu_interval(record: dict, seen_ms: float | None) -> tuple[float, float] | None:
    """A launch's GPU time as an interval on the host clock: it ended by the time the host saw it done (launch +
    `seen_ms`) and ran `gpu_ms` before that (the GPU's own end is earlier by the host's polling: an estimate)."""
    gpu_ms = record.get("gpu_ms")
    if gpu_ms is None or seen_ms is None:
        return None
    end = record["t_ms"] + seen_ms
    return end - gpu_ms, end


def _overlap_ms(start: float, end: float, intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    for a, b in intervals:  # sorted by start
        if a >= end:
            break
        if b > start:
            total += min(end, b) - max(start, a)
    return total


def lm_interference(lm: list[dict], codec: list[dict], band: float = 0.125) -> dict | None:
    """The LM's decode-only steps with a decode batch within `band` of the median batch (so the batch does not
    explain the differences), each placed by the share of its GPU time that the urgent and the background codec
    lanes were running (`_gpu_interval`), then per cell of URGENT_BINS x BACKGROUND_BINS: steps and GPU ms p50.
    None without codec lanes or decode steps."""
    steps = [r for r in lm if not r.get("prefill") and r.get("gpu_ms") and r.get("decode") and r.get("ms") is not None]
    lanes: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in codec:
        interval = _gpu_interval(r, r.get("host_ms"))
        if interval is not None:
            lanes[r.get("lane", "?")].append(interval)
    if not steps or not lanes:
        return None
    for intervals in lanes.values():
        intervals.sort()
    median = float(np.median([r["decode"] for r in steps]))
    lo, hi = median * (1 - band), median * (1 + band)
    cells: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in steps:
        if not lo <= r["decode"] <= hi:
            continue
        start, end = _gpu_interval(r, r.get("ms"))
        shares = [_overlap_ms(start, end, lanes.get(lane, [])) / r["gpu_ms"] for lane in ("urgent", "background")]
        u = next(i for i, (a, b) in enumerate(URGENT_BINS) if a <= shares[0] < b)
        g = next(i for i, (a, b) in enumerate(BACKGROUND_BINS) if a <= shares[1] < b)
        cells[(u, g)].append(r["gpu_ms"])

    def label(bins, i):
        a, b = bins[i]
        return f"{a:g}-{b:g}" if b != float("inf") else f">={a:g}"

    return {"decode_batch": [round(lo, 1), round(hi, 1)],
            "cells": [{"urgent_share": label(URGENT_BINS, u), "background_share": label(BACKGROUND_BINS, g),
                       "steps": len(v), "gpu_ms_p50": _pct(np.array(v), 50)}
                      for (u, g), v in sorted(cells.items())]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--skip-s", type=float, default=3.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    result = {}
    for path in _files(args.paths):
        with _open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
        s = summarize(records, args.skip_s)
        result[path] = s
        arriving = f" (requests arriving for {s['arriving_window_s']} s of it)" if "arriving_window_s" in s else ""
        print(f"== {path}: {s.get('window_s')} s{arriving}, {s.get('records')} records")
        for key in ("lm", "plan"):
            if key in s:
                print(f"  {key}: " + ", ".join(f"{k} {v}" for k, v in s[key].items()))
        if "host" in s:
            print(f"  host ({s['host']['steps']} steps, live p50 {s['host']['live_p50']}; ms p50 / p99 / mean): "
                  + ", ".join(f"{k} {v[0]}/{v[1]}/{v[2]}" for k, v in s["host"]["p50_p99_mean_ms"].items()))
        if "hub" in s:
            print("  hub: " + ", ".join(f"{k} {v}" for k, v in s["hub"].items()))
        for lane, c in s.get("codec", {}).items():
            print(f"  codec[{lane}]: " + ", ".join(f"{k} {v}" for k, v in c.items()))
        if "lm_interference" in s:
            li = s["lm_interference"]
            print(f"  lm decode step GPU ms p50 (steps) by the share of it each codec lane ran, decode batch "
                  f"{li['decode_batch'][0]}-{li['decode_batch'][1]}: " + ", ".join(
                      f"urgent {c['urgent_share']} / background {c['background_share']}: {c['gpu_ms_p50']} "
                      f"({c['steps']})" for c in li["cells"]))
        if "lm_by_prompts" in s:
            lp = s["lm_by_prompts"]
            print(f"  lm step GPU ms p50 (steps) by the prompts in it, decode batch {lp['decode_batch'][0]}-"
                  f"{lp['decode_batch'][1]}: " + ", ".join(f"{c['prompts']}: {c['gpu_ms_p50']} ({c['steps']})"
                                                           for c in lp["cells"]))
        if "lm_by_sm_mode" in s:
            lm_mode = s["lm_by_sm_mode"]
            print(f"  lm steps by SM mode: share of steps; GPU ms p50 (steps) at decode batch {lm_mode['decode_batch'][0]}-"
                  f"{lm_mode['decode_batch'][1]}: " + ", ".join(
                      f"mode {c['mode']} {c['steps_pct']}%: {c['gpu_ms_p50']} ({c['steps_at_batch']})"
                      for c in lm_mode["cells"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
