"""The frame's products on the GPU: the L2 prefetch of the next weight and the tensor-core product for 5..128
rows against what the fused path runs today (issue 12), without a checkpoint (random weights of the 1.7B's
shapes; a product's cost does not depend on the values).

1. Chains, as the frame runs them (kernels/gemv.py's functions, in CUDA graphs, median of 20 replays): the code
   predictor's 15 steps x 5 layers (qkv, o_proj + residual, gate_up with the rstd, down with the SiLU +
   residual) + its head, and the talker's 28 layers, at 1 / 8 / 32 / 64 / 128 rows; the attention and sampling
   kernels left out. Variants: base (gemv at <= 4 rows where it measured faster, cuBLAS beyond), l2 (every
   product prefetches the next one's weight into the L2), skinny (the tensor-core product at 5..128 rows),
   l2+skinny. Each variant's output is compared with base's.
2. The tensor-core product alone per projection shape and row count, at several tile configs, against
   cuBLAS (`F.linear`), each a chain of 20 calls in one graph: which config to plan.

    python bench/gpu_gemv_sweep.py --out DIR [--rows 1,8,32,64,128] [--only chains,configs]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from graph_timing import graph_ms

from voxrt.engine.runtime import kernels
from voxrt.engine.runtime.kernels import gemv

DEV = torch.device("cuda")
DT = torch.bfloat16
PRED = dict(hidden=1024, inter=3072, qkv=4096, attn=2048, layers=5, vocab=2048, steps=15)
TALK = dict(hidden=2048, inter=6144, qkv=4096, attn=2048, layers=28)
SHAPES = {"pred.qkv": (4096, 1024), "pred.o": (1024, 2048), "pred.gate_up": (6144, 1024), "pred.down": (1024, 3072),
          "pred.head": (2048, 1024), "talk.qkv": (4096, 2048), "talk.o": (2048, 2048), "talk.gate_up": (12288, 2048),
          "talk.down": (2048, 6144)}
VARIANTS = {"base": (False, False), "l2": (True, False), "skinny": (False, True), "l2+skinny": (True, True)}
CONFIGS = [  # (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages); None: skinny_plan's
    None, (16, 32, 128, 4, 3), (16, 64, 128, 4, 4), (32, 32, 128, 4, 3), (64, 32, 128, 4, 3), (64, 64, 64, 4, 4),
    (64, 32, 256, 4, 2), (64, 64, 128, 8, 3), (128, 32, 128, 8, 3), (128, 64, 64, 8, 3),
]


def _w(n: int, k: int) -> torch.Tensor:
    return (torch.randn(n, k, device=DEV, dtype=DT) / k ** 0.5).contiguous()


def layer_weights(cfg: dict) -> list[dict]:
    h, i = cfg["hidden"], cfg["inter"]
    return [dict(qkv=_w(cfg["qkv"], h), o=_w(h, cfg["attn"]), gate_up=_w(2 * i, h), down=_w(h, i))
            for _ in range(cfg["layers"])]


def chain(layers: list[dict], rows: int, steps: int, head: torch.Tensor | None):
    """The products of `steps` passes over `layers` (+ `head` after each pass) in the frame's order, each told
    the next one's weight; returns a function that runs them and returns the residual stream."""
    h = layers[0]["o"].shape[0]
    g = torch.Generator(device=DEV).manual_seed(rows)  # the same inputs for every variant (they are compared)
    attn_in = torch.randn(rows, layers[0]["o"].shape[1], device=DEV, dtype=DT, generator=g) * 0.1  # for attention
    x0 = torch.randn(rows, h, device=DEV, dtype=DT, generator=g)
    x = x0.clone()

    def run():
        x.copy_(x0)
        for _ in range(steps):
            for j, layer in enumerate(layers):
                after = layers[j + 1]["qkv"] if j + 1 < len(layers) else (head if head is not None else layers[0]["qkv"])
                gemv.linear(x, layer["qkv"], "triton", prefetch=layer["o"])
                gemv.add_linear_(x, attn_in, layer["o"], "triton", prefetch=layer["gate_up"])
                gemv.add_gated_mlp_(x, layer["gate_up"], layer["down"], 1e-6, "triton", prefetch=after)
                x.mul_(0.5)  # keeps the stream bounded over 75 layers (one tiny kernel, the same in every variant)
            if head is not None:
                gemv.linear(x, head, "triton", prefetch=layers[0]["qkv"])
        return x
    return run


