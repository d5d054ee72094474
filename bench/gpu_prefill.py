"""Graphed prefill on the GPU (issue 13, item 1): the padded, graphed prefill equals an exact-length eager
prefill, and what it costs per prompt count and length. Full-size random checkpoint, bf16, FlashInfer.

    python bench/gpu_prefill.py --checkpoint /tmp/q17 --out DIR

Per (prompt length, prompt count): graphed ms and eager ms of the prefill alone (talker over the prompts and
code 0 sampling; the first frame's code predictor is the depth stage that follows). The check: each prompt's
hidden state within bf16 tolerance of the eager one, code 0 equal (greedy). Exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from voxrt.engine.messages import EngineConfig
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.sched.request import PromptTokens, Request

from engine_timing import time_ms  # noqa: E402 (bench/ is the script's dir)


def make_requests(core: EngineCore, lengths: list[int], seed: int = 0, high: int = 100000) -> list[Request]:
    """Requests with random prompts (text ids in [1000, high)), pages and slots, as the scheduler admits them."""
    sched = core.scheduler
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, n in enumerate(lengths):
        request = Request.create(f"p{seed}-{i}", core.info.default_voice, SamplingParams(greedy=True),
                                 core.program.tokenize, 0)
        text = tuple(int(t) for t in torch.randint(min(1000, high - 1), high, (n,), generator=g))
        codec = tuple(-1 for _ in range(n))
        request.prompt = PromptTokens(text, codec, num_text_tokens_used=1)
        request.pages = sched.pages.allocate(sched.pages.pages_for_tokens(n))
        request.slot = sched.slots.allocate()
        out.append(request)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--lanes", default="auto", help="the engine's --lanes: auto runs the LM (prefill included) on "
                    "its green-context partition, as the engine serves; off on the whole GPU")
    ap.add_argument("--lengths", default="13,40", help="prompt lengths to time")
    args = ap.parse_args()
    core = EngineCore(EngineConfig(model="qwen3-tts", checkpoint=args.checkpoint, device="cuda", max_batch_size=32,
                                   max_seq_len=1024, lanes=args.lanes))
    core.warmup()
    runner = core.runner
    rows, ok = [], True
    with torch.inference_mode():
        mixed = make_requests(core, [13, 40, 14, 90, 17, 12, 33, 60], seed=1)
        hidden, code0 = runner._run_prefill(mixed)
        for i, r in enumerate(mixed):
            h, c = runner._prefill_eager([r])
            err = ((hidden[i].float() - h[0].float()).abs().max() / h[0].float().abs().max()).item()
            same = int(code0[i]) == int(c[0])
            ok = ok and err < 0.05 and same
            rows.append(dict(check="mixed", length=len(r.prompt), rel_err=round(err, 5), code0_equal=same))
        for length in (int(n) for n in args.lengths.split(",")):
            for count in (1, 8):
                reqs = make_requests(core, [length] * count, seed=length * 10 + count)
                graphed = time_ms(lambda: runner._run_prefill(reqs), iters=20)
                eager = time_ms(lambda: runner._prefill_eager(reqs), iters=10)
                rows.append(dict(length=length, prompts=count, graphed_ms=round(graphed, 3), eager_ms=round(eager, 3)))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"prefill-{args.lanes}.json"), "w") as f:
        json.dump(dict(gpu=torch.cuda.get_device_name(), frame_path=core.info.frame_path, lanes=core.info.lanes,
                       rows=rows), f, indent=2)
    print("lanes:", core.info.lanes)
    for row in rows:
        print(row)
    print(f"graphed prefill {'EQUALS' if ok else 'DIFFERS from'} the exact-length prefill")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
