"""Kernel breakdown of one decode step and one predictor frame of qwen3-tts-1.7b-shape (GPU, eager, bf16).

    python bench/profile_decode.py [--batch 1]

Prints the top CUDA kernels by total time, so that fusion work targets what costs.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.runtime.graphs import GraphedStage


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()
    core = EngineCore(EngineConfig(model="qwen3-tts-1.7b-shape", device="cuda", max_batch_size=8, max_seq_len=512,
                                   use_cuda_graphs=False))
    reqs = [core.submit(SubmitRequest(f"r{i}", "default", SamplingParams(num_frames=64), "word " * 80, True))
            for i in range(args.batch)]
    for _ in range(4):
        core.step()
    runner = core.runner
    items = [core.scheduler.next_decode(r) for r in reqs]

    fill = runner.decode_filler(items)

    decode = GraphedStage("decode", [], runner._make_decode_buffers, runner._decode_body, False)
    depth = GraphedStage("depth", [], runner._make_depth_buffers, runner._depth_body, False)
    with torch.inference_mode():
        for name, fn in (("decode step", lambda: decode.run(args.batch, fill)),
                         ("predictor frame", lambda: depth.run(args.batch, lambda b, s: None))):
            fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
            total_us = sum(e.self_device_time_total for e in events)
            count = sum(e.count for e in events)
            print(f"\n== {name}, batch {args.batch}: {count} kernels, {total_us / 1e3:.2f} ms of kernel time")
            for e in sorted(events, key=lambda e: -e.self_device_time_total)[:18]:
                print(f"  {e.self_device_time_total / 1e3:7.3f} ms  x{e.count:<5} {e.key[:90]}")


if __name__ == "__main__":
    main()
