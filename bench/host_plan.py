"""The deadline policy's host time per step, on the CPU (issue 13: the host loop must keep up with the GPU).

    python bench/host_plan.py --rates 48,96,120 --repeats 3
    python bench/host_plan.py --cases     # decisions only, on paths the timed runs do not take
    python bench/host_plan.py --heavy --rates 150 --duration 6   # ~300 live requests
    python bench/host_plan.py --crowd --batch 256 --rates 200 --duration 10   # ~600 live, the batch full

Runs `sched/sim.py` (the real policy and pools, a simulated runtime with lanes) on LibriTTS test-clean texts
at each Poisson rate for --duration seconds of arrivals, and times each phase of `DeadlineScheduler.plan_step`
(wall ms per step, the least of --repeats runs: the machine's other load only adds). `decisions` is an md5 of
every request's outcome (frames, TTFA, stalls, chunk order, admission): equal before and after a change that
must not change what the policy decides. The simulated step times come from the default CostModel, not from
a GPU: the live request counts are this model's, so compare trees on one machine, not against GPU figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

from voxrt.engine.sched import deadline_policy as dp
from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.scheduler import SchedulerConfig
from voxrt.engine.sched.sim import simulate

# `_codec_candidates` (ready and early chunks in one pass) replaced `ready_chunks` + `_early_chunks` on
# 2026-12-03; a phase a tree lacks is left out, so the script runs on trees before and after
PHASES = ["plan_step", "admit", "decode", "ready_chunks", "_early_chunks", "_codec_candidates", "_plan_codec",
          "update_lm"]


# --heavy: a load that keeps ~300 requests live, nearer the H200's ~455 at 120 req/s (2026-12-04 trace) than the
# default CostModel's runs: a faster LM and a slower background codec lane (these costs are chosen for the live
# count, not fitted to a GPU), a live cap of 512 and 2048 codec slots
HEAVY_COSTS = CostModel(lm_base_ms=3.0, lm_per_request_ms=0.012, prefill_per_token_ms=0.016, codec_base_ms=3.0,
                        codec_per_frame_ms=0.06)


# --crowd: the start-up cost model an H100 fitted at max batch 256 (LM 3.8 ms + 0.020 a row, 2026-12-07), the LM on
# 30% of the GPU and a live cap of 1024: at 200 req/s ~600 requests live and the batch full most steps, as the
# 2026-12-07 H100 trace had (~800 live, decode batch p50 250 of 256); the sim is far past its knee there (the
# shares are chosen for the crowd, not fitted), which only the host's time per step cares about
CROWD_COSTS = CostModel(lm_base_ms=3.8, lm_per_request_ms=0.02, prefill_per_token_ms=0.016, codec_base_ms=2.7,
                        codec_per_frame_ms=0.067)


def run(rate: float, duration_s: float, texts: list[str], batch: int, heavy: bool = False,
        live_cap: int = 512, crowd: bool = False) -> dict:
    spent: dict[str, float] = {}
    live: list[int] = []  # the live requests at each plan_step
    saved = {}
    for name in [p for p in PHASES if hasattr(dp.DeadlineScheduler, p)]:
        original = getattr(dp.DeadlineScheduler, name)
        saved[name] = original

        def timed(self, *args, _name=name, _original=original, **kwargs):
            if _name == "plan_step":
                live.append(len(self.requests))
            start = time.perf_counter()
            try:
                return _original(self, *args, **kwargs)
            finally:
                spent[_name] = spent.get(_name, 0.0) + time.perf_counter() - start
        setattr(dp.DeadlineScheduler, name, timed)
    try:
        if crowd:
            result = simulate("deadline", rate=rate, duration_s=duration_s, seed=0, texts=texts, has_lanes=True,
                              lm_share=0.3, bg_share=0.5, costs=CROWD_COSTS, num_slots=4096,
                              config=SchedulerConfig(max_batch_size=batch, max_live_requests=1024))
        elif heavy:
            result = simulate("deadline", rate=rate, duration_s=duration_s, seed=0, texts=texts, has_lanes=True,
                              lm_share=0.45, bg_share=0.25, costs=HEAVY_COSTS, num_slots=2048,
                              config=SchedulerConfig(max_batch_size=batch, max_live_requests=live_cap))
        else:
            result = simulate("deadline", rate=rate, duration_s=duration_s, seed=0, texts=texts, has_lanes=True,
                              lm_share=0.45, bg_share=0.55, config=SchedulerConfig(max_batch_size=batch))
    finally:
        for name, original in saved.items():
            setattr(dp.DeadlineScheduler, name, original)
    live.sort()
    return dict(rate=rate, steps=result.num_steps, requests=len(result.records), live_p50=live[len(live) // 2],
                ms_per_step={k: v / result.num_steps * 1e3 for k, v in spent.items()},
                decisions=decisions_md5(result))


def decisions_md5(result) -> str:
    """The md5 of every request's outcome and the end time: equal iff the policy decided the same."""
    fields = ("request_id", "num_frames", "status", "ttfa_ms", "num_stalls", "stall_ms", "chunk_order", "admitted_ns",
              "deferred_since_ns")
    decisions = repr([tuple(getattr(r, f) for f in fields) for r in result.records]) + repr(result.end_ns)
    return hashlib.md5(decisions.encode()).hexdigest()


