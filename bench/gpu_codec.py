"""The Qwen3-TTS 12 Hz codec on the GPU (issue 14): accuracy and chunk time of each kernel choice.

    python bench/gpu_codec.py --checkpoint /tmp/q17 --out DIR

Full-size random codec (the checkpoint's `speech_tokenizer/`, from `voxrt make-checkpoint`). Variants:
  torch-fp32      the reference's ops in float32 (the accuracy reference)
  torch-bf16      the reference's ops in bfloat16 (what the engine ran before SnakeBeta was fused)
  triton-bf16-cudnn-only  SnakeBeta as one Triton kernel each, written into the next conv's padded input,
                  every conv on cuDNN, biases as their own passes (the default until 2026-12-02); bfloat16
  triton-bf16     the same kernels, the decoder blocks' biases folded into the activations, each residual
                  unit's 1x1 conv + bias + residual add as one product, the packed pre-transformer, and every
                  conv choosing cuDNN or cuBLAS products per shape by timing both in a graph, on plain [B, C, T]
                  data (the default on CUDA from 2026-12-02 until channels-last became it on 2026-12-06)
  triton-bf16-products-all  triton-bf16 with every conv with taps as products
  triton-bf16-outconv  triton-bf16 with the output conv (one channel, clamp, float32) as one kernel too
  triton-bf16-tapconv  triton-bf16 with the dilated convs' one-kernel form (kernels/tap_conv.py) a third
                  candidate of the per-shape timed choice (`VOXRT_CODEC_CONV=timed`)
  triton-bf16-tapconv-all  every conv with taps as that kernel (`VOXRT_CODEC_CONV=all`)
  triton-bf16-fused-all  triton-bf16 with each residual unit of <= 256 channels as one kernel
                  (kernels/residual_unit.py, `fused_units="all"`)
  triton-bf16-cl  triton-bf16 with the decoder blocks on channels-last activations (`VOXRT_CODEC_CHANNELS_LAST=on`:
                  cuDNN's channels-last kernels, products over the samples' rows, the channels-last SnakeBeta):
                  the default on CUDA since 2026-12-06
  triton-bf16-cl-fused-all  triton-bf16-cl with the fused residual units
  triton-bf16-cl-tapconv  triton-bf16-cl with `VOXRT_CODEC_CONV=timed`: the tap kernel a third timed candidate of
                  each conv (until 2026-12-06 it also made the fused unit a timed candidate of each unit)
Every variant but the -cl ones runs on plain data whatever VOXRT_CODEC_CHANNELS_LAST says.
--variants NAME,NAME: only those (torch-fp32, the accuracy reference, always runs first).
Accuracy: offline decode of 2 x 30 frames of random codes against torch-fp32 (max abs error, SNR in dB), and
streaming (chunks 2, 4, 8, 16) against offline in the same variant. Time: one `decode_stream` call captured as
a CUDA graph per (frames, batch), median of 20 replays, the whole GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from voxrt.models.qwen3_tts.codec import load_codec
from voxrt.models.qwen3_tts.loader import codec_dir

from graph_timing import graph_ms

SHAPES = [(2, 1), (2, 16), (25, 1), (25, 16), (25, 32)]  # 32: a codec launch's most chunks since 2026-12-06
PLAIN = dict(channels_last=False, fused_units="off")  # the plain-layout variants, whatever the knobs say
VARIANTS = [("torch-fp32", "torch", torch.float32, {}), ("torch-bf16", "torch", torch.bfloat16, {}),
            ("triton-bf16-cudnn-only", "triton", torch.bfloat16, dict(fold=False, conv_products="off", **PLAIN)),
            ("triton-bf16", "triton", torch.bfloat16, dict(conv_kernel="off", **PLAIN)),
            ("triton-bf16-products-all", "triton", torch.bfloat16, dict(conv_products="all", conv_kernel="off", **PLAIN)),
            ("triton-bf16-outconv", "triton", torch.bfloat16, dict(output_kernel=True, conv_kernel="off", **PLAIN)),
            ("triton-bf16-tapconv", "triton", torch.bfloat16, dict(conv_kernel="timed", **PLAIN)),
            ("triton-bf16-tapconv-all", "triton", torch.bfloat16, dict(conv_kernel="all", **PLAIN)),
            ("triton-bf16-fused-all", "triton", torch.bfloat16, dict(conv_kernel="off", channels_last=False, fused_units="all")),
            ("triton-bf16-cl", "triton", torch.bfloat16, dict(conv_kernel="off", channels_last=True, fused_units="off")),
            ("triton-bf16-cl-fused-all", "triton", torch.bfloat16,
             dict(conv_kernel="off", fused_units="all", channels_last=True)),
            ("triton-bf16-cl-tapconv", "triton", torch.bfloat16, dict(conv_kernel="timed", channels_last=True, fused_units="off"))]


def snr_db(ref: torch.Tensor, got: torch.Tensor) -> float:
    noise = (got.float() - ref.float()).pow(2).mean().item()
    return float("inf") if noise == 0 else 10 * torch.log10(ref.float().pow(2).mean() / noise).item()


def chunk_ms(codec, frames: int, batch: int, dtype: torch.dtype, device: str, iters: int = 20,
             stream=None) -> float:
    """`stream`: capture and replay on it (a green-context stream: the codec on its SM partition)."""
    state = codec.new_state(batch + 1, device, dtype)
    codes = torch.randint(0, codec.cfg.codebook_size, (batch, frames, codec.num_quantizers), device=device)
    slots = torch.arange(batch, device=device)
    if device == "cpu":  # a dry run of the script: eager, wall time
        start = time.perf_counter()
        codec.decode_stream(codes, slots, state)
        return (time.perf_counter() - start) * 1e3
    return graph_ms(lambda: codec.decode_stream(codes, slots, state), iters, stream)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--out", default=".")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run (eager, TRITON_INTERPRET=1 for triton)")
    ap.add_argument("--codec-dir", default=None, help="a codec directory instead of the checkpoint's")
    ap.add_argument("--variants", default=None, help="comma-separated variant names (default: every one)")
    ap.add_argument("--codec-sms", type=int, default=None, help="also time the default variant on a green-context "
                    "partition of this many SMs (the engine's background codec lane; 72 by default there)")
    args = ap.parse_args()
    variants = VARIANTS
    if args.variants:
        wanted = args.variants.split(",")
        unknown = sorted(set(wanted) - {v[0] for v in VARIANTS})
        if unknown:
            ap.error(f"unknown variants {unknown}; known: {', '.join(v[0] for v in VARIANTS)}")
        variants = [VARIANTS[0]] + [v for v in VARIANTS[1:] if v[0] in wanted]
    dev = args.device
    directory = Path(args.codec_dir) if args.codec_dir else codec_dir(Path(args.checkpoint))
    base = load_codec(directory, dev).eval()
    gen = torch.Generator(device=dev).manual_seed(0)
    codes = torch.randint(0, base.cfg.codebook_size, (2, 30, base.num_quantizers), device=dev, generator=gen)
    results = {"device": torch.cuda.get_device_name() if dev == "cuda" else dev, "torch": torch.__version__,
               "accuracy": [], "time": []}
    reference = None
    ok = True
    for name, impl, dtype, options in variants:
        codec = load_codec(directory, dev).to(dtype).eval()
        codec.set_kernel_impl(impl, **options)
        with torch.inference_mode():
            offline = codec.decode_offline(codes)
            if reference is None:
                reference = offline
            state = codec.new_state(2, dev, dtype)
            parts, start = [], 0
            for size in (2, 4, 8, 16):
                parts.append(codec.decode_stream(codes[:, start : start + size], torch.arange(2, device=dev), state))
                start += size
            streamed = torch.cat(parts, dim=1)
            row = dict(variant=name, max_abs_vs_fp32=round((offline - reference).abs().max().item(), 5),
                       snr_db_vs_fp32=round(snr_db(reference, offline), 1),
                       stream_vs_offline_max_abs=round((streamed - offline).abs().max().item(), 5),
                       rms=round(reference.float().pow(2).mean().sqrt().item(), 4))
            results["accuracy"].append(row)
            print("accuracy", row, flush=True)
            ok = ok and row["snr_db_vs_fp32"] > 20
            for frames, batch in SHAPES:
                ms = chunk_ms(codec, frames, batch, dtype, dev)
                results["time"].append(dict(variant=name, frames=frames, batch=batch, chunk_ms=round(ms, 3)))
                print(f"time {name:>18} frames {frames:>2} batch {batch:>2}: {ms:8.3f} ms", flush=True)
        del codec
        if dev == "cuda":
            torch.cuda.empty_cache()
    if args.codec_sms and dev == "cuda":
        from voxrt.engine.runtime.lanes import green_streams  # noqa: PLC0415

        _, lane, counts = green_streams(torch.cuda.current_device(), args.codec_sms)
        codec = load_codec(directory, dev).to(torch.bfloat16).eval()
        codec.set_kernel_impl("triton")
        rows = []
        with torch.inference_mode():
            for frames, batch in SHAPES:
                ms = chunk_ms(codec, frames, batch, torch.bfloat16, dev, stream=lane)
                audio_s = frames * batch * codec.samples_per_frame / 24000
                rows.append(dict(frames=frames, batch=batch, chunk_ms=round(ms, 3),
                                 audio_s_per_s=round(audio_s / (ms / 1e3), 1)))
        results["partition"] = dict(sm_counts=counts, variant="default", rows=rows)
        print(f"\n== the default (set_kernel_impl('triton')) on a green-context partition of {counts} SMs (alone on the GPU)")
        for row in rows:
            print(f"  frames {row['frames']:>2} batch {row['batch']:>2}: {row['chunk_ms']:8.3f} ms, "
                  f"{row['audio_s_per_s']:8.1f} audio-s/s")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "codec.json"), "w") as f:
        json.dump(results, f, indent=2)
    print("\n== codec chunk ms (CUDA graph, whole GPU)")
    names = [v[0] for v in variants]
    print(f"{'frames':>6} {'batch':>5} " + " ".join(f"{n:>24}" for n in names))
    for frames, batch in SHAPES:
        cells = {r["variant"]: r["chunk_ms"] for r in results["time"] if (r["frames"], r["batch"]) == (frames, batch)}
        print(f"{frames:>6} {batch:>5} " + " ".join(f"{cells[n]:>24.3f}" for n in names))
    print("targets (issue 14): 25 frames x 16 <= 15 ms, 2 frames x 1 <= 1.5 ms")
    print(f"accuracy {'OK' if ok else 'LOW'} (every variant above 20 dB SNR against float32)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
