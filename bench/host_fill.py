"""The runner's host time to fill one decode step's inputs (issue 13: the host must keep up with the GPU).

    python bench/host_fill.py --batches 64,128,192 --tokens 200 [--device cpu] [--model tiny-lite]

Builds an engine (`--model`, default `tiny-lite`: the model does not matter much here: the fill is per request and per page), admits
`--batches` requests, runs steps until each holds `--tokens` KV positions' worth of pages, and times, per
call, the host side of what the decode stage does before its launch (`ModelRunner.decode_filler`, which the
stage runs): the step's text and slot tensors, the sampling parameters and the attention context's `fill`
(its per-token page index lists, then its own `_fill`: TorchAttention's page table on the CPU, FlashInfer's
index lists and plan() on a GPU with FlashInfer). Least of --repeats means of --iters calls, wall ms.
"""

from __future__ import annotations

import argparse
import time

import torch

from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.runtime.attention import SeqSlice
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
        fill = runner.decode_filler(items)
        parts = {"decode_filler": lambda: fill(bufs, batch)}
        seqs = [SeqSlice(i.request.pages, 1, i.position + 1) for i in items]
        parts["attn.fill"] = lambda: bufs.attn.fill(seqs)
        parts["attn._fill"] = lambda: bufs.attn._fill(seqs)  # the context's own part of attn.fill
        parts["sampling"] = lambda: bufs.sampling.fill_from_params([r.params for r in requests], pad_to=batch)
        with torch.inference_mode():
            row = {name: timed_ms(fn, args.iters, args.repeats) for name, fn in parts.items()}
        print(f"batch {batch:4d}, {len(requests[0].pages)} pages each ({type(bufs.attn).__name__}): "
              + ", ".join(f"{k} {v:.3f} ms" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
