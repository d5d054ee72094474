"""Is cuDNN's slow call its kernel or its host work? The codec's channels-last convs, one shape at a time.

    python bench/gpu_cudnn_calls.py [--shapes B,C,L,D ...] [--out DIR]

The codec's timed conv choice (models/qwen3_tts/codec_layers._timed_choice) judges a candidate's second eager
call and cut cuDNN short at shapes where that call took near-fixed times whatever the batch: 44-89 ms at
`[2..32, 192, L]`, 69 ms at `[2, 192, 16018]` where `[32, 192, 16018]` replayed in 1.58 ms
(bench/results/2026-12-07-h100-codecfix/). A batch-2 conv cannot take 44x the GPU time of the same conv at batch
32, so this times, per shape (`B,C,L,D`: batch, channels in = out, padded length, dilation; kernel 7, bf16, the
codec's channels-last formulation `F.conv2d` over `[B, C, 1, L]`):
  eager     five eager calls, each as the host's wall time (call to synchronize) and CUDA events around it
  graph     a CUDA graph of one call, the median of 20 replays (what the engine would pay)
and prints a table (ms) with the JSON under --out. A shape whose eager calls stay far above its graph replay
pays per-call host work (a plan not kept), which a captured graph does not: the give-up should then judge a
replay, not an eager call.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from graph_timing import graph_ms  # bench/ is on sys.path when this runs as a script

# From the 2026-12-08 H100 start-up log: cut short (44-89 ms a call) and, beside them, shapes where cuDNN won.
DEFAULT_SHAPES = ["32,192,16018,3", "2,192,16018,3", "32,192,658,3", "2,192,658,3", "32,192,1298,3",
                  "8,384,658,3", "32,384,4018,3", "32,768,146,3", "32,384,1334,9"]
KERNEL = 7


def parse_shape(text: str) -> tuple[int, int, int, int]:
    try:
        batch, channels, length, dilation = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is B,C,L,D (four integers), got {text!r}") from None
    if min(batch, channels, dilation) < 1 or length <= (KERNEL - 1) * dilation:
        raise argparse.ArgumentTypeError(f"{text!r}: B, C, D >= 1 and L > (kernel - 1) x D")
    return batch, channels, length, dilation


def time_shape(batch: int, channels: int, length: int, dilation: int, eager_calls: int = 5,
               replays: int = 20) -> dict:
    weight = torch.randn(channels, channels, 1, KERNEL, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last) * 0.05
    bias = torch.zeros(channels, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(batch, length, channels, device="cuda", dtype=torch.bfloat16).transpose(1, 2)  # [B, C, L], cl

    def call() -> torch.Tensor:
        return F.conv2d(x.unsqueeze(2), weight, bias, dilation=(1, dilation)).squeeze(2)

    stream = torch.cuda.Stream()  # as `_time_ms` on the default stream: a side stream (graphs cannot capture there)
    stream.wait_stream(torch.cuda.current_stream())
    eager = []
    with torch.cuda.stream(stream):
        for _ in range(eager_calls):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            call()
            end.record()
            end.synchronize()
            eager.append({"host_ms": (time.perf_counter() - t0) * 1e3, "events_ms": start.elapsed_time(end)})
    torch.cuda.current_stream().wait_stream(stream)
    return {"shape": [batch, channels, length], "dilation": dilation, "kernel": KERNEL, "eager": eager,
            "graph_median_ms": graph_ms(call, iters=replays, warmup=0)}  # warmed by the eager calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", type=parse_shape, default=[parse_shape(s) for s in DEFAULT_SHAPES],
                    help="B,C,L,D each (default: shapes from the 2026-12-08 H100 start-up log)")
    ap.add_argument("--out", default=None, help="write cudnn_calls.json here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (this times cuDNN's kernels)")
    rows = []
    print(f"{'shape':>20} {'d':>2}  {'eager events ms (calls 1..5)':>44}  {'host ms (call 2)':>16}  {'graph ms':>9}")
    for shape in args.shapes:
        row = time_shape(*shape)
        rows.append(row)
        events = " ".join(f"{c['events_ms']:8.3f}" for c in row["eager"])
        print(f"{str(row['shape']):>20} {row['dilation']:>2}  {events:>44}  {row['eager'][1]['host_ms']:16.3f}  "
              f"{row['graph_median_ms']:9.3f}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                "cudnn": torch.backends.cudnn.version()}
        (out / "cudnn_calls.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
