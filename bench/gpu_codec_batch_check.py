"""GPU check of big codec launches (issue 15): a request's audio decoded in launches of up to 32 chunks (the default
on a GPU of 64 GiB or more since 2026-12-06) against the same request's audio decoded one chunk a launch.

    python bench/gpu_codec_batch_check.py --checkpoint /tmp/q17 --out DIR
    python bench/gpu_codec_batch_check.py --model tiny-lite --device cpu --codec-batch 8 --out DIR   # the plumbing

Two engines in turn, the same requests: the full-size random checkpoint, the base policy on the synchronous loop
(its plans do not depend on timing), greedy sampling, every request submitted before the first step, so the LM's
frames are the same code for code in both; one engine launches up to `--codec-batch` chunks at once (CUDA graphs
of every batch bucket up to it: 18, 20, ... 32 past the 16 that earlier checks reached), the other one chunk a
launch. Each request's audio must match within bf16's batch-composition noise (`--min-snr-db`, default 30 dB:
the codec's bf16 path is ~43 dB from float32, bench/results/2026-12-02-codec-flat/). Reports the launch sizes
seen (the check fails if no launch was bigger than 16 chunks where the batch allows it), frames equal, the
smallest SNR and the largest absolute difference, to `codec_batch_check.json` under --out.

Exits 1 when a frame or an audio differs past the bound.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Speech in real time, one frame after another.",
         "A longer sentence that keeps the engine busy for a while, with commas, and a full stop.",
         "Short one.", "Numbers like three point five are text too.", "And the last of them all."]


def run(args: argparse.Namespace, codec_batch: int) -> dict:
    from voxrt.engine.messages import AudioChunk, EngineConfig, RequestFailed, SubmitRequest  # noqa: PLC0415
    from voxrt.engine.params import SamplingParams  # noqa: PLC0415
    from voxrt.engine.runtime.core import EngineCore  # noqa: PLC0415

    core = EngineCore(EngineConfig(model=args.model, checkpoint=args.checkpoint, device=args.device,
                                   max_batch_size=args.max_batch_size, max_seq_len=1024, scheduler_type="base",
                                   async_lm=False, max_codec_batch=codec_batch))
    core.warmup()
    sizes: list[int] = []  # chunks a codec graph (or eager call) decoded at once
    launch = core.runner.launch_codec

    def counted(jobs, *a, **k):
        started = launch(jobs, *a, **k)
        sizes.extend(len(idx) for idx, _ in started.parts)  # the runner's batches of at most max_codec_batch
        return started
    core.runner.launch_codec = counted
    reqs = [core.submit(SubmitRequest(f"r{i}", core.info.default_voice,
                                      SamplingParams(greedy=True, num_frames=args.frames + 4 * (i % 4)),
                                      TEXTS[i % len(TEXTS)], True)) for i in range(args.requests)]
    audio: dict[str, list[bytes]] = {}
    failures = []
    t0 = time.perf_counter()
    while core.has_work():
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio.setdefault(event.request_id, []).append(event.pcm)
            elif isinstance(event, RequestFailed):
                failures.append(f"{event.request_id}: {event.message}")
    wall = time.perf_counter() - t0
    frames = {r.request_id: [tuple(f) for f in r.frames] for r in reqs}
    pcm = {rid: np.concatenate([np.frombuffer(b, dtype="<f4") for b in parts]) for rid, parts in audio.items()}
    core.close()
    return dict(frames=frames, pcm=pcm, wall_s=wall, failures=failures, launch_sizes=sizes)


def snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    noise = float(np.mean((ref.astype(np.float64) - got) ** 2))
    signal = float(np.mean(ref.astype(np.float64) ** 2))
    return math.inf if noise == 0.0 else 10.0 * math.log10(max(signal, 1e-30) / noise)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--model", default="qwen3-tts")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=".")
    ap.add_argument("--requests", type=int, default=40, help="more than the codec batch: its launches fill up")
    ap.add_argument("--codec-batch", type=int, default=32)
    ap.add_argument("--max-batch-size", type=int, default=64)
    ap.add_argument("--frames", type=int, default=36, help="frames of the shortest request (pinned; +4 per 4)")
    ap.add_argument("--min-snr-db", type=float, default=30.0)
    args = ap.parse_args()
    if args.codec_batch < 2 or args.requests < 1 or args.frames < 1:
        ap.error("--codec-batch must be >= 2, --requests and --frames >= 1")
    big = run(args, args.codec_batch)
    one = run(args, 1)
    rids = sorted(big["frames"])
    equal = sum(big["frames"][r] == one["frames"][r] for r in rids)
    snrs, diffs = [], []
    for r in rids:
        a, b = big["pcm"].get(r), one["pcm"].get(r)
        if a is None or b is None or a.shape != b.shape:
            snrs.append(-math.inf)
            diffs.append(math.inf)
            continue
        snrs.append(snr_db(b, a))
        diffs.append(float(np.abs(a - b).max()) if a.size else 0.0)
    biggest = max(big["launch_sizes"], default=0)
    expect_big = min(args.codec_batch, args.requests)  # the biggest launch the requests can fill
    report = dict(requests=args.requests, codec_batch=args.codec_batch, frames_equal=equal,
                  failures=big["failures"] + one["failures"],
                  min_snr_db=round(min(snrs), 1) if snrs else None, max_abs_diff=round(max(diffs), 6) if diffs else None,
                  biggest_launch=biggest, launches_over_16=sum(1 for n in big["launch_sizes"] if n > 16),
                  launch_sizes=sorted(set(big["launch_sizes"])), biggest_launch_one=max(one["launch_sizes"], default=0),
                  wall_s=[round(big["wall_s"], 3), round(one["wall_s"], 3)])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "codec_batch_check.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report))
    problems = []
    if equal != len(rids) or len(rids) != args.requests:
        problems.append(f"frames differ ({equal} of {args.requests} requests equal)")
    if report["failures"]:
        problems.append(f"failed requests: {report['failures'][:3]}")
    if not snrs or min(snrs) < args.min_snr_db:
        problems.append(f"audio differs: SNR {report['min_snr_db']} dB < {args.min_snr_db:g}")
    if biggest < expect_big:
        problems.append(f"no launch of {expect_big} chunks (biggest {biggest}): the check did not reach the bucket")
    if report["biggest_launch_one"] != 1:
        problems.append("the one-chunk engine launched more than one chunk at once")
    print(f"codec launches of up to {args.codec_batch} chunks {'EQUAL' if not problems else 'DIFFER from'} "
          f"one chunk a launch" + (": " + "; ".join(problems) if problems else
                                   f" (min SNR {report['min_snr_db']} dB, max abs diff {report['max_abs_diff']})"))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
