"""GPU check that the fused frame path equals the reference path (issue 12), full-size random checkpoint, bf16.

1. Teacher-forced, eager, the same inputs on both paths: a prefill of two prompts, then `--frames` decode steps
   fed the same codes; per step the code 0 logits (codec head over the talker's hidden state) and the code
   predictor's logits for the same hidden state and code 0 (its steps up to the first whose greedy code
   differs: each step feeds the next its own choice). Reported: the largest difference relative to the
   logits' scale, and how often the argmax agrees.
2. Greedy generation through EngineCore (CUDA graphs, FlashInfer): `--requests` requests x `--frames` pinned
   frames on each path; reported: frames equal before the first difference, and the share of codes equal.

3. With PDL (kernels/__init__.py; on by default on sm90+): step 1 again on the fused path with PDL off. The
   two launch modes run the same arithmetic up to the order of a product's float32 partial sums, so their
   logits must agree far closer than the paths do: a kernel reading what its predecessor had not yet written
   (a PDL ordering bug) shows here as a large difference.

    python bench/gpu_fused_check.py --checkpoint /tmp/q17 --out DIR [--pdl on|off]

Exits non-zero when teacher-forced logits differ beyond bf16 tolerance (`--max-rel-err`) or agree on too
few argmaxes, or PDL on and off differ by more than `--max-pdl-rel-err`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime import knobs
from voxrt.engine.runtime.attention import (DECODE_KERNELS, KVCache, PagedDecodeAttention, SeqSlice, TorchAttention,
                                            decode_kernel, set_decode_kernel)
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.runtime.kernels import (l2_prefetch_enabled, pdl_enabled, set_l2_prefetch, set_pdl, set_skinny,
                                          skinny_enabled)
from voxrt.engine.runtime.sampling import SamplingTensors
from voxrt.models.registry import build_program

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the CPU: a dry run of the script
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Speech in real time, one frame after another."]


def teacher_forced(program, frames: int, seed: int = 0, rows: int = 2, attention: str = "torch") -> dict:
    """Code 0 logits and predictor logits per step, on the program's current path, for `rows` requests (TEXTS
    in turn; more than kernels/gemv.py's MAX_ROWS run the products above it: cuBLAS, or the tensor-core one).
    `attention`: the decode steps' context, `torch` (the reference's, TorchAttention) or `paged` (our paged decode
    kernel, runtime/attention.py PagedDecodeAttention: where VOXRT_PAGED_DECODE_ROPE=on runs the fused path's
    rotary inside it); the prompts' prefill is TorchAttention's either way."""
    geom = program.lm_geometry
    g = torch.Generator(device="cpu").manual_seed(seed)
    kv = KVCache(geom.num_layers, max(64, 4 * rows + 12), 16, geom.num_kv_heads, geom.head_dim, DEV,
                 program.talker.codec_head.weight.dtype)
    prompts = [program.tokenize(TEXTS[i % len(TEXTS)])[0] for i in range(rows)]
    # rows 0 and 1 keep the pages of the two-row check's first form (its figures stay comparable), 4 pages a row
    pages = [[1, 5, 9, 13], [2, 6, 10, 14]][:rows] + [[20 + 4 * i + j for j in range(4)] for i in range(rows - 2)]
    lengths = [len(p) for p in prompts]
    attn = TorchAttention(kv, rows, sum(lengths), None, DEV)
    attn.fill([SeqSlice(p, n, n) for p, n in zip(pages, lengths)])
    ids = torch.tensor([t for p in prompts for t in p], device=DEV)
    with torch.inference_mode():
        x = program.embed_prompt(ids, torch.full_like(ids, -1))
        hidden = program.lm_forward(x, attn.positions[: x.shape[0]], attn)[torch.tensor(lengths, device=DEV).cumsum(0) - 1]
        code0_logits, depth_logits, depth_codes = [], [], []
        vocab = program.cfg.talker.vocab_size - 1024
        sampling = SamplingTensors.empty(rows, DEV)  # greedy
        for step in range(frames):
            code0_logits.append(program.talker.codec_head(hidden).float())
            code0 = torch.randint(0, vocab, (rows,), generator=g).to(DEV)
            logits: list[torch.Tensor] = []
            if program.fused is not None:
                codes = program.fused.generate_depth(hidden, code0, sampling, logits)
            else:
                emb = program.talker.model.codec_embedding(code0)
                codes = program.talker.code_predictor.generate(hidden, emb, code0, sampling, logits)
            depth_logits.append(torch.stack(logits, 1))  # [rows, 15, V]
            depth_codes.append(codes)
            forced = torch.randint(0, program.cfg.talker.predictor_vocab_size, codes.shape, generator=g).to(DEV)
            forced[:, 0] = code0
            text = torch.tensor([p[min(step + 1, len(p) - 1)] for p in prompts], device=DEV)
            if attention == "paged":
                attn = PagedDecodeAttention(kv, rows, len(pages[0]), DEV, use_cuda_graph=False)
            else:
                attn = TorchAttention(kv, rows, rows, None, DEV)
            attn.fill([SeqSlice(p, 1, n + step + 1) for p, n in zip(pages, lengths)])
            x = program.embed_step(text, forced)
            hidden = program.lm_forward(x, attn.positions[:rows], attn)
    return dict(code0=torch.stack(code0_logits), depth=torch.stack(depth_logits), codes=torch.stack(depth_codes))


def same_input_steps(ref: dict, fused: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The predictor logits of the steps whose inputs were equal on both paths: each predictor step feeds
    the next the code it chose, so a frame's steps are compared up to (and with) the first one whose code
    differs. Returns [M, V] rows of each path."""
    rows_ref, rows_fused = [], []
    frames, bsz, steps, _ = ref["depth"].shape
    for f in range(frames):
        for b in range(bsz):
            differ = (ref["codes"][f, b, 1:] != fused["codes"][f, b, 1:]).nonzero()
            last = int(differ[0]) if len(differ) else steps - 1
            rows_ref.append(ref["depth"][f, b, : last + 1])
            rows_fused.append(fused["depth"][f, b, : last + 1])
    return torch.cat(rows_ref), torch.cat(rows_fused)


