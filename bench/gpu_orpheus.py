"""Orpheus on the engine (issue 16's GPU figures): a correctness check, then LM tokens per second per stream at
several batch sizes, and the time to first audio of one request alone.

- check: greedy frames of three requests batched, CUDA graphs against the eager stages (the same weights and
  dtype), and their audio lengths (N frames -> N * 2048 samples through the lagging codec);
- per batch size B: B requests pinned to `--frames` frames decode together through EngineCore; over the steps
  where all B are decoding, frames per second per stream, LM tokens per second per stream (7 a frame), audio
  seconds per wall second per stream (1.0 = real time), and the step's wall ms;
- TTFA: one request alone, submit to its first audio chunk (the first chunk is 3 frames: 21 LM tokens and the
  codec's lag), `--ttfa-repeats` times.

    voxrt make-checkpoint --arch orpheus-3b /tmp/orpheus3b      # full-size random weights (noise)
    python bench/gpu_orpheus.py --checkpoint /tmp/orpheus3b --batches 1,16,64 --out DIR
    python bench/gpu_orpheus.py --checkpoint /tmp/orp --device cpu --batches 1,4 --frames 12   # a CPU dry run

Writes DIR/orpheus.json and prints the tables. A figure from `--device cpu` is not a GPU figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import torch

from voxrt.engine.messages import AudioChunk, EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore

from gpu_qwen3_tts import ttfa_ms  # noqa: E402 (bench/ is the script's dir)

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs back home before the rain."


def make_core(args, batch: int, graphs: bool) -> EngineCore:
    core = EngineCore(EngineConfig(model="orpheus", checkpoint=args.checkpoint, device=args.device,
                                   max_batch_size=batch, max_seq_len=args.max_seq_len, use_cuda_graphs=graphs))
    core.warmup()  # captures the graphs (and measures the cost model): without it every stage runs eagerly
    if graphs and args.device == "cuda" and not core.runner.decode_stage.graphs:
        raise RuntimeError("CUDA graphs were asked for but none was captured")
    return core


def run_all(core: EngineCore, requests: list[SubmitRequest]) -> dict[str, dict]:
    """Submits the requests and steps to the end: per request its frames and audio samples."""
    out = {r.request_id: {"samples": 0} for r in requests}
    handles = {r.request_id: core.submit(r) for r in requests}
    while core.has_work():
        for event in core.step():
            if isinstance(event, AudioChunk):
                out[event.request_id]["samples"] += event.num_samples
            else:
                raise RuntimeError(f"request failed: {event}")
    for rid, request in handles.items():
        out[rid]["frames"] = [list(f) for f in request.frames]
        out[rid]["finish_reason"] = request.finish_reason
    return out


def check(args) -> dict:
    """Graphed against eager: the same greedy frames, and N * 2048 samples for N frames."""
    reqs = [SubmitRequest(f"c{i}", voice, SamplingParams(greedy=True, max_frames=args.check_frames), text, True)
            for i, (voice, text) in enumerate([("tara", TEXT), ("leo", "Hello there."), ("zoe", TEXT[:40])])]
    results = {}
    for graphs in (False, True):
        core = make_core(args, 4, graphs)
        results[graphs] = run_all(core, reqs)
        del core
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    eager, graphed = results[False], results[True]
    same = all(eager[r]["frames"] == graphed[r]["frames"] for r in eager)
    lengths = all(v["samples"] == len(v["frames"]) * 2048 for v in graphed.values())
    return {"greedy_frames_equal": same, "samples_equal_frames_x_2048": lengths,
            "frames": {r: len(v["frames"]) for r, v in graphed.items()}}


def throughput(args, batch: int) -> dict:
    core = make_core(args, batch, True)
    params = SamplingParams(num_frames=args.frames, temperature=0.6, top_p=0.8, repetition_penalty=1.1)
    handles = [core.submit(SubmitRequest(f"b{batch}-{i}", "tara", params, TEXT, True)) for i in range(batch)]
    steps_ms, frames_at = [], []
    while core.has_work():
        before = sum(r.num_frames for r in handles)
        t0 = time.monotonic()
        core.step()
        dt = (time.monotonic() - t0) * 1000
        decoding = sum(r.num_frames > 0 and r.finish_reason is None for r in handles)
        if decoding == batch:  # the steady part: every request past its prefill, none finished
            steps_ms.append(dt)
            frames_at.append(sum(r.num_frames for r in handles) - before)
    core.finish_lm()
    wall_s = sum(steps_ms) / 1000
    frames = sum(frames_at)
    per_stream_fps = frames / batch / wall_s if wall_s else float("nan")
    del core
    return {"batch": batch, "steady_steps": len(steps_ms), "step_ms_mean": round(sum(steps_ms) / max(1, len(steps_ms)), 2),
            "frames_per_s_per_stream": round(per_stream_fps, 2), "tokens_per_s_per_stream": round(7 * per_stream_fps, 1),
            "audio_s_per_s_per_stream": round(per_stream_fps * 2048 / 24000, 3)}


def ttfa(args) -> list[float]:
    return ttfa_ms(make_core(args, 4, True), args.ttfa_repeats)  # bench/gpu_qwen3_tts.py's: submit to first audio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--frames", type=int, default=40, help="pinned frames per request in the throughput runs")
    ap.add_argument("--check-frames", type=int, default=6)
    ap.add_argument("--max-seq-len", type=int, default=1024)
    ap.add_argument("--ttfa-repeats", type=int, default=5)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.makedirs(args.out, exist_ok=True)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (not a GPU figure)"
    result = {"device": device, "date": time.strftime("%Y-%m-%d"), "args": vars(args)}
    result["check"] = check(args)
    print(f"check (graphs vs eager, greedy): {result['check']}", flush=True)
    rows = [throughput(args, int(b)) for b in args.batches.split(",")]
    result["throughput"] = rows
    print(f"\nOrpheus on {device}, {args.frames} pinned frames a request")
    print("| batch | step ms | frames/s per stream | LM tokens/s per stream | audio s/s per stream |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['batch']} | {r['step_ms_mean']} | {r['frames_per_s_per_stream']} | {r['tokens_per_s_per_stream']} "
              f"| {r['audio_s_per_s_per_stream']} |")
    result["ttfa_ms"] = ttfa(args)
    print(f"\nTTFA of one request alone (ms): {result['ttfa_ms']}")
    with open(os.path.join(args.out, "orpheus.json"), "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
