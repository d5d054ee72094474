"""Does programmatic dependent launch (PDL) shorten a chain of small dependent kernels in a CUDA graph?
(issue 12: at batch 1 a frame is ~745 kernels of a few microseconds each.)

    python bench/gpu_pdl.py --out DIR

A chain of STEPS matrix-vector products y <- W_i y (a distinct 1024 x K weight per step, bf16, 2-6 MB each:
the chain's weights exceed the L2, as in a frame), captured in one CUDA graph, median of 20 replays, per kernel:
  cublas        torch.mv
  triton        a row-major gemv (the frame's kernel shape), launched plainly
  pdl           the same with launch_pdl=True: griddepcontrol.wait before reading y, launch_dependents at once
  pdl-prefetch  launch_pdl, and the weight tile is loaded BEFORE the wait (weights do not depend on the
                previous kernel), so the next kernel streams its weights while the previous one finishes
All variants' final y are compared with cublas's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl
from graph_timing import graph_ms


@triton.jit
def _mv(x_ptr, w_ptr, out_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr, PDL: tl.constexpr,
        PREFETCH: tl.constexpr):
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, K)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    if PREFETCH:
        w = tl.load(w_ptr + rn[:, None] * K + rk[None, :])
        if PDL:
            tl.extra.cuda.gdc_wait()
        x = tl.load(x_ptr + rk)
    else:
        if PDL:
            tl.extra.cuda.gdc_wait()
        x = tl.load(x_ptr + rk)
        w = tl.load(w_ptr + rn[:, None] * K + rk[None, :])
    y = tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], axis=1) * (1.0 / 32.0)
    tl.store(out_ptr + rn, y.to(out_ptr.dtype.element_ty))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=96)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    rows = []
    ok = True
    for k in (1024, 2048):
        n = k  # square: y stays the same length through the chain
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(args.steps)]
        ys = [torch.empty(n, device="cuda", dtype=torch.bfloat16) for _ in range(args.steps + 1)]
        x0 = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        block_n = 8 if k == 1024 else 4

        def chain(variant):
            def run():
                ys[0].copy_(x0)
                for i, w in enumerate(ws):
                    if variant == "cublas":
                        torch.mv(w, ys[i], out=ys[i + 1])
                        ys[i + 1].mul_(1.0 / 32.0)
                    else:
                        pdl = variant.startswith("pdl")
                        _mv[(n // block_n,)](ys[i], w, ys[i + 1], n, K=k, BLOCK_N=block_n, PDL=pdl,
                                             PREFETCH=variant == "pdl-prefetch", num_warps=4,
                                             **({"launch_pdl": True} if pdl else {}))
                return ys[-1]
            return run

        ref = None
        for variant in ("cublas", "triton", "pdl", "pdl-prefetch"):
            try:
                fn = chain(variant)
                ms = graph_ms(fn)
                y = fn().float().clone()
                torch.cuda.synchronize()
                err = 0.0 if ref is None else ((y - ref).abs().max() / ref.abs().max().clamp(min=1e-6)).item()
                if ref is None:
                    ref = y
                kernels = args.steps * (2 if variant == "cublas" else 1)
                row = dict(k=k, variant=variant, chain_ms=round(ms, 4), us_per_step=round(ms * 1e3 / args.steps, 2),
                           kernels=kernels, rel_err_vs_cublas=err,
                           gb_per_s=round(n * k * 2 * args.steps / (ms * 1e-3) / 1e9, 1))
                ok = ok and err < 0.05
            except Exception as exc:  # noqa: BLE001 -- report which variant this Triton/driver cannot run
                row = dict(k=k, variant=variant, error=f"{type(exc).__name__}: {exc}"[:300])
            rows.append(row)
            print(row, flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "pdl.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), triton=triton.__version__, steps=args.steps, rows=rows),
                  f, indent=1)
    print(f"\n== PDL chain: {args.steps} dependent gemvs in one CUDA graph ({torch.cuda.get_device_name()})")
    for r in rows:
        if "error" in r:
            print(f"  K {r['k']:>5} {r['variant']:<13} ERROR {r['error']}")
        else:
            print(f"  K {r['k']:>5} {r['variant']:<13} {r['us_per_step']:>7.2f} us/step  {r['gb_per_s']:>7.1f} GB/s"
                  f"  err {r['rel_err_vs_cublas']:.1e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