def compare(ref: torch.Tensor, ours: torch.Tensor) -> dict:
    scale = ref.abs().amax().item()
    return dict(max_abs_err=round((ref - ours).abs().amax().item(), 5), scale=round(scale, 4),
                rel_err=round((ref - ours).abs().amax().item() / scale, 5),
                argmax_agree=round((ref.argmax(-1) == ours.argmax(-1)).float().mean().item(), 4))


def greedy_frames(program, checkpoint: str, path: str, requests: int, frames: int) -> list[list[list[int]]]:
    core = EngineCore(EngineConfig(model="qwen3-tts", checkpoint=checkpoint, device=DEV.type, frame_path=path,
                                   dtype="bfloat16", max_batch_size=8, max_seq_len=1024), program=program)
    core.warmup()
    reqs = [core.submit(SubmitRequest(f"g{i}", core.info.voices[i % len(core.info.voices)],
                                      SamplingParams(greedy=True, num_frames=frames), TEXTS[i % 2], True))
            for i in range(requests)]
    while core.has_work():
        core.step()
    out = [[list(f) for f in r.frames] for r in reqs]
    del core
    torch.cuda.empty_cache()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-rel-err", type=float, default=0.05)
    ap.add_argument("--min-argmax-agree", type=float, default=0.97)
    ap.add_argument("--pdl", choices=("on", "off"), default="on", help="on: where the GPU has it (sm90+)")
    ap.add_argument("--max-pdl-rel-err", type=float, default=0.03)
    ap.add_argument("--l2-prefetch", choices=("on", "env"), default="env",
                    help="on: every product prefetches the next one's weight (kernels.set_l2_prefetch)")
    ap.add_argument("--skinny", choices=("on", "env"), default="env",
                    help="on: the tensor-core product at 5..128 rows (kernels.set_skinny; --requests >= 5 runs it)")
    ap.add_argument("--tf-rows", type=int, default=2, help="rows of the teacher-forced frames (2; above 4 the "
                    "products run cuBLAS or, with --skinny on, the split-K tensor-core product)")
    ap.add_argument("--tf-attention", choices=("torch", "paged"), default="torch",
                    help="the teacher-forced decode steps' attention: torch (the reference's) or paged (our paged "
                         "decode kernel on both paths, with the fused path's rotary inside it where "
                         "VOXRT_PAGED_DECODE_ROPE=on)")
    ap.add_argument("--decode-attention", default="",
                    help="comma-separated decode kernels (runtime/attention.py DECODE_KERNELS): the fused "
                         "path's greedy run once with each, against the reference's on the default kernel")
    args = ap.parse_args()
    set_pdl(None if args.pdl == "on" else False)  # on: VOXRT_PDL's rule (default auto: <= 4 rows, sm90+)
    set_l2_prefetch(True if args.l2_prefetch == "on" else None)
    set_skinny(True if args.skinny == "on" else None)
    program = build_program("qwen3-tts", args.checkpoint).to(device=DEV, dtype=torch.bfloat16).eval()
    program.use_frame_path("reference", DEV)
    if not 1 <= args.tf_rows <= 30:
        ap.error("--tf-rows takes 1..30")
    ref = teacher_forced(program, args.frames, rows=args.tf_rows, attention=args.tf_attention)
    program.use_frame_path("fused", DEV)
    fused = teacher_forced(program, args.frames, rows=args.tf_rows, attention=args.tf_attention)
    pdl = pdl_enabled(DEV, args.tf_rows)  # the teacher-forced frames' rows (VOXRT_PDL=auto decides by them)
    result = dict(gpu=torch.cuda.get_device_name() if DEV.type == "cuda" else "cpu (dry run)", kernels=program.fused.impl,
                  pdl=pdl, l2_prefetch=l2_prefetch_enabled(DEV), skinny=skinny_enabled(DEV), tf_rows=args.tf_rows,
                  tf_attention=args.tf_attention, paged_decode_rope=knobs.paged_decode_rope(),
                  predictor_qkv_table=program.fused.step_qkv_tables is not None,
                  glue_kernels=program.fused.glue_kernels,
                  code0_logits=compare(ref["code0"], fused["code0"]),
                  predictor_logits=compare(*same_input_steps(ref, fused)),
                  predictor_codes_equal=round((ref["codes"] == fused["codes"]).float().mean().item(), 4))
    if pdl:
        set_pdl(False)
        plain = teacher_forced(program, args.frames, rows=args.tf_rows, attention=args.tf_attention)
        set_pdl(None)
        result["pdl_on_vs_off"] = dict(code0_logits=compare(plain["code0"], fused["code0"]),
                                       predictor_logits=compare(*same_input_steps(plain, fused)))
    print(json.dumps(result), flush=True)
    kernels = [k for k in args.decode_attention.split(",") if k] or [decode_kernel()]
    unknown = set(kernels) - set(DECODE_KERNELS)
    if unknown:
        ap.error(f"unknown decode kernels {sorted(unknown)}; expected some of {', '.join(DECODE_KERNELS)}")
    gen = {"reference": greedy_frames(program, args.checkpoint, "reference", args.requests, args.frames)}
    for kernel in kernels:
        set_decode_kernel(kernel)
        gen[f"fused/{kernel}"] = greedy_frames(program, args.checkpoint, "fused", args.requests, args.frames)
    set_decode_kernel(None)
    result["greedy_by_decode_kernel"] = {}
    for kernel in kernels:
        equal_prefix, equal_codes, total = [], 0, 0
        for a, b in zip(gen["reference"], gen[f"fused/{kernel}"]):
            n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
            equal_prefix.append(n)
            equal_codes += sum(x == y for fa, fb in zip(a, b) for x, y in zip(fa, fb))
            total += sum(len(f) for f in a)
        greedy = dict(requests=args.requests, frames=args.frames, decode_attention=kernel,
                      equal_frames_before_first_difference=equal_prefix, codes_equal=round(equal_codes / total, 4))
        result["greedy_by_decode_kernel"][kernel] = greedy
        print(json.dumps(greedy), flush=True)
    result["greedy"] = result["greedy_by_decode_kernel"][kernels[0]]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fused-check.json"), "w") as f:
        json.dump(result, f, indent=2)
    ok = all(result[k]["rel_err"] <= args.max_rel_err and result[k]["argmax_agree"] >= args.min_argmax_agree
             for k in ("code0_logits", "predictor_logits"))
    print(f"fused path (PDL {'on' if pdl else 'off'}) {'AGREES with' if ok else 'DIFFERS from'} the reference path "
          f"(teacher-forced logits: rel err <= {args.max_rel_err}, argmax agreement >= {args.min_argmax_agree})")
    if pdl:
        pdl_ok = all(v["rel_err"] <= args.max_pdl_rel_err for v in result["pdl_on_vs_off"].values())
        print(f"fused path with PDL {'AGREES with' if pdl_ok else 'DIFFERS from'} itself without (teacher-forced "
              f"logits: rel err <= {args.max_pdl_rel_err}): {json.dumps(result['pdl_on_vs_off'])}")
        ok = ok and pdl_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
