"""The MLP's gate/up product with the SiLU gate in its epilogue (kernels/gemv.py `gate_up_silu`, VOXRT_SWIGLU=1)
against what runs by default above four rows (cuBLAS's product, then the SiLU-gate kernel with the row's rstd),
per shape of the Qwen3-TTS 1.7B (code predictor and talker), in CUDA graphs: 20 calls over enough copies of the
weight that the L2 cannot hold them (as in a frame), median of 20 replays, us a call. Each fused variant's output
is checked against the default's (relative error, bf16). Prints a table and the fastest variant at 64 rows as
VOXRT_GEMV settings (the line `best:`), and writes swiglu.json.

    cd bench && python -u gpu_swiglu.py --out $OUT [--rows 8,64,128]
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from graph_timing import graph_ms
from voxrt.engine.runtime.kernels import gemv
from voxrt.engine.runtime.kernels.norm import silu_mul

DEV, DT = torch.device("cuda"), torch.bfloat16
SHAPES = {"pred.gate_up": (3072, 1024), "talk.gate_up": (6144, 2048)}  # (I, H): the weight is [2I, H]
VARIANTS = [dict(swiloop=loop, swibn=bn) for loop in (0, 1) for bn in (16, 32, 64)]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12)).item()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".")
    ap.add_argument("--rows", default="8,64,128")
    args = ap.parse_args()
    rows_list = [int(r) for r in args.rows.split(",") if r]
    reps, rows_out = 20, []
    for name, (inter, h) in SHAPES.items():
        nw = max(16, -(-(160 << 20) // (2 * inter * h * 2)))  # >= 160 MB of weights in turn
        ws = [torch.randn(2 * inter, h, device=DEV, dtype=DT) / h ** 0.5 for _ in range(nw)]
        for m in rows_list:
            x = torch.randn(m, h, device=DEV, dtype=DT) * 2
            y = torch.empty(m, 2 * inter, device=DEV, dtype=DT)
            row = dict(shape=name, rows=m, weights_mb=round(nw * 2 * inter * h * 2 / 2**20))

            def unfused(i):
                torch.nn.functional.linear(x, ws[i % nw], out=y)
                return silu_mul(y, "triton", x=x, eps=1e-6)
            row["cublas+silu_mul_us"] = round(graph_ms(lambda: [unfused(i) for i in range(reps)]) * 1e3 / reps, 2)
            want = unfused(0)
            for v in VARIANTS:
                label = f"swiloop={v['swiloop']},swibn={v['swibn']}"
                os.environ["VOXRT_GEMV"] = label
                try:
                    got = gemv.gate_up_silu(x, ws[0], 1e-6, "triton", force=True)
                    row[label + "_err"] = round(rel_err(got, want), 5)
                    row[label + "_us"] = round(graph_ms(lambda: [gemv.gate_up_silu(x, ws[i % nw], 1e-6, "triton",
                                                                                  force=True)
                                                                 for i in range(reps)]) * 1e3 / reps, 2)
                except Exception as exc:  # noqa: BLE001 (a config this Triton cannot compile: report it)
                    row[label + "_us"] = f"error {type(exc).__name__}: {exc}"[:160]
                finally:
                    os.environ.pop("VOXRT_GEMV", None)
            rows_out.append(row)
            print(json.dumps(row), flush=True)
        del ws
        torch.cuda.empty_cache()
    print(f"== fused gate/up + SiLU against cuBLAS + silu_mul on {torch.cuda.get_device_name()}, us a call")
    labels = [f"swiloop={v['swiloop']},swibn={v['swibn']}" for v in VARIANTS]
    print(f"{'shape':>14} {'rows':>5} {'cublas+silu':>12} " + " ".join(f"{lb:>20}" for lb in labels))
    for r in rows_out:
        cells = [f"{r.get(lb + '_us')!s:>12.12}/{r.get(lb + '_err', '-')!s:<7.7}" for lb in labels]
        print(f"{r['shape']:>14} {r['rows']:>5} {r['cublas+silu_mul_us']:>12} " + " ".join(f"{c:>20}" for c in cells))
    totals = {lb: sum(r[lb + "_us"] for r in rows_out if r["rows"] == 64 and isinstance(r.get(lb + "_us"), float)
                      and r.get(lb + "_err", 1) < 0.02)
              for lb in labels if all(isinstance(r.get(lb + "_us"), float) for r in rows_out if r["rows"] == 64)}
    base = sum(r["cublas+silu_mul_us"] for r in rows_out if r["rows"] == 64)
    best = min(totals, key=totals.get) if totals else ""
    if best:
        print(f"at 64 rows, both shapes: cuBLAS + silu_mul {base:.2f} us, fastest fused {best} {totals[best]:.2f} us")
    print(f"best: {best}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "swiglu.json"), "w") as f:
        json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows_out, best=best,
                       base_64_us=base, totals_64_us=totals), f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
