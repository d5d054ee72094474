"""Where an Orpheus engine step goes (GPU): one decode sub-step alone, and whole engine steps under the profiler.

    python bench/profile_orpheus.py --checkpoint /tmp/orpheus3b [--batch 1]

Prints (1) the wall and GPU time of one decode-stage pass (one LM token for every request, CUDA graph), (2) the
wall ms of `EngineCore.step()` in the steady part, and (3) the top CUDA kernels and top host functions over a
few steps, so that the frame's cost is split into LM sub-steps, the codec and the host.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs back home before the rain."


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--codec-sms", type=int, default=None, help="SMs of the background codec lane (default: the "
                    "engine's split)")
    ap.add_argument("--skip-profiler", action="store_true", help="only the timings (1) and (2)")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script (no GPU figures)")
    args = ap.parse_args()
    core = EngineCore(EngineConfig(model="orpheus", checkpoint=args.checkpoint, device=args.device,
                                   max_batch_size=max(4, args.batch), max_seq_len=1024, use_cuda_graphs=args.device == "cuda",
                                   codec_sms=args.codec_sms))
    core.warmup()  # the graphs
    reqs = [core.submit(SubmitRequest(f"r{i}", "tara", SamplingParams(num_frames=200), TEXT, True))
            for i in range(args.batch)]
    for _ in range(8):
        core.step()
    runner = core.runner
    gpu = args.device == "cuda"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    sync()

    # (1) one decode-stage pass: the LM sub-step of every request
    items = [core.scheduler.next_decode(r) for r in reqs]
    fill = runner.decode_filler(items)
    with torch.inference_mode(), runner.lanes.on("lm"):
        stream = torch.cuda.current_stream() if gpu else None
        for _ in range(3):
            runner.decode_stage.run(len(items), fill)
        stream.synchronize() if gpu else None
        t0 = time.perf_counter()
        n = 20
        if gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        for _ in range(n):
            runner.decode_stage.run(len(items), fill)
        if gpu:
            end.record()
            stream.synchronize()
        wall = (time.perf_counter() - t0) * 1000 / n
        gpu_ms = f"{start.elapsed_time(end) / n:.2f}" if gpu else "n/a"
        print(f"decode-stage pass, batch {args.batch}, {core.lanes.describe()}: wall {wall:.2f} ms, GPU {gpu_ms} ms "
              f"(events on the LM stream; {n} passes back to back)", flush=True)

    # (2) engine steps, wall
    walls = []
    for _ in range(10):
        t0 = time.perf_counter()
        core.step()
        walls.append((time.perf_counter() - t0) * 1000)
    print(f"EngineCore.step wall ms, batch {args.batch}: " + " ".join(f"{w:.1f}" for w in walls), flush=True)

    if args.skip_profiler:
        return
    # (3) the profiler over a few steps
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])) as prof:
        for _ in range(args.steps):
            core.step()
        sync()
    events = prof.key_averages()
    cuda = [e for e in events if e.self_device_time_total > 0]
    total_us = sum(e.self_device_time_total for e in cuda)
    print(f"\n== CUDA over {args.steps} steps: {total_us / 1e3:.2f} ms of kernel time, "
          f"{sum(e.count for e in cuda)} kernel launches")
    for e in sorted(cuda, key=lambda e: -e.self_device_time_total)[:20]:
        print(f"  {e.self_device_time_total / 1e3:8.3f} ms  x{e.count:<6} {e.key[:100]}")
    print(f"\n== host, by CPU time including children, over {args.steps} steps")
    for e in sorted(events, key=lambda e: -e.cpu_time_total)[:40]:
        print(f"  {e.cpu_time_total / 1e3:8.2f} ms total {e.self_cpu_time_total / 1e3:8.2f} self  x{e.count:<6} "
              f"{e.key[:90]}")


if __name__ == "__main__":
    main()
