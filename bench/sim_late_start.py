"""The deadline policy's admission under overload, in the simulation (sched/sim.py; CPU only, no GPU figures):
earliest arrival first against `late_start_demotion_ms` (a waiting stream already past its first-audio deadline
goes after the streams still on time, for at most that long) and against `max_admission_wait_ms` (`--max-wait`:
a stream not admitted within it is refused; its row counts the refused requests, which miss the SLO).

    python bench/sim_late_start.py --rates 80,88,96,104 --duration 60 --demotion 0,2000,inf
    python bench/sim_late_start.py --rates 72,80,88 --duration 60 --demotion 0,2000,inf --tokens-per-s 30
    # calibrated to the H200's 60 s whole-text points (104 req/s 100%, 112 95.3%; 2026-12-04-capacity):
    python bench/sim_late_start.py --rates 112,120,128 --lm-share 0.52 --bg-share 0.55 --urgent-pause 0.1 \
        --prefill-ms 0.06 --demotion 0,2000,inf
    # the first chunk's size (`--first-chunk`, frames; 2 is Qwen3-TTS's), H100 shares (2026-12-06-h100-capacity-run):
    python bench/sim_late_start.py --rates 112,120,128 --lm-share 0.51 --bg-share 0.31 --urgent-pause 0.1 \
        --prefill-ms 0.06 --demotion 0 --first-chunk 2,3,4
    # overload protection (bench/results/2026-12-06-h100-levers/):
    python bench/sim_late_start.py --rates 112,120,128,136,144 --lm-share 0.51 --bg-share 0.31 --urgent-pause 0.1 \
        --prefill-ms 0.06 --demotion 0 --max-wait none,100
    # set from the H100 trace of bench/results/2026-12-06-h100-capacity-bound/: LibriTTS past the knee within ~3
    # points of that GPU at 120-136 req/s (not Seed-TTS's collapse: no host time, a codec too fast for short texts):
    python bench/sim_late_start.py --costs h100 --lm-share 0.73 --bg-share 0.6 --urgent-share 0.9 --urgent-pause 0.6 \
        --prefill-ms 0.06 --demotion 0 --max-wait 100 --async-lm --duration 30 --rates 112,120,128,136
    # how much of a token stream's wait for its first text counts toward the bound (0: the rule before 2026-12-06;
    # 50, the default, took an H100's WebSocket tokens from 89.0 to 98.3% at 120 req/s: 2026-12-06-h100-text-wait):
    python bench/sim_late_start.py --costs h100 --lm-share 0.73 --bg-share 0.6 --urgent-share 0.9 --urgent-pause 0.6 \
        --prefill-ms 0.06 --demotion 0 --max-wait 100 --late-hold 100 --async-lm --duration 30 --rates 112,120,128 \
        --tokens-per-s 30 --first-chunk 3 --set admission_text_wait_ms=0
    # the deadline policy's late-chunk hold against a codec-bound collapse (Seed-TTS's short texts, the background
    # lane on a small share; bench/results/2026-12-06-h100-capacity-bound/):
    python bench/sim_late_start.py --workload bench/workloads/seedtts_eval_en.jsonl --rates 160,184,208 \
        --duration 30 --lm-share 0.45 --bg-share 0.12 --codec-per-frame-ms 0.048 --urgent-pause 0.1 --prefill-ms 0.06 \
        --demotion 0 --max-wait 100 --late-hold none,50,100,200

LibriTTS test-clean texts, Poisson arrivals (seed 0: the same arrivals for every setting), the lanes runtime
with the H200's start-up cost model (`COSTS`: measured at engine start on the whole GPU) on SM shares that put
the simulated knee near 88 req/s. The simulated runtime pauses the LM for every urgent codec launch, so its knee
sits below the GPU's (~112 req/s at 90%, bench/results/2026-12-04-capacity): compare settings here, not
absolute rates against the GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math

from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.scheduler import SchedulerConfig
from voxrt.engine.sched.sim import SIM_SPEC, TTFA_SLO_MS, simulate

# measured at engine start-up on the H200 (bench/results/2026-12-03-frame-l2/frame.log), prefill per token
# raised to the mixed steps' observed cost (steps with prompts ~2.7 ms longer for ~15 prompt tokens)
COSTS = CostModel(lm_base_ms=3.5, lm_per_request_ms=0.0104, prefill_per_token_ms=0.08, codec_base_ms=1.51,
                  codec_per_frame_ms=0.0256)


# measured at engine start-up on the H100 of bench/results/2026-12-06-h100-capacity-bound/ (its engine log)
COSTS_H100 = CostModel(lm_base_ms=3.906, lm_per_request_ms=0.02747, prefill_per_token_ms=0.02, codec_base_ms=1.743,
                       codec_per_frame_ms=0.0480)


# SchedulerConfig fields that have flags of their own here (--batch, --live, --demotion, --max-wait, --late-hold)
_FLAGGED = {"max_batch_size", "max_live_requests", "late_start_demotion_ms", "max_admission_wait_ms",
            "late_chunk_hold_ms", "has_lanes"}


def _overrides(settings: list[str]) -> dict:
    """`--set FIELD=VALUE` as SchedulerConfig keyword arguments, each value parsed as its field's type."""
    fields = {name: type(getattr(SchedulerConfig(), name)) for name in
              (field.name for field in dataclasses.fields(SchedulerConfig)) if name not in _FLAGGED}
    overrides = {}
    for setting in settings:
        name, _, value = setting.partition("=")
        if name not in fields or not value:
            raise SystemExit(f"error: --set {setting!r}: expected FIELD=VALUE, FIELD one of {sorted(fields)} "
                             "(the others have flags of their own)")
        kind = fields[name]
        try:
            overrides[name] = kind(value) if kind in (int, float) else float(value)
        except ValueError:
            raise SystemExit(f"error: --set {setting!r}: {value!r} is not {kind.__name__}") from None
    return overrides


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="80,88,96")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--demotion", default="0,2000,inf", help="late_start_demotion_ms values (0: off)")
    ap.add_argument("--max-wait", default="none", help="max_admission_wait_ms values (none: off; "
                    "comma-separated): a stream not admitted within it is refused")
    ap.add_argument("--late-hold", default="none", help="late_chunk_hold_ms values (none: off; comma-separated): "
                    "no stream is admitted while every chunk completed over that long was late")
    ap.add_argument("--tokens-per-s", type=float, default=None, help="stream each text at this rate (default: whole)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--live", type=int, default=256)
    ap.add_argument("--lm-share", type=float, default=0.55)
    ap.add_argument("--bg-share", type=float, default=0.31)
    ap.add_argument("--urgent-share", type=float, default=1.0, help="an urgent launch takes the cost model's "
                    "codec time over this (1: the whole GPU's time)")
    ap.add_argument("--costs", default="h200", choices=["h200", "h100"], help="the start-up cost model: the H200's "
                    "(COSTS) or the H100's (COSTS_H100)")
    ap.add_argument("--urgent-pause", type=float, default=1.0, help="sim.simulate's urgent_pause")
    ap.add_argument("--prefill-ms", type=float, default=COSTS.prefill_per_token_ms, help="prefill ms a prompt token")
    ap.add_argument("--codec-per-frame-ms", type=float, default=None,
                    help="the codec's ms a frame on the whole GPU (default: the --costs model's start-up measurement)")
    ap.add_argument("--first-chunk", default="2", help="first chunk sizes in frames (comma-separated; the chunks "
                    "after it double up to 25, as Qwen3-TTS's)")
    ap.add_argument("--async-lm", action="store_true", help="the asynchronous LM loop (the GPU's default): a "
                    "step's frames reach the scheduler after it planned the next step")
    ap.add_argument("--lm-cost", default=None, metavar="BASE_MS,PER_REQUEST_MS",
                    help="the LM step's cost model instead of the --costs one's (e.g. 5.19,0.0174: the start-up "
                    "model's 7.42 ms at batch 128 with the H100 frame's measured growth to batch 256, 1.30x)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a SchedulerConfig field for every run, e.g. urgent_ms=50 (repeatable)")
    ap.add_argument("--workload", default="bench/workloads/libritts_test_clean.jsonl")
    ap.add_argument("--out", default=None, help="JSON lines, one per run")
    args = ap.parse_args()
    with open(args.workload) as f:
        texts = [json.loads(line)["text"] for line in f][:4000]
    base = COSTS_H100 if args.costs == "h100" else COSTS
    costs = dataclasses.replace(base, prefill_per_token_ms=args.prefill_ms,
                                codec_per_frame_ms=args.codec_per_frame_ms or base.codec_per_frame_ms)
    if args.lm_cost:
        try:
            lm_base, lm_per_request = (float(x) for x in args.lm_cost.split(","))
        except ValueError:
            ap.error(f"--lm-cost must be BASE_MS,PER_REQUEST_MS, got {args.lm_cost!r}")
        if lm_base < 0 or lm_per_request < 0:
            ap.error("--lm-cost values must be >= 0")
        costs = dataclasses.replace(costs, lm_base_ms=lm_base, lm_per_request_ms=lm_per_request)
    rows = []
    firsts = [int(f) for f in args.first_chunk.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    demotions = [float(d) for d in args.demotion.split(",")]
    waits = [None if w == "none" else float(w) for w in args.max_wait.split(",")]
    holds = [None if h == "none" else float(h) for h in args.late_hold.split(",")]
    overrides = _overrides(args.set)
    for first, rate, demotion, wait, hold in itertools.product(firsts, rates, demotions, waits, holds):
        config = SchedulerConfig(max_batch_size=args.batch, max_live_requests=args.live,
                                 late_start_demotion_ms=demotion, max_admission_wait_ms=wait,
                                 late_chunk_hold_ms=hold, **overrides)
        result = simulate("deadline", rate=rate, duration_s=args.duration, seed=0, texts=texts, has_lanes=True,
                          lm_share=args.lm_share, bg_share=args.bg_share, costs=costs, num_slots=8 * args.batch,
                          tokens_per_s=args.tokens_per_s, config=config, urgent_pause=args.urgent_pause,
                          spec=dataclasses.replace(SIM_SPEC, first_chunk_frames=first), async_lm=args.async_lm,
                          urgent_share=args.urgent_share)
        ttfa = sorted(result.ttfa_ms)
        pick = lambda q: round(ttfa[min(len(ttfa) - 1, int(q * len(ttfa)))], 1) if ttfa else None  # noqa: E731
        row = dict(rate=rate, lm_share=args.lm_share, bg_share=args.bg_share, urgent_pause=args.urgent_pause,
                   prefill_ms=args.prefill_ms, codec_per_frame_ms=costs.codec_per_frame_ms, costs=args.costs,
                   lm_cost=[costs.lm_base_ms, costs.lm_per_request_ms], batch=args.batch,
                   urgent_share=args.urgent_share, demotion_ms=demotion if math.isfinite(demotion) else "inf",
                   max_admission_wait_ms=wait, late_chunk_hold_ms=hold, async_lm=args.async_lm, refused=sum(1 for r in result.records if r.status == "failed"),
                   tokens_per_s=args.tokens_per_s, first_chunk_frames=first, config=overrides,
                   requests=len(result.records),
                   attainment_pct=round(100 * result.attainment, 1),
                   late_first_audio=sum(1 for t in ttfa if t > TTFA_SLO_MS),
                   stalled=sum(1 for s in result.stalls if s), ttfa_p50_ms=pick(0.5), ttfa_p99_ms=pick(0.99),
                   ttfa_max_ms=round(ttfa[-1], 1) if ttfa else None, codec_errors=len(result.codec_errors),
                   lanes={lane: stats.as_dict() for lane, stats in result.lane_stats.items()},
                   sim_s=round(result.end_ns / 1e9, 1))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
