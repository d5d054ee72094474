"""Where a codec chunk's GPU time goes (issue 14): torch.profiler over eager `decode_stream` calls, the CUDA
kernels by total time, and the time per decoder stage (CUDA events around each top-level module).

    python bench/gpu_codec_profile.py --checkpoint /tmp/q17 [--frames 25 --batch 16 --impl triton]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from voxrt.models.qwen3_tts.codec import load_codec
from voxrt.models.qwen3_tts.codec_layers import Carry
from voxrt.models.qwen3_tts.loader import codec_dir


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--frames", type=int, default=25)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--impl", default="triton")
    ap.add_argument("--output-kernel", action="store_true", help="the output conv as one kernel (kernels/conv_out.py)")
    args = ap.parse_args()
    codec = load_codec(codec_dir(Path(args.checkpoint)), "cuda").to(torch.bfloat16).eval()
    codec.set_kernel_impl(args.impl, output_kernel=args.output_kernel)
    state = codec.new_state(args.batch, "cuda", torch.bfloat16)
    codes = torch.randint(0, codec.cfg.codebook_size, (args.batch, args.frames, codec.num_quantizers), device="cuda")
    slots = torch.arange(args.batch, device="cuda")
    with torch.inference_mode():
        for _ in range(3):
            codec.decode_stream(codes, slots, state)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            for _ in range(5):
                codec.decode_stream(codes, slots, state)
            torch.cuda.synchronize()
        averages = prof.key_averages()
        kernels = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
        print(f"CUDA kernels (incl. copies and fills) per call: {len(kernels) / 5:.0f}; GPU time per call "
              f"{sum(getattr(e, 'device_time', 0) for e in kernels) / 5 / 1e3:.3f} ms (eager)")
        for key in ("device_time_total", "cuda_time_total"):  # the name changed across torch versions
            try:
                print(averages.table(sort_by=key, row_limit=25, max_name_column_width=70))
                break
            except Exception as exc:  # noqa: BLE001
                print(f"(sort by {key}: {exc})")
        # the same by operator and input shapes: which conv shape a slow kernel belongs to
        by_shape = prof.key_averages(group_by_input_shape=True)
        for key in ("device_time_total", "cuda_time_total"):
            try:
                print(by_shape.table(sort_by=key, row_limit=30, max_name_column_width=40, max_shapes_column_width=90))
                break
            except Exception as exc:  # noqa: BLE001
                print(f"(by shape, sort by {key}: {exc})")
        # per stage: the same steps as Qwen3TTSCodec._decode, timed with events (eager, 5 calls)
        stages: dict[str, float] = {}
        for _ in range(5):
            carry = Carry({key: value.index_select(0, slots) for key, value in state.items()})
            marks = []

            def mark(name):
                event = torch.cuda.Event(enable_timing=True)
                event.record()
                marks.append((name, event))

            mark("start")
            x = codec.quantizer.decode(codes.clamp(min=0, max=codec.cfg.codebook_size - 1))
            x = codec.pre_conv(x, carry)
            mark("quantizer+pre_conv")
            x = codec.pre_transformer(x.transpose(1, 2), carry).transpose(1, 2)
            mark("pre_transformer")
            for i, stage in enumerate(codec.upsample):
                x = stage(x, carry)
                mark(f"upsample[{i}]")
            *blocks, act, conv = codec.decoder
            for i, layer in enumerate(blocks):
                x = layer(x, carry)
                mark(f"decoder[{i}] {type(layer).__name__} -> {tuple(x.shape)}")
            x = conv(x, carry, act=act)
            mark("final snake+conv")
            torch.cuda.synchronize()
            for (_, a), (name, b) in zip(marks, marks[1:]):
                stages[name] = stages.get(name, 0.0) + a.elapsed_time(b) / 5
        print(f"\n== per stage, eager, frames {args.frames} batch {args.batch}, impl {args.impl} (ms)")
        for name, ms in stages.items():
            print(f"  {ms:8.3f}  {name}")
        print(f"  {sum(stages.values()):8.3f}  total (eager)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