# --cases: paths the timed runs do not take (held frames of text streamed slower than the LM reads it, more
# live requests than a batch: decode by least slack, the time-shared loop), decisions only, 6 s at seed 1
CASES = [
    ("streamed text 30 tok/s, 48 req/s", dict(rate=48, tokens_per_s=30.0, config=SchedulerConfig(max_batch_size=128))),
    ("live 256 over batch 128, 120 req/s",
     dict(rate=120, config=SchedulerConfig(max_batch_size=128, max_live_requests=256))),
    ("no lanes, 32 req/s", dict(rate=32, has_lanes=False, config=SchedulerConfig(max_batch_size=64))),
    ("streamed text 12 tok/s, live 128 over batch 64, 64 req/s",
     dict(rate=64, tokens_per_s=12.0, config=SchedulerConfig(max_batch_size=64, max_live_requests=128))),
]


def check_cases(texts: list[str]) -> None:
    for name, kwargs in CASES:
        kwargs = {"has_lanes": True, **kwargs}
        result = simulate("deadline", duration_s=6.0, seed=1, texts=texts, lm_share=0.45, bg_share=0.55, **kwargs)
        print(f"{name}: {result.num_steps} steps; decisions {decisions_md5(result)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="48,96,120")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--workload", default="bench/workloads/libritts_test_clean.jsonl")
    ap.add_argument("--out", default=None)
    ap.add_argument("--cases", action="store_true", help="only the decisions of CASES (no timing)")
    ap.add_argument("--heavy", action="store_true", help="~300 live requests (HEAVY_COSTS, live cap 512): e.g. "
                    "--heavy --rates 150 --duration 6")
    ap.add_argument("--live-cap", type=int, default=512, help="--heavy's live cap (1024: ~800 live at 250 req/s "
                    "and batch 256, as the 2026-12-07 H100 trace had)")
    ap.add_argument("--crowd", action="store_true", help="~600 live requests, the batch full (CROWD_COSTS): e.g. "
                    "--crowd --batch 256 --rates 200 --duration 10")
    args = ap.parse_args()
    with open(args.workload) as f:
        texts = [json.loads(line)["text"] for line in f][:2000]
    if args.cases:
        check_cases(texts)
        return
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        runs = [run(rate, args.duration, texts, args.batch, args.heavy, args.live_cap, args.crowd)
                for _ in range(args.repeats)]
        assert len({r["decisions"] for r in runs}) == 1, "the simulation is not deterministic"
        best = {k: min(r["ms_per_step"].get(k, 0.0) for r in runs) for k in PHASES if k in runs[0]["ms_per_step"]}
        rows.append(dict(runs[0], ms_per_step={k: round(v, 3) for k, v in best.items()}))
        print(f"rate {rate:5.0f}: {runs[0]['steps']} steps, live p50 {runs[0]['live_p50']}, plan_step {best['plan_step']:.3f} ms/step "
              f"({', '.join(f'{k} {v:.3f}' for k, v in best.items() if k != 'plan_step')}); decisions {runs[0]['decisions']}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
