"""Mixed steps on the GPU (issue 13, item 1: "admissions mixed into the decode batch, if you measure that
better"): a decode batch and short prompts in one LM pass (`--mixed-prefill`) against the prefill stage and
the decode stage run one after the other. Full-size random checkpoint, bf16, FlashInfer, CUDA graphs, the
engine's default lanes.

    python bench/gpu_mixed.py --checkpoint /tmp/q17 --out DIR
    python bench/gpu_mixed.py --checkpoint /tmp/q17 --batches 128,192,256 --prompts 1,2,3,4,8 --out DIR  # max batch 256

The check (exits 1 on a mismatch): each prompt's and each decode row's hidden state within bf16 tolerance of
the separate stages' (the code-0 history restored between the two runs), code 0 (greedy) equal in >= 95% of
rows. Then per (decode batch, prompts): ms of prefill + decode apart, of the mixed step, and of decode alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.lanes import LM

from engine_timing import time_ms  # noqa: E402 (bench/ is the script's dir)
from gpu_prefill import make_requests  # noqa: E402

from voxrt.engine.runtime.core import EngineCore  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--context", type=int, default=64, help="tokens of KV per decode row")
    ap.add_argument("--batches", default="16,64,112,120")
    ap.add_argument("--prompts", default="1,2,4,8")
    ap.add_argument("--prompt-len", type=int, default=13, help="tokens per prompt (CustomVoice: 12-14)")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the check (a tiny checkpoint), no timing")
    ap.add_argument("--max-batch", type=int, default=None,
                    help="the engine's max batch (its graph buckets): default 128 on a GPU (8 on the CPU), or the "
                         "largest of --batches if more (256: the default on GPUs of 64 GiB or more)")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    counts = [int(p) for p in args.prompts.split(",")]
    max_batch = args.max_batch or max([128 if args.device != "cpu" else 8, *batches])
    if max(batches) > max_batch:
        ap.error(f"--batches up to {max(batches)} need --max-batch >= that (got {max_batch})")
    core = EngineCore(EngineConfig(model="qwen3-tts", checkpoint=args.checkpoint, device=args.device,
                                   max_batch_size=max_batch, max_seq_len=1024, mixed_prefill=True,
                                   max_live_requests=2 * max_batch))
    core.warmup()
    runner = core.runner
    assert runner.mixed_stage_by_count is not None, "mixed stages did not capture"
    b_max = max(batches)
    reqs = [core.submit(SubmitRequest(f"d{i}", core.info.default_voice,
                                      SamplingParams(greedy=True, num_frames=args.context + 8),
                                      "word " * (args.context + 8), True)) for i in range(b_max)]
    while min(r.num_tokens for r in reqs) < args.context:
        core.step()
    core.finish_lm()
    items = [core.scheduler.next_decode(r) for r in reqs]
    prompts = make_requests(core, [args.prompt_len] * max(counts), seed=7,
                            high=min(100000, core.program.cfg.talker.text_vocab_size))
    rows, ok = [], True

    def separate(b, p):
        hp, cp = runner._run_prefill(prompts[:p])
        bufs = runner.decode_stage.run(b, runner.decode_filler(items[:b]))
        return hp, cp, bufs.hidden[:b], bufs.code0[:b]

    def mixed(b, p):
        stage = runner.mixed_stage_by_count[min(n for n in runner.mixed_stage_by_count if n >= p)]
        bufs = stage.run(b, lambda bb, size: runner._fill_mixed(bb, size, items[:b], prompts[:p]))
        return bufs.pre.hidden[:p], bufs.pre.code0[:p], bufs.dec.hidden[:b], bufs.dec.code0[:b]

    with torch.inference_mode(), runner.lanes.on(LM):
        for b, p in [(batches[0], counts[-1]), (b_max, counts[0]), (b_max, counts[-1])]:
            history = runner.history.clone()
            want = [t.clone() for t in separate(b, p)]
            runner.history.copy_(history)
            got = [t.clone() for t in mixed(b, p)]
            runner.history.copy_(history)
            runner.synchronize()
            for name, w, g in (("prefill", want[0], got[0]), ("decode", want[2], got[2])):
                err = ((g.float() - w.float()).abs().max() / w.float().abs().max()).item()
                codes_w, codes_g = (want[1], got[1]) if name == "prefill" else (want[3], got[3])
                same = (codes_w == codes_g).float().mean().item()
                ok = ok and err < 0.05 and same >= 0.95
                rows.append(dict(check=name, batch=b, prompts=p, rel_err=round(err, 5), code0_equal=round(same, 3)))
        for b in batches if args.device != "cpu" else []:
            fill = runner.decode_filler(items[:b])
            alone = time_ms(lambda: runner.decode_stage.run(b, fill))
            for p in counts:
                apart = time_ms(lambda: separate(b, p))
                together = time_ms(lambda: mixed(b, p))
                rows.append(dict(batch=b, prompts=p, prompt_len=args.prompt_len, decode_ms=round(alone, 3),
                                 apart_ms=round(apart, 3), mixed_ms=round(together, 3),
                                 saved_ms=round(apart - together, 3)))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "mixed.json"), "w") as f:
        json.dump(dict(gpu=torch.cuda.get_device_name() if args.device != "cpu" else "cpu", frame_path=core.info.frame_path,
                       lanes=runner.lanes.describe(), context=args.context, rows=rows), f, indent=2)
    for row in rows:
        print(row)
    print(f"mixed steps {'EQUAL' if ok else 'DIFFER from'} the separate stages")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
