"""The runner's host time to fill one decode step's inputs (issue 13: the host must keep up with the GPU).

    python bench/host_fill.py --batches 64,128,192 --tokens 200 [--device cpu] [--model tiny-lite]

Builds an engine (`--model`, default `tiny-lite`: the model does not matter much here: the fill is per request and per page), admits
`--batches` requests, runs steps until each holds `--tokens` KV positions' worth of pages, and times, per
call, the host side of what the decode stage does before its launch (`ModelRunner.decode_filler`, which the
stage runs): the step's text and slot tensors, the sampling parameters and the attention context's `fill`
(its per-token page index lists, then its own `_fill`: TorchAttention's page table on the CPU, FlashInfer's
index lists and plan() on a GPU with FlashInfer). Least of --repeats means of --iters calls, wall ms.

`--decode-attention triton`: the decode buffers' context is our `PagedDecodeAttention` (what a graph bucket of
more than 8 rows runs on Hopper, attention.py's `auto`), built here on any device since only its fill is timed;
`--graphed` pads its rows to the bucket as a graph bucket's context does. `depth_filler`: the host side of the
depth stage's fill for the same rows (the frame's other per-step fill, programs with a code predictor).
"""

from __future__ import annotations

import argparse
import time

import torch

from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.runtime.attention import PagedDecodeAttention, SeqSlice
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.sched.plan import DecodeItem


def timed_ms(fn, iters: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - start) / iters * 1e3)
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the copies queued by one repeat do not hold up the next
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="64,128,192")
    ap.add_argument("--tokens", type=int, default=200, help="KV positions each request holds (pages: / 16)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="tiny-lite")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--decode-attention", choices=("runner", "triton"), default="runner",
                    help="runner: the context the runner builds (torch on the CPU, FlashInfer on a GPU); "
                         "triton: PagedDecodeAttention, the >8-row decode context on Hopper")
    ap.add_argument("--graphed", action="store_true", help="with triton: rows padded as in a graph bucket")
    args = ap.parse_args()
    for batch in (int(b) for b in args.batches.split(",")):
        core = EngineCore(EngineConfig(model=args.model, device=args.device, max_batch_size=batch,
                                       max_seq_len=args.tokens + 64, use_cuda_graphs=False))
        requests = [core.submit(SubmitRequest(f"r{i}", "default", SamplingParams(num_frames=args.tokens),
                                              "word " * 8, True)) for i in range(batch)]
        core.step()  # the prefills
        runner = core.runner
        # each request's pages as if it had run to --tokens positions (the fill reads pages and positions only)
        pool = core.scheduler.pages
        for r in requests:
            more = pool.pages_for_tokens(args.tokens + 1) - len(r.pages)
            if more > 0:
                r.pages.extend(pool.allocate(more))
        items = [DecodeItem(r, 0, args.tokens, 0) for r in requests]
        bufs = runner._make_decode_buffers(batch, False)
        if args.decode_attention == "triton":
            bufs.attn = PagedDecodeAttention(runner.kv, batch, runner.max_pages_per_seq, runner.cfg.device,
                                             use_cuda_graph=args.graphed)
        fill = runner.decode_filler(items)
        parts = {"decode_filler": lambda: fill(bufs, batch)}
        seqs = [SeqSlice(i.request.pages, 1, i.position + 1) for i in items]
        parts["attn.fill"] = lambda: bufs.attn.fill(seqs)
        parts["attn._fill"] = lambda: bufs.attn._fill(seqs)  # the context's own part of attn.fill
        if hasattr(bufs, "sampling"):  # trees before the sampling parameters moved to per-slot rows
            parts["sampling"] = lambda: bufs.sampling.fill_from_params([r.params for r in requests], pad_to=batch)
        if runner.program.has_depth:
            depth_bufs = runner._make_depth_buffers(batch, False)
            hidden, code0 = depth_bufs.hidden.clone(), depth_bufs.code0.clone()
            slots = torch.tensor([r.slot for r in requests], dtype=torch.int64, device=runner.cfg.device)
            if hasattr(runner, "depth_filler"):
                fill_depth = runner.depth_filler(slots, hidden, code0)
            else:  # the trees before: launch_lm's fill_depth, inline
                params = [r.params for r in requests]

                def fill_depth(b, size):
                    b.hidden[:batch].copy_(hidden)
                    b.code0[:batch].copy_(code0)
                    b.sampling.fill_from_params(params, pad_to=size)
            parts["depth_filler"] = lambda: fill_depth(depth_bufs, batch)
        with torch.inference_mode():
            row = {name: timed_ms(fn, args.iters, args.repeats) for name, fn in parts.items()}
        print(f"batch {batch:4d}, {len(requests[0].pages)} pages each ({type(bufs.attn).__name__}): "
              + ", ".join(f"{k} {v:.3f} ms" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
