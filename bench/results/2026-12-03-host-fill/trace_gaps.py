"""What the LM lane's idle gaps over 1 ms sit next to, in an engine trace (issue 13).

    python bench/results/2026-12-03-host-fill/trace_gaps.py TRACE.jsonl.gz [--skip-s 3] [--over-ms 1]

For every `lm` record (sorted by launch time) after the first --skip-s seconds: a prefill in this step or the
one before, the decode batch changing graph bucket (batch_buckets(128), the knee run's max batch), codec
launches started between the previous LM launch and this one (their lane), and a garbage collection (gc_ms
of this record: collections since the previous lm record). Prints each feature's share among the long gaps
beside its share among all steps, then the long gaps one a line.

Then the host's time before each plan: from the moment the host saw LM step N-2 done (its record's t_ms + ms:
`_finish_lm` during step N-1) to the plan of step N, which is when step N's launch waits on the host (step
N-1 is all the GPU has queued then), split by whether a background codec launch was delivered (t_ms +
host_ms of its codec record) in that window: delivering a launch is its chunks' events, sent to the client
over the engine's pipe (process.py) before the next step.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json

import numpy as np

from voxrt.engine.runtime.graphs import batch_buckets


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--skip-s", type=float, default=3.0)
    ap.add_argument("--over-ms", type=float, default=1.0)
    ap.add_argument("--max-batch", type=int, default=128)
    args = ap.parse_args()
    with gzip.open(args.trace, "rt") if args.trace.endswith(".gz") else open(args.trace) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    t0 = min(r["t_ms"] for r in recs) + args.skip_s * 1e3
    lm = sorted((r for r in recs if r["kind"] == "lm"), key=lambda r: r["t_ms"])
    codec = sorted((r for r in recs if r["kind"] == "codec"), key=lambda r: r["t_ms"])
    codec_t = [r["t_ms"] for r in codec]
    buckets = batch_buckets(args.max_batch)

    def bucket(n: int) -> int:
        return buckets[bisect.bisect_left(buckets, n)] if n else 0

    rows = []
    for i in range(1, len(lm)):
        r, prev = lm[i], lm[i - 1]
        if r["t_ms"] < t0 or r.get("gpu_idle_ms") is None:
            continue
        lo, hi = bisect.bisect_right(codec_t, prev["t_ms"]), bisect.bisect_left(codec_t, r["t_ms"])
        lanes = [c["lane"] for c in codec[lo:hi]]
        rows.append(dict(
            idle=r["gpu_idle_ms"], decode=r["decode"], prefill=r["prefill"], prev_prefill=prev["prefill"],
            bucket_change=bucket(r["decode"]) != bucket(prev["decode"]),
            codec_between=len(lanes), background_between=lanes.count("background"),
            urgent_between=lanes.count("urgent"), gc=(r.get("gc_ms") or 0) > 0,
            launch_gap_ms=r["t_ms"] - prev["t_ms"], prev_gpu_ms=prev["gpu_ms"],
            prev_host_ms=prev["ms"]))
    long = [x for x in rows if x["idle"] > args.over_ms]
    features = {
        "prefill in this step": lambda x: x["prefill"] > 0,
        "prefill in the step before": lambda x: x["prev_prefill"] > 0,
        "prefill in either": lambda x: x["prefill"] > 0 or x["prev_prefill"] > 0,
        "decode batch changed bucket": lambda x: x["bucket_change"],
        "a codec launch between the two LM launches": lambda x: x["codec_between"] > 0,
        "a background codec launch between": lambda x: x["background_between"] > 0,
        "an urgent codec launch between": lambda x: x["urgent_between"] > 0,
        "two or more codec launches between": lambda x: x["codec_between"] >= 2,
        "a gc in the step": lambda x: x["gc"],
        "none of these": lambda x: not (x["prefill"] or x["prev_prefill"] or x["bucket_change"]
                                        or x["codec_between"] or x["gc"]),
    }
    print(f"{len(rows)} steps after {args.skip_s} s, {len(long)} with idle > {args.over_ms} ms")
    print("| next to | gaps > 1 ms | all steps |\n|---|---:|---:|")
    for name, fn in features.items():
        a, b = sum(map(fn, long)), sum(map(fn, rows))
        print(f"| {name} | {a}/{len(long)} ({100 * a / max(1, len(long)):.0f}%) | {100 * b / len(rows):.0f}% |")
    print("\n| idle ms | decode | prefill (this / before) | bucket change | codec between (bg / urgent) | gc |"
          " launch gap ms | step before: gpu ms |\n|---:|---:|---|---|---|---|---:|---:|")
    for x in sorted(long, key=lambda x: -x["idle"]):
        print(f"| {x['idle']:.3f} | {x['decode']} | {x['prefill']} / {x['prev_prefill']} | "
              f"{'yes' if x['bucket_change'] else ''} | {x['background_between']} / {x['urgent_between']} | "
              f"{'yes' if x['gc'] else ''} | {x['launch_gap_ms']:.2f} | {x['prev_gpu_ms']:.2f} |")

    host_before_plan(recs, lm, t0, args.over_ms)


def host_before_plan(recs: list[dict], lm: list[dict], t0: float, over_ms: float) -> None:
    plans = sorted(r["t_ms"] for r in recs if r["kind"] == "plan")
    done = sorted((c["t_ms"] + c["host_ms"], c["lane"], c["jobs"]) for c in recs if c["kind"] == "codec")
    done_t = [d[0] for d in done]
    rows = []
    for i in range(2, len(lm)):
        seen, r = lm[i - 2], lm[i]
        if r["t_ms"] < t0 or r.get("gpu_idle_ms") is None:
            continue
        wake = seen["t_ms"] + seen["ms"]
        plan = plans[bisect.bisect_right(plans, r["t_ms"]) - 1]
        window = done[bisect.bisect_left(done_t, wake) : bisect.bisect_left(done_t, r["t_ms"])]
        rows.append((r["gpu_idle_ms"], plan - wake, r["t_ms"] - plan,
                     sum(1 for d in window if d[1] == "background")))
    a = np.array(rows)
    print("\n| steps | n | gaps > 1 ms | idle p99 ms | host, step N-2 seen -> plan N: p50 / p99 ms"
          " | plan N -> launch N: p50 ms |\n|---|---:|---:|---:|---|---:|")
    for name, sel in (("all", a[:, 3] >= 0), ("a background launch delivered before the plan", a[:, 3] > 0),
                      ("none delivered", a[:, 3] == 0)):
        s = a[sel]
        print(f"| {name} | {len(s)} | {int((s[:, 0] > over_ms).sum())} | {np.percentile(s[:, 0], 99):.3f} | "
              f"{np.percentile(s[:, 1], 50):.2f} / {np.percentile(s[:, 1], 99):.2f} | {np.percentile(s[:, 2], 50):.2f} |")


if __name__ == "__main__":
    main()