def chains(rows_list: list[int]) -> list[dict]:
    out = []
    pred, talk = layer_weights(PRED), layer_weights(TALK)
    head = _w(PRED["vocab"], PRED["hidden"])
    for name, layers, steps, hd in (("predictor 15 steps", pred, PRED["steps"], head), ("talker step", talk, 1, None)):
        for rows in rows_list:
            ref = None
            for variant, (l2, skinny) in VARIANTS.items():
                if skinny and rows <= gemv.MAX_ROWS:
                    continue  # the tensor-core product takes 5..128 rows only
                kernels.set_l2_prefetch(l2)
                kernels.set_skinny(skinny)
                try:
                    fn = chain(layers, rows, steps, hd)
                    ms = graph_ms(fn)
                    y = fn().float().clone()
                finally:
                    kernels.set_l2_prefetch(None)
                    kernels.set_skinny(None)
                err = 0.0 if ref is None else ((y - ref).abs().max() / ref.abs().max().clamp(min=1e-6)).item()
                ref = y if ref is None else ref
                row = dict(chain=name, rows=rows, variant=variant, ms=round(ms, 4), rel_err_vs_base=round(err, 5))
                out.append(row)
                print(row, flush=True)
    return out


def configs(rows_list: list[int]) -> list[dict]:
    out = []
    reps = 20
    for name, (n, k) in SHAPES.items():
        ws = [_w(n, k) for _ in range(4)]  # 4 weights in turn: the chain does not run from the L2 alone
        for m in rows_list:
            if m <= gemv.MAX_ROWS:
                continue
            x = torch.randn(m, k, device=DEV, dtype=DT)
            y = torch.empty(m, n, device=DEV, dtype=DT)
            ref = F.linear(x, ws[0]).float()
            cublas = graph_ms(lambda: [F.linear(x, ws[i % 4], out=y) for i in range(reps)]) * 1e3 / reps
            row = dict(shape=name, n=n, k=k, rows=m, cublas_us=round(cublas, 2), plan=gemv.skinny_plan(m, n, k))
            best = None
            for cfg in CONFIGS:
                label = "planned" if cfg is None else "x".join(map(str, cfg))
                pre = dict(next_ptr=ws[0], next_lines=0, PREFETCH=False)

                def run(cfg=cfg):
                    for i in range(reps):
                        gemv._launch_skinny(x, ws[i % 4], y, False, None, False, pre, cfg)
                try:
                    us = graph_ms(run) * 1e3 / reps
                    gemv._launch_skinny(x, ws[0], y, False, None, False, pre, cfg)
                    err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
                except Exception as exc:  # noqa: BLE001 (a config this Triton cannot compile: report it)
                    row[label] = f"error {type(exc).__name__}"
                    continue
                row[label] = round(us, 2)
                if err > 0.02:
                    row[label + "_err"] = round(err, 4)
                elif best is None or us < best[1]:
                    best = (label, us)
            row["best"] = best[0] if best else None
            row["best_us"] = round(best[1], 2) if best else None
            row["gb_per_s_best"] = round(n * k * 2 / (best[1] * 1e-6) / 1e9, 1) if best else None
            out.append(row)
            print(row, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--rows", default="1,8,32,64,128")
    ap.add_argument("--only", default="chains,configs")
    ap.add_argument("--l2-mb", type=float, default=None, help="the prefetch's cap (default kernels.L2_PREFETCH_CAP_MB)")
    args = ap.parse_args()
    if args.l2_mb is not None:
        kernels.set_l2_prefetch(None, cap_mb=args.l2_mb)
    rows = [int(r) for r in args.rows.split(",")]
    result = dict(gpu=torch.cuda.get_device_name(), l2_cap_mb=kernels.L2_PREFETCH_CAP_MB)
    if "chains" in args.only:
        result["chains"] = chains(rows)
    if "configs" in args.only:
        result["configs"] = configs(rows)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gemv_sweep.json"), "w") as f:
        json.dump(result, f, indent=1)
    ok = True
    if "chains" in result:
        print(f"\n== chains of the frame's products ({result['gpu']}, L2 prefetch cap {result['l2_cap_mb']} MB), ms")
        for r in result["chains"]:
            bad = r["rel_err_vs_base"] > 0.03
            ok = ok and not bad
            print(f"  {r['chain']:<20} rows {r['rows']:>4} {r['variant']:<10} {r['ms']:>8.4f}  "
                  f"err {r['rel_err_vs_base']:.1e}{'  MISMATCH' if bad else ''}")
    if "configs" in result:
        print("\n== the tensor-core product per shape: cuBLAS us, skinny_plan's us, the best config")
        for r in result["configs"]:
            print(f"  {r['shape']:<13} rows {r['rows']:>4}  cublas {r['cublas_us']:>7}  plan {r['plan']} "
                  f"{r.get('planned')}  best {r['best']} {r['best_us']} us ({r['gb_per_s_best']} GB/s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
