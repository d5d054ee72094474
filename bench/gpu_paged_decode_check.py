"""GPU check of the paged decode kernel (runtime/kernels/paged_decode.py) against its torch reference and
FlashInfer's decode, through the contexts the engine builds (PagedDecodeAttention, FlashInferAttention):
Qwen3-TTS talker heads (16 q / 8 KV of 128), bf16, pages of 16 scattered over the cache, per batch and KV
context. Prints the max abs error of each against the torch reference and exits 1 past --max-abs-err.

    python bench/gpu_paged_decode_check.py [--batches 1,8,64,128] [--contexts 1,17,128,512,2000]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from voxrt.engine.runtime.attention import (FlashInferAttention, KVCache, PagedDecodeAttention, SeqSlice,
                                            set_decode_kernel)
from voxrt.engine.runtime.kernels.paged_decode import paged_decode_attention


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,64,128")
    ap.add_argument("--contexts", default="1,17,128,512,2000")
    ap.add_argument("--max-abs-err", type=float, default=2e-2)
    args = ap.parse_args()
    dev, ps, hq, hkv, d = torch.device("cuda"), 16, 16, 8, 128
    set_decode_kernel("cuda-cores")  # FlashInfer's own decode kernel at every batch (auto names ours above 8 rows)
    g = torch.Generator().manual_seed(0)
    worst, rows = 0.0, []
    ws = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device=dev)
    for bsz in (int(b) for b in args.batches.split(",")):
        for ctx in (int(c) for c in args.contexts.split(",")):
            pages_per = -(-ctx // ps)
            kv = KVCache(1, bsz * pages_per + 1, ps, hkv, d, dev, torch.bfloat16)
            kv.layers[0].normal_()
            order = torch.randperm(bsz * pages_per, generator=g).tolist()
            seqs = [SeqSlice(order[i * pages_per : (i + 1) * pages_per], 1, ctx) for i in range(bsz)]
            q = torch.randn(bsz, hq, d, device=dev, dtype=torch.bfloat16)
            ours = PagedDecodeAttention(kv, bsz, pages_per, dev, use_cuda_graph=False)
            ours.fill(seqs)
            got = ours.attend(0, q)
            ref = paged_decode_attention(q, kv.layers[0], *ours._views, impl="torch")
            fi = FlashInferAttention(kv, bsz, bsz, pages_per, dev, hq, hkv, d, True, False, ws)
            fi.fill(seqs)
            flash = fi.attend(0, q)
            torch.cuda.synchronize()
            err = (got.float() - ref.float()).abs().max().item()
            err_fi = (flash.float() - ref.float()).abs().max().item()
            worst = max(worst, err)
            rows.append(dict(batch=bsz, context=ctx, ours_vs_torch=round(err, 5), flashinfer_vs_torch=round(err_fi, 5)))
            print(json.dumps(rows[-1]), flush=True)
    ok = worst <= args.max_abs_err
    print(f"paged decode kernel {'AGREES with' if ok else 'DIFFERS from'} the torch reference "
          f"(max abs err {worst:.5f}, bound {args.max_abs_err})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
