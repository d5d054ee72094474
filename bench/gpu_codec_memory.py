"""What a codec launch's size costs in GPU memory at start-up, and whether the engine starts (issue 15's tuning).

    python bench/gpu_codec_memory.py --checkpoint /tmp/q17 --codec-batches 16,32,48,64 --out DIR
    python bench/gpu_codec_memory.py --model tiny --device cpu --codec-batches 4,8   # the plumbing, on the CPU

Each `--max-codec-batch` value starts one engine in a process of its own (a fresh CUDA context: one that ran out of
memory leaves nothing behind for the next) with the serving defaults otherwise (the deadline policy, lanes, max
batch 256 or 128 on a GPU, KV pages sized from memory), captures every CUDA graph (`EngineCore.warmup`), and reports the
memory: free before the engine, the KV pages, what PyTorch holds after the capture (allocated, reserved, peak),
and the memory still free, or the out-of-memory error. 64 chunks did not fit an H100 with max batch 128
(bench/results/2026-12-06-h100-hold-codec-batch/); the default is 32 on a GPU of 64 GiB or more, else 16
(`runtime/core.py`, CODEC_BATCH_32_MIN_BYTES): this measures where that line belongs. Writes `codec_memory.json`
under --out and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

GIB = 2**30


def one(args: argparse.Namespace, codec_batch: int) -> dict:
    """Starts one engine with `codec_batch` chunks a launch in this process; its memory, or why it did not start."""
    import torch  # noqa: PLC0415

    from voxrt.engine.messages import EngineConfig  # noqa: PLC0415
    from voxrt.engine.runtime.core import EngineCore  # noqa: PLC0415

    cuda = args.device.startswith("cuda")
    row: dict = {"max_codec_batch": codec_batch}
    if cuda:
        free, total = torch.cuda.mem_get_info()
        row.update(total_gib=round(total / GIB, 2), free_before_gib=round(free / GIB, 2))
    start = time.perf_counter()
    try:
        core = EngineCore(EngineConfig(model=args.model, checkpoint=args.checkpoint, device=args.device,
                                       scheduler_type="deadline", max_batch_size=args.max_batch_size,
                                       max_codec_batch=codec_batch))
        row.update(kv_pages=core.scheduler.pages.num_pages, max_batch_size=core.config.max_batch_size,
                   lanes=core.info.lanes)
        core.warmup()
    except Exception as exc:  # noqa: BLE001 (the row says why it did not start)
        row.update(started=False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        return row
    row.update(started=True, start_s=round(time.perf_counter() - start, 1))
    if cuda:
        free, _ = torch.cuda.mem_get_info()
        row.update(allocated_gib=round(torch.cuda.memory_allocated() / GIB, 2),
                   reserved_gib=round(torch.cuda.memory_reserved() / GIB, 2),
                   peak_gib=round(torch.cuda.max_memory_allocated() / GIB, 2),
                   free_after_gib=round(free / GIB, 2))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-tts")
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--max-batch-size", type=int, default=None,
                    help="default: the engine's (256 on a GPU of 64 GiB or more, else 128)")
    ap.add_argument("--codec-batches", default="16,32,48,64")
    ap.add_argument("--out", default=None)
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # the child: one engine, a JSON line
    ap.add_argument("--timeout-s", type=float, default=300.0, help="per engine")
    args = ap.parse_args()
    if args.one is not None:
        print("ROW " + json.dumps(one(args, args.one)), flush=True)
        return 0
    try:
        batches = [int(b) for b in args.codec_batches.split(",")]
    except ValueError:
        ap.error(f"--codec-batches must be comma-separated integers, got {args.codec_batches!r}")
    if not batches or min(batches) < 1:
        ap.error("--codec-batches must be integers >= 1")
    rows = []
    for codec_batch in batches:
        cmd = [sys.executable, os.path.abspath(__file__), "--one", str(codec_batch), "--model", args.model,
               "--device", args.device]
        if args.checkpoint:
            cmd += ["--checkpoint", args.checkpoint]
        if args.max_batch_size is not None:
            cmd += ["--max-batch-size", str(args.max_batch_size)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            row = {"max_codec_batch": codec_batch, "started": False, "error": f"no answer in {args.timeout_s:g} s"}
        else:
            lines = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
            row = json.loads(lines[-1]) if lines else {
                "max_codec_batch": codec_batch, "started": False,
                "error": f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:300]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "codec_memory.json"), "w") as f:
            json.dump(rows, f, indent=1)
    print(f"\n{'codec batch':>11} {'started':>7} {'start s':>7} {'KV pages':>8} {'alloc GiB':>9} {'peak GiB':>8} "
          f"{'free after':>10}  error")
    for row in rows:
        print(f"{row['max_codec_batch']:>11} {str(row.get('started')):>7} {row.get('start_s', '-')!s:>7} "
              f"{row.get('kv_pages', '-')!s:>8} {row.get('allocated_gib', '-')!s:>9} {row.get('peak_gib', '-')!s:>8} "
              f"{row.get('free_after_gib', '-')!s:>10}  {row.get('error', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
