"""GPU check of the asynchronous LM loop (issue 13, item 2): the default loop on a GPU (step N+1 planned and
queued while step N runs) against `--lm-loop sync` (each step's frames read before the next is planned), full-size random
checkpoint, fused frame path, lanes on, the base policy (its LM plans do not depend on timing), every request
submitted before the first step: the same plans, so the frames must be equal code for code and the audio equal
within the codec's batch-composition noise. Also the wall time of the whole drain in each mode.

    python bench/gpu_async_check.py --checkpoint /tmp/q17 --out DIR

Exits 1 when a frame differs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from voxrt.engine.messages import AudioChunk, EngineConfig, RequestFailed, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Speech in real time, one frame after another.",
         "A longer sentence that keeps the engine busy for a while, with commas, and a full stop.",
         "Short one.", "Numbers like three point five are text too.", "And the last of them all."]


def run(checkpoint: str, async_lm: bool, requests: int) -> dict:
    core = EngineCore(EngineConfig(model="qwen3-tts", checkpoint=checkpoint, device="cuda", max_batch_size=32,
                                   max_seq_len=1024, scheduler_type="base", async_lm=async_lm))
    core.warmup()
    reqs = [core.submit(SubmitRequest(f"r{i}", core.info.default_voice,
                                      SamplingParams(greedy=True, num_frames=20 + 7 * (i % 6)),
                                      TEXTS[i % len(TEXTS)], True)) for i in range(requests)]
    audio: dict[str, list[bytes]] = {}
    failures = []
    t0 = time.perf_counter()
    steps = 0
    while core.has_work():
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio.setdefault(event.request_id, []).append(event.pcm)
            elif isinstance(event, RequestFailed):
                failures.append(event)
        steps += 1
    wall = time.perf_counter() - t0
    frames = {r.request_id: r.frames for r in reqs}
    pcm = {rid: np.concatenate([np.frombuffer(b, dtype="<f4") for b in parts]) for rid, parts in audio.items()}
    core.close()
    return dict(frames=frames, pcm=pcm, wall_s=wall, steps=steps, failures=len(failures),
                total_frames=sum(len(f) for f in frames.values()))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--requests", type=int, default=24)
    args = ap.parse_args()
    a = run(args.checkpoint, True, args.requests)
    s = run(args.checkpoint, False, args.requests)
    equal = sum(a["frames"][r] == s["frames"][r] for r in a["frames"])
    diffs = [float(np.abs(a["pcm"][r] - s["pcm"][r]).max()) if a["pcm"][r].shape == s["pcm"][r].shape else float("inf")
             for r in a["pcm"]]
    report = dict(requests=args.requests, frames_equal=equal, failures=[a["failures"], s["failures"]],
                  audio_max_abs_diff=max(diffs), total_frames=a["total_frames"],
                  async_wall_s=round(a["wall_s"], 3), sync_wall_s=round(s["wall_s"], 3),
                  async_steps=a["steps"], sync_steps=s["steps"],
                  async_frames_per_s=round(a["total_frames"] / a["wall_s"], 1),
                  sync_frames_per_s=round(s["total_frames"] / s["wall_s"], 1))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "async_check.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(report)
    ok = equal == args.requests and not a["failures"] and not s["failures"]
    print(f"asynchronous loop frames {'EQUAL' if ok else 'DIFFER from'} the synchronous loop's")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
