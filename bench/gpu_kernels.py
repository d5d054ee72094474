"""Per-kernel timings of the fused frame's building blocks on the GPU, against cuBLAS, at decode shapes.

Each case is captured in a CUDA graph of REPS calls and replayed (the frame runs as graphs, so launch overhead
is the graph's, not Python's); the figure is the time per call. Projections of the 1.7B talker and code
predictor at 1-64 rows: cuBLAS (`F.linear`, `addmm_`) against kernels/gemv.py at BLOCK_K 128 / 256 / 512,
with the bandwidth each reaches; the predictor's attention kernel per query head and per KV group; the
sampler per threshold search and warps. With `--only paged` (not in the default set), the talker's paged decode
attention (kernels/paged_decode.py) per tokens a round, warps and stages, at 1-128 rows and KV context 128 / 512,
each config checked against the torch rule (bench/pick_tuned.py reads the fastest off kernels.json). Prints one
table.

    python bench/gpu_kernels.py --out DIR
    python bench/gpu_kernels.py --only paged,sampler --out DIR
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels import gemv
from voxrt.engine.runtime.kernels.depth_attention import depth_attention
from voxrt.engine.runtime.kernels.rope import rope_inv_freq
from voxrt.engine.runtime.kernels.sampling import SEARCHES, sample_codes

DEV = torch.device("cuda")
REPS = 20
SHAPES = {"pred.qkv": (4096, 1024), "pred.o": (1024, 2048), "pred.gate_up": (6144, 1024), "pred.down": (1024, 3072),
          "pred.head": (2048, 1024), "talk.qkv": (4096, 2048), "talk.o": (2048, 2048), "talk.gate_up": (12288, 2048),
          "talk.down": (2048, 6144)}


def graph_us(fn) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(REPS):
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (10 * REPS)


def products(rows: list[int]) -> list[dict]:
    out = []
    for name, (n, k) in SHAPES.items():
        w = torch.randn(n, k, device=DEV, dtype=torch.bfloat16) * 0.02
        gb = n * k * 2 / 1e9
        for m in rows:
            x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
            res = torch.randn(m, n, device=DEV, dtype=torch.bfloat16)
            row = dict(shape=name, n=n, k=k, rows=m, cublas_us=round(graph_us(lambda: F.linear(x, w)), 2),
                       cublas_addmm_us=round(graph_us(lambda: res.addmm_(x, w.t())), 2))
            if m <= 8:
                for bk in (128, 256, 512):
                    o = torch.empty(m, n, device=DEV, dtype=torch.bfloat16)
                    row[f"gemv_bk{bk}_us"] = round(graph_us(lambda: gemv._launch(x, w, o, False, bk)), 2)
                    row[f"gemv_res_bk{bk}_us"] = round(graph_us(lambda: gemv._launch(x, w, res, True, bk)), 2)
                ref = F.linear(x, w).float()
                o = torch.empty(m, n, device=DEV, dtype=torch.bfloat16)
                gemv._launch(x, w, o, False, 256)
                row["gemv_max_rel_err"] = round(((o.float() - ref).abs().max() / ref.abs().max()).item(), 5)
            best = min(v for key, v in row.items() if key.endswith("_us"))
            row["best_tb_s"] = round(gb / (best * 1e-6) / 1e3, 2)
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def attention(batches: list[int]) -> list[dict]:
    out = []
    hq, hkv, d, hidden = 16, 8, 128, 1024
    qw, kw = torch.ones(d, device=DEV), torch.ones(d, device=DEV)
    inv = rope_inv_freq(d, 1e6, DEV)
    for b in batches:
        qkv = torch.randn(b, (hq + 2 * hkv) * d, device=DEV, dtype=torch.bfloat16)
        x = torch.randn(b, hidden, device=DEV, dtype=torch.bfloat16)
        kc = torch.randn(b, hkv, 16, d, device=DEV, dtype=torch.bfloat16)
        vc = torch.randn(b, hkv, 16, d, device=DEV, dtype=torch.bfloat16)
        row = dict(batch=b)
        for nh in (1, 2):
            for warps in (1, 2, 4):
                row[f"attn_heads{nh}_w{warps}_us"] = round(graph_us(lambda: depth_attention(
                    qkv, hq, hkv, d, qw, kw, inv, 1e-6, kc, vc, 8, 1, "triton", x=x, heads_per_program=nh,
                    num_warps=warps)), 2)
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def paged(batches: list[int], contexts=(128, 512)) -> list[dict]:
    """The talker's decode attention over the paged KV cache (kernels/paged_decode.py: 16 query heads over 8 KV
    heads of 128, pages of 16 tokens scattered over the cache): us a layer per (tokens a round, warps, stages),
    each checked against the torch rule; `default` is the committed config (kernels/paged_decode.py `kernel_config`)."""
    from voxrt.engine.runtime.kernels.paged_decode import paged_decode_attention  # noqa: PLC0415

    out = []
    hq, hkv, d, ps = 16, 8, 128, 16
    for ctx in contexts:
        for b in batches:
            pages_per = -(-(ctx + 1) // ps)
            num_pages = b * pages_per + 1
            cache = torch.randn(num_pages + 1, 2, ps, hkv, d, device=DEV, dtype=torch.bfloat16)
            order = torch.randperm(num_pages, device=DEV)[: b * pages_per].to(torch.int32)
            indptr = torch.arange(0, b * pages_per + 1, pages_per, device=DEV, dtype=torch.int32)
            last = torch.full((b,), ctx + 1 - (pages_per - 1) * ps, device=DEV, dtype=torch.int32)
            q = torch.randn(b, hq, d, device=DEV, dtype=torch.bfloat16)
            want = paged_decode_attention(q, cache, indptr, order, last, impl="torch").float()
            row = dict(context=ctx, batch=b, kv_mb=round(b * (ctx + 1) * hkv * d * 2 * 2 / 1e6, 2))
            configs = [(None, None, None)] + [(bt, w, st) for bt in (32, 64, 128) for w in (2, 4, 8)
                                              for st in (1, 2, 3)]
            for bt, w, st in configs:
                tag = "default" if bt is None else f"bt{bt}_w{w}_s{st}"
                fn = lambda: paged_decode_attention(q, cache, indptr, order, last, impl="triton",  # noqa: E731
                                                    block_t=bt, num_warps=w, num_stages=st)
                try:
                    err = ((fn().float() - want).abs().max() / want.abs().max()).item()
                    if err > 2e-2:
                        row.setdefault("MISMATCH", []).append(f"{tag}:{err:.3g}")
                    row[f"{tag}_us"] = round(graph_us(fn), 2)
                except Exception as e:  # noqa: BLE001 (a config that does not compile: recorded, the sweep goes on)
                    row.setdefault("FAILED", []).append(f"{tag}: {type(e).__name__}")
            timed = {k: v for k, v in row.items() if k.endswith("_us") and k != "default_us"}
            if timed:
                best = min(timed, key=timed.get)
                row["best"] = best[:-3]
                row["best_tb_s"] = round(row["kv_mb"] / timed[best], 3)
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def sampler(batches: list[int]) -> list[dict]:
    """Per vocabulary and batch: us a draw per rule, threshold search and warps; every Triton draw checked equal
    to the torch rule's on the same uniforms."""
    out = []
    for vocab in (2048, 3072):
        for b in batches:
            logits = torch.randn(b, vocab, device=DEV, dtype=torch.bfloat16) * 3
            uniform = torch.rand(b, vocab, device=DEV)
            codes = torch.empty(b, dtype=torch.int64, device=DEV)
            want = torch.empty(b, dtype=torch.int64, device=DEV)
            row = dict(vocab=vocab, batch=b)
            for label, k, p, greedy in (("greedy", 0, 1.0, True), ("temp", 0, 1.0, False), ("topk50", 50, 1.0, False),
                                        ("topk50_topp0.9", 50, 0.9, False)):
                params = (torch.full((b,), 0.9, device=DEV), torch.full((b,), k, device=DEV, dtype=torch.int64),
                          torch.full((b,), p, device=DEV), torch.full((b,), greedy, device=DEV, dtype=torch.bool))
                sample_codes(logits, uniform, *params, want, impl="torch")
                # the threshold searches (kernels/sampling.py): `rounds` keeps the rows' old labels; the others
                # only where there is a threshold to find (greedy and temperature-only rows never search)
                for search in SEARCHES if k or p < 1.0 else ("rounds",):
                    tag = label if search == "rounds" else f"{label}_{search}"
                    for warps in (None, 1, 2, 4, 8):
                        fn = lambda: sample_codes(logits, uniform, *params, codes, impl="triton",  # noqa: E731
                                                  num_warps=warps, search=search)
                        codes.fill_(-1)
                        fn()
                        torch.cuda.synchronize()
                        if not torch.equal(codes, want):  # recorded, not raised: the timing table still prints
                            row.setdefault("MISMATCH", []).append(f"{tag}_w{warps or 'auto'}")
                        row[f"{tag}_w{warps or 'auto'}_us"] = round(graph_us(fn), 2)
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--only", default="", help="comma-separated: products, attention, paged, sampler (default: "
                    "all but paged)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else {"products", "attention", "sampler"}
    results = dict(gpu=torch.cuda.get_device_name(),
                   products=products([1, 2, 4, 8, 64]) if "products" in only else [],
                   attention=attention([1, 8, 16, 64, 128]) if "attention" in only else [],
                   paged=paged([1, 8, 64, 128]) if "paged" in only else [],
                   sampler=sampler([1, 64]) if "sampler" in only else [])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "kernels.json"), "w") as f:
        json.dump(results, f, indent=2)
    keys = ["cublas_us", "cublas_addmm_us", "gemv_bk128_us", "gemv_bk256_us", "gemv_bk512_us", "gemv_res_bk256_us",
            "best_tb_s"]
    if results["products"]:
        print(f"\n{'shape':>14} {'rows':>5} " + " ".join(f"{k:>17}" for k in keys))
    for row in results["products"]:
        print(f"{row['shape']:>14} {row['rows']:>5} " + " ".join(f"{row.get(k, '-'):>17}" for k in keys))
    for row in results["attention"] + results["sampler"]:
        print(row)


if __name__ == "__main__":
    main()
