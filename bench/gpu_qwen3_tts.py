"""Qwen3-TTS-1.7B on the GPU, full-size random checkpoint (made by `voxrt make-checkpoint`): frame time
(talker + 15 predictor steps) at batch 1, 8, 32, 64 beside the HBM floor, codec chunk time per batch size,
and the time to first audio of one request. Prints a table last and writes results.json under --out.

    voxrt make-checkpoint --arch qwen3-tts-1.7b /tmp/q17 --tokenizer-dir DIR
    python bench/gpu_qwen3_tts.py --checkpoint /tmp/q17 --out DIR
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time

import torch

from voxrt.engine.messages import AudioChunk, EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore

from engine_timing import codec_times, frame_times, weight_bytes  # noqa: E402 (bench/ is the script's dir)

TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs back home before the sun goes down "
        "behind the hills. ")


def ttfa_ms(core: EngineCore, repeats: int = 5) -> list[float]:
    """One request alone: submit (whole text, final) to its first audio chunk out of the codec."""
    out = []
    for i in range(repeats):
        t0 = time.monotonic_ns()
        core.submit(SubmitRequest(f"ttfa-{i}", core.info.default_voice, SamplingParams(num_frames=30), TEXT, True))
        first = None
        while core.has_work():
            for event in core.step():
                if first is None and isinstance(event, AudioChunk) and event.num_samples:
                    first = (time.monotonic_ns() - t0) / 1e6
        out.append(round(first, 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--ttfa-repeats", type=int, default=3)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.monotonic()
    core = EngineCore(EngineConfig(model="qwen3-tts", checkpoint=args.checkpoint, device=args.device,
                                   max_batch_size=max(batches), max_seq_len=2048))
    load_s = time.monotonic() - t0
    t0 = time.monotonic()
    core.warmup()
    capture_s = time.monotonic() - t0
    program = core.program
    pred = program.talker.code_predictor
    talker_bytes = weight_bytes(program.talker) - weight_bytes(pred)
    info = core.info
    results = dict(gpu=torch.cuda.get_device_name() if args.device == "cuda" else "cpu", torch=torch.__version__,
                   date=time.strftime("%Y-%m-%d"), model=info.name, attention=info.attention_backend,
                   cuda_graphs=info.use_cuda_graphs, load_s=round(load_s, 1), capture_s=round(capture_s, 1),
                   talker_gb=round(talker_bytes / 1e9, 3), predictor_gb=round(weight_bytes(pred) / 1e9, 3))
    print(json.dumps(results), flush=True)
    results["codec"] = codec_times(core, [1, 4, 16] if max(batches) >= 16 else [1, 2])
    print("codec", results["codec"], flush=True)
    results["ttfa_ms"] = ttfa_ms(core, repeats=args.ttfa_repeats) if args.ttfa_repeats else []
    print("ttfa_ms", results["ttfa_ms"], flush=True)
    results["frames"] = []
    for b in batches:
        results["frames"] += frame_times(core, [b], args.context, talker_bytes, weight_bytes(pred))
        print("frame", results["frames"][-1], flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(f"\n== {info.name} (random 1.7B weights) on {results['gpu']}, {results['date']}, bf16, "
          f"{info.attention_backend}, graphs {info.use_cuda_graphs}; KV context {args.context}")
    if results["ttfa_ms"]:
        print(f"time to first audio, one request alone (prefill + 2 frames + first codec chunk): "
              f"median {statistics.median(results['ttfa_ms'])} ms of {results['ttfa_ms']}")
    cols = ["batch", "decode_graph_ms", "depth_graph_ms", "frame_graph_ms", "frame_floor_ms", "decode_eager_ms",
            "depth_eager_ms"]
    print(" ".join(f"{c:>16}" for c in cols))
    for row in results["frames"]:
        print(" ".join(f"{row[c]:>16}" for c in cols))
    print(f"{'codec frames':>16} {'batch':>8} {'chunk_ms':>10} {'audio_ms':>10}")
    for row in results["codec"]:
        print(f"{row['frames']:>16} {row['batch']:>8} {row['chunk_ms']:>10} {row['audio_ms_per_chunk']:>10}")


if __name__ == "__main__":
    main()
