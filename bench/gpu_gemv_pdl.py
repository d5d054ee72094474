"""PDL and the product's grid in the frame's product chains, on the whole GPU and on the LM's partition (issue 12).

The batch-1 frame is ~650 kernels, 417 of them kernels/gemv.py's products (2.6 of 3.9 ms). A chain of
dependent products measured 3.05 us a 2 MB product plainly and 1.60 with PDL (bench/gpu_pdl.py, whole GPU),
yet the frame with PDL was 2.7x SLOWER (bench/results/2026-12-02-frame), measured only on the LM's 60-SM
green-context partition. This script separates the two: the frame's product chains (gpu_gemv_sweep.chain: the
code predictor's 15 steps x 5 layers + head, the talker's 28 layers; attention and sampling left out), CUDA
graphs, median of 20 replays, per variant:

  programs   gemv.TARGET_PROGRAMS (the grid: programs per product; 256 is ~2 per SM of 132)
  first      gemv.PREFETCH_ELEMENTS (with PDL, the weight elements a program loads before its wait)
  pdl        launch with PDL (kernels.set_pdl)
  skinny     the tensor-core product for 5..128 rows instead of cuBLAS (kernels.set_skinny), split over K by
             its plan (skinny-nosplit: not; skinny-split4: at most 4 splits)

on the whole GPU and on a green-context partition of LM_SMS SMs (the engine's LM lane). Each variant's output
is compared with the base variant's on the same stream (PDL must not change a bit: same kernels, same order).
Then the tensor-core product alone per shape and config at 8 and 64 rows, over more weights than the L2 holds,
and per flag (why it was 2-3x slower in the chains than alone, bench/results/2026-12-03-frame-l2, where the
product alone turned 4 weights that the L2 kept).

    python bench/gpu_gemv_pdl.py --out DIR [--rows 1,8,64] [--lm-sms 60] [--only chains,partition,skinny]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
from gpu_gemv_sweep import PRED, TALK, _w, chain, layer_weights
from graph_timing import graph_ms

from voxrt.engine.runtime import kernels
from voxrt.engine.runtime.kernels import gemv

DEV = torch.device("cuda")
DT = torch.bfloat16
# name: products' grid (TARGET_PROGRAMS), first tile with PDL (PREFETCH_ELEMENTS) and without (PLAIN_FIRST_ELEMENTS,
# 0: an ordinary tile), PDL, the tensor-core product at 5..128 rows, its config (None: skinny_plan's)
def _v(programs=256, first=8192, plain_first=0, pdl=False, skinny=False, skinny_config=None, pipe=False, warps=4,
       splitk=16):
    return dict(programs=programs, first=first, plain_first=plain_first, pdl=pdl, skinny=skinny,
                skinny_config=skinny_config, pipe=pipe, warps=warps, splitk=splitk)


GEMV_VARIANTS = {
    "base": _v(),
    "p512": _v(programs=512),
    "one16k": _v(plain_first=16384),  # without PDL, the slice's first 16K elements in one load
    "one16k-p512": _v(programs=512, plain_first=16384),
    "pdl": _v(pdl=True),
    "pdl-ordinary": _v(first=0, pdl=True),  # PDL with the loop's tile first (no wide tile: 2026-12-05-frame-pdl)
    "pdl-ordinary-p512": _v(programs=512, first=0, pdl=True),
    "pdl-first16k": _v(first=16384, pdl=True),
    "pdl-first32k": _v(first=32768, pdl=True),
    "pdl-first16k-p512": _v(programs=512, first=16384, pdl=True),
    "pdl-p128": _v(programs=128, pdl=True),
    # the loop's bytes in flight (without PDL): the loop's next tile loaded before this tile's products (pipe),
    # the whole slice of the predictor's products in one load (one16k / one32k: up to 32 / 64 KB a program),
    # 8 warps a program
    "pipe": _v(pipe=True),
    "pipe-p512": _v(programs=512, pipe=True),
    "one32k": _v(plain_first=32768),
    "one16k-pipe": _v(plain_first=16384, pipe=True),
    "w8": _v(warps=8),
    "pipe-w8": _v(pipe=True, warps=8),
    "one16k-w8": _v(plain_first=16384, warps=8),
}
GEMV_VARIANTS.update({  # PDL on top of the pipelined loop (its first tile before the wait)
    "pdl-pipe": _v(first=0, pdl=True, pipe=True),
    "pdl-pipe-w8": _v(first=0, pdl=True, pipe=True, warps=8),
    "pdl-pipe-p512": _v(programs=512, first=0, pdl=True, pipe=True),
    "pdl-first16k-pipe": _v(first=16384, pdl=True, pipe=True),
})
PDL_VARIANTS = ("base", "pipe-w8", "pipe-p512", "pdl", "pdl-ordinary", "pdl-ordinary-p512", "pdl-first16k",
                "pdl-first16k-p512", "pdl-p128", "pdl-pipe", "pdl-pipe-w8", "pdl-pipe-p512", "pdl-first16k-pipe")
BYTES_IN_FLIGHT_VARIANTS = ("base", "p512", "one16k", "one16k-p512", "pipe", "pipe-p512", "one32k", "one16k-pipe",
                            "w8", "pipe-w8", "one16k-w8")
MANY_ROWS_VARIANTS = {
    "base": _v(),                # cuBLAS beyond 4 rows
    "pdl": _v(pdl=True),         # our kernels between cuBLAS ones with PDL (no product of ours at > 4 rows)
    "skinny": _v(skinny=True),  # split over K by gemv.skinny_split_plan (plain and residual products)
    "skinny-nosplit": _v(skinny=True, splitk=1),
    "skinny-split4": _v(skinny=True, splitk=4),
    "skinny-s5": _v(skinny=True, skinny_config=(64, 32, 128, 4, 5)),
    "skinny-n16": _v(skinny=True, skinny_config=(64, 16, 128, 4, 4)),
    "skinny-pdl": _v(skinny=True, pdl=True),
    "skinny-s5-pdl": _v(skinny=True, pdl=True, skinny_config=(64, 32, 128, 4, 5)),
}
PARTITION_VARIANTS = ("base", "p512", "pdl", "pdl-ordinary", "pdl-p128", "pdl-first16k", "one16k", "skinny",
                      "skinny-pdl")
SKINNY_CONFIGS = [None, (64, 32, 128, 4, 5), (64, 32, 256, 4, 3), (64, 16, 128, 4, 4), (64, 16, 256, 4, 3),
                  (16, 32, 128, 4, 5), (64, 64, 64, 4, 6)]


def _set(v: dict) -> None:
    gemv.TARGET_PROGRAMS = v["programs"]
    gemv.PREFETCH_ELEMENTS = v["first"]
    gemv.PLAIN_FIRST_ELEMENTS = v["plain_first"]
    gemv.SKINNY_CONFIG = v["skinny_config"]
    gemv.PIPELINE = v.get("pipe", False)
    gemv.WARPS = v.get("warps", 4)
    gemv.SKINNY_SPLIT_K = v.get("splitk", 16)
    kernels.set_pdl(v["pdl"])
    kernels.set_skinny(v["skinny"])


def _reset() -> None:
    _set(_v())
    kernels.set_pdl(None)
    kernels.set_skinny(None)


def run_chains(rows_list: list[int], variants_for, stream=None, where: str = "whole GPU") -> list[dict]:
    out = []
    pred, talk = layer_weights(PRED), layer_weights(TALK)
    head = _w(PRED["vocab"], PRED["hidden"])
    for name, layers, steps, hd in (("predictor 15 steps", pred, PRED["steps"], head), ("talker step", talk, 1, None)):
        for rows in rows_list:
            ref = None
            for variant, cfg in variants_for(rows).items():
                _set(cfg)
                try:
                    fn = chain(layers, rows, steps, hd)
                    ms = graph_ms(fn, stream=stream)
                    y = fn().float().clone()  # eagerly, with the variant's launches
                    torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001 (report and go on: one variant must not end the call)
                    row = dict(where=where, chain=name, rows=rows, variant=variant, error=f"{type(exc).__name__}: {exc}"[:300])
                    print(row, flush=True)
                    out.append(row)
                    continue
                finally:
                    _reset()
                if ref is None:
                    ref = y
                err = ((y - ref).abs().max() / ref.abs().max().clamp(min=1e-6)).item()
                bytes_ = sum(t.numel() * t.element_size() for layer in layers for t in layer.values()) * steps
                if hd is not None:
                    bytes_ += hd.numel() * hd.element_size() * steps
                row = dict(where=where, chain=name, rows=rows, variant=variant, ms=round(ms, 4),
                           tb_per_s=round(bytes_ / (ms * 1e-3) / 1e12, 2), rel_err_vs_base=round(err, 5))
                out.append(row)
                print(row, flush=True)
    return out


def split_k_rows(x, ws, nw, y, pre, reps) -> dict:
    """The tensor-core product split over K (kernels/gemv.py: the last program of a tile sums the partials): the
    plan's tiles and splits, then 64-column tiles at 2 / 4 / 8 / 16 splits; and the plan's output checked: against
    F.linear (rel err), the same bits twice, the tile counters back at 0 (a race or a lost partial shows here)."""
    m, k = x.shape
    n = ws[0].shape[0]
    bm, bn, bk, splits = gemv.skinny_split_plan(m, n, k)
    row = {"split_plan": f"{bm}x{bn}x{bk}/{splits}"}
    try:
        row["split_plan_us"] = round(graph_ms(lambda: [gemv._launch_skinny(x, ws[i % nw], y, False, None, False, pre)
                                                       for i in range(reps)]) * 1e3 / reps, 2)
        for s in (2, 4, 8, 16):
            cfg = (bm, 64, bk, 4, 3)
            tiles = -(-m // bm) * -(-n // 64)
            if not gemv.split_k_fits(tiles, s, bm, 64):
                row[f"split{s}_us"] = "n/a (workspace)"
                continue
            try:
                row[f"split{s}_us"] = round(graph_ms(lambda s=s, cfg=cfg: [
                    gemv._launch_skinny(x, ws[i % nw], y, False, None, False, pre, cfg, split_k=s)
                    for i in range(reps)]) * 1e3 / reps, 2)
            except Exception as exc:  # noqa: BLE001 (a config this Triton cannot compile: report it)
                row[f"split{s}_us"] = f"error {type(exc).__name__}"
        ref = torch.nn.functional.linear(x, ws[0]).float()
        outs = []
        for _ in range(3):
            out = torch.empty_like(y)
            gemv._launch_skinny(x, ws[0], out, False, None, False, pre)
            outs.append(out)
        torch.cuda.synchronize()
        row["split_rel_err"] = round(float((outs[0].float() - ref).norm() / ref.norm()), 5)
        row["split_same_bits"] = all(torch.equal(outs[0], o) for o in outs[1:])
        row["split_counters_zero"] = int(gemv.split_k_workspace(x.device)[1].abs().sum()) == 0
    except Exception as exc:  # noqa: BLE001 (report it: one shape must not end the call)
        row["split_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return row


def skinny(rows_list: list[int]) -> list[dict]:
    """The tensor-core product alone per shape, 20 calls over 16 weights in one graph (more than the L2 holds, as
    in a frame; gpu_gemv_sweep.configs turned 4, which the L2 kept), against cuBLAS: per config (plain
    product), then per flag at skinny_plan's config: which of RESIDUAL / RSTD / SILU is slow."""
    out = []
    reps = 20
    for name, (n, k) in {"pred.qkv": (4096, 1024), "pred.o": (1024, 2048), "pred.gate_up": (6144, 1024),
                         "pred.down": (1024, 3072), "talk.qkv": (4096, 2048), "talk.o": (2048, 2048),
                         "talk.gate_up": (12288, 2048), "talk.down": (2048, 6144)}.items():
        nw = max(16, -(-(160 << 20) // (n * k * 2)))  # >= 160 MB of weights in turn
        ws = [_w(n, k) for _ in range(nw)]
        for m in rows_list:
            if m <= gemv.MAX_ROWS:
                continue
            x = torch.randn(m, k, device=DEV, dtype=DT)
            x2 = torch.randn(m, 2 * k, device=DEV, dtype=DT)  # [gate | up] for SILU
            y = torch.empty(m, n, device=DEV, dtype=DT)
            res = torch.randn(m, n, device=DEV, dtype=DT)
            row = dict(shape=name, rows=m, weights_mb=round(nw * n * k * 2 / 2**20))
            row["cublas_us"] = round(graph_ms(lambda: [torch.nn.functional.linear(x, ws[i % nw], out=y)
                                                       for i in range(reps)]) * 1e3 / reps, 2)
            pre = dict(next_ptr=ws[0], next_lines=0, PREFETCH=False)
            for cfg in SKINNY_CONFIGS:  # unsplit, as measured before split-K (2026-12-05-frame-pdl)
                label = "plan" if cfg is None else "x".join(map(str, cfg))
                try:
                    row[label + "_us"] = round(graph_ms(lambda cfg=cfg: [
                        gemv._launch_skinny(x, ws[i % nw], y, False, None, False, pre,
                                            cfg or (*gemv.skinny_plan(m, n, k), 4, 3), split_k=1)
                        for i in range(reps)]) * 1e3 / reps, 2)
                except Exception as exc:  # noqa: BLE001 (a config this Triton cannot compile: report it)
                    row[label + "_us"] = f"error {type(exc).__name__}"
            row.update(split_k_rows(x, ws, nw, y, pre, reps))
            cases = {"residual": lambda i: gemv._launch(x, ws[i % nw], res, residual=True),
                     "rstd": lambda i: gemv._launch(x, ws[i % nw], y, residual=False, rstd_eps=1e-6),
                     "silu+residual": lambda i: gemv._launch(x2, ws[i % nw], res, residual=True, silu=True)}
            for case, fn in cases.items():
                try:
                    row[case + "_us"] = round(graph_ms(lambda fn=fn: [fn(i) for i in range(reps)]) * 1e3 / reps, 2)
                except Exception as exc:  # noqa: BLE001
                    row[case + "_us"] = f"error {type(exc).__name__}"
            out.append(row)
            print(row, flush=True)
        del ws
        torch.cuda.empty_cache()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--rows", default="1,8,64")
    ap.add_argument("--lm-sms", type=int, default=60, help="the partition's SM count (the engine's LM lane: 60)")
    ap.add_argument("--only", default="chains,partition,skinny")
    ap.add_argument("--variants", default="", help="only these variants at <= 4 rows (comma-separated; "
                    "'inflight': the bytes-in-flight set, 'pdl': PDL's)")
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    picked = {"inflight": BYTES_IN_FLIGHT_VARIANTS, "pdl": PDL_VARIANTS}.get(args.variants) or \
        tuple(v for v in args.variants.split(",") if v)
    unknown = [v for v in picked if v not in GEMV_VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {', '.join(GEMV_VARIANTS)}")

    def variants_for(r):
        if r > gemv.MAX_ROWS:
            return MANY_ROWS_VARIANTS
        return {k: GEMV_VARIANTS[k] for k in picked} if picked else GEMV_VARIANTS

    result = dict(gpu=torch.cuda.get_device_name(), sms=torch.cuda.get_device_properties(0).multi_processor_count,
                  variants=GEMV_VARIANTS, cublas_workspace=os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    if "chains" in args.only:
        result["chains"] = run_chains(rows, variants_for)
    if "partition" in args.only:
        from voxrt.engine.runtime.lanes import green_streams  # noqa: PLC0415

        total = result["sms"]
        lm_stream, _, counts = green_streams(0, total - args.lm_sms)
        where = f"LM partition ({counts['lm']} SMs)" if "lm" in counts else f"LM partition {counts}"
        result["partition_sms"] = counts
        result["partition"] = run_chains(
            [r for r in rows if r <= gemv.MAX_ROWS] + [r for r in rows if r > gemv.MAX_ROWS][-1:],
            lambda r: {k: v for k, v in variants_for(r).items() if k in PARTITION_VARIANTS or r > gemv.MAX_ROWS},
            stream=lm_stream, where=where)
    if "skinny" in args.only:
        result["skinny"] = skinny(rows)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gemv_pdl.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n== the frame's product chains on {result['gpu']}: ms (TB/s of weights), err against the first variant")
    for key in ("chains", "partition"):
        for r in result.get(key, []):
            if "error" in r:
                print(f"  {r['where']:<24} {r['chain']:<19} rows {r['rows']:>3} {r['variant']:<18} ERROR {r['error'][:120]}")
                continue
            # pdl-ordinary: the base's kernels (same tiles, same order), launched with PDL: must match bit for bit
            bad = r["variant"] == "pdl-ordinary" and r["rel_err_vs_base"] > 0.0
            print(f"  {r['where']:<24} {r['chain']:<19} rows {r['rows']:>3} {r['variant']:<18} {r['ms']:>8.4f} "
                  f"({r['tb_per_s']:.2f})  err {r['rel_err_vs_base']:.1e}{'  DIFFERS' if bad else ''}")
    if result.get("skinny"):
        print("\n== the tensor-core product per config and flag, us a call (20 calls over >= 160 MB of weights)")
        for r in result["skinny"]:
            print("  " + "  ".join(f"{k} {v}" for k, v in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
