"""The Qwen3-TTS frame on the GPU, reference path against fused path (issue 12), one table per checkpoint.

Per batch size, with `--context` tokens of KV per request: talker ms (decode stage: embed + talker step +
code 0 sampling, one CUDA graph), predictor ms (the 15-step code predictor, one CUDA graph), frame ms, the
weight-streaming floor, the ratio to it, and kernels per frame (CUDA kernels the profiler saw in one replay of
both graphs). Then, per path: the time to first audio of one request alone, and 64 concurrent requests x 50
pinned frames through EngineCore (audio seconds per wall second). Full-size random checkpoints made by
`voxrt make-checkpoint`; both paths share the loaded weights (one EngineCore at a time).

Paths: reference, fused (Triton kernels launched with programmatic dependent launch where the GPU has it,
kernels/__init__.py), fused-nopdl (the same kernels launched plainly: what PDL buys, in the same process),
fused-cublas (cuBLAS products instead of kernels/gemv.py's), fused-l2 (each product prefetches the next one's
weight into the L2), fused-skinny (kernels/gemv.py's tensor-core product at 5..128 rows instead of cuBLAS),
fused-l2-skinny (both), fused-skinny-pdl (the tensor-core product and PDL), fused-cudacores / fused-fa2nosplit / fused-fa3 (the talker's decode attention on
FlashInfer's CUDA-core decode kernel at every batch, its FA2 tensor-core kernel without split KV, or its FA3
kernel, or ours (fused-tritonattn: runtime/kernels/paged_decode.py), where `fused` takes the default rule,
auto: runtime/attention.py). `--kernels-only`: the frame table and per-kernel
profile, without the TTFA and throughput runs (a shorter GPU call).

    python bench/gpu_frame.py --checkpoint /tmp/q17 [--checkpoint /tmp/q06] --paths fused,fused-nopdl --out DIR
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from voxrt.engine.messages import AudioChunk, EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.attention import decode_kernel, set_decode_kernel
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.runtime.kernels import l2_prefetch_enabled, pdl_enabled, set_l2_prefetch, set_pdl, set_skinny, skinny_enabled
from voxrt.models.registry import build_program

from engine_timing import frame_times, weight_bytes  # noqa: E402 (bench/ is the script's dir)
from gpu_qwen3_tts import TEXT, ttfa_ms  # noqa: E402


def kernel_count(fn) -> dict:
    """CUDA kernels (and copies/fills) the profiler records for one call of `fn` (graph replays included)."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = copies = 0
    top = []
    for e in prof.key_averages():
        if e.device_type.name != "CUDA":
            continue
        if e.key.startswith(("Memcpy", "Memset")) or "memcpy" in e.key.lower() or "memset" in e.key.lower():
            copies += e.count
        else:
            kernels += e.count
        top.append((round(e.self_device_time_total / 1e3, 3), e.count, e.key[:90]))
    top.sort(reverse=True)
    return dict(kernels=kernels, copies=copies, top=top[:14])


def throughput(core: EngineCore, num_requests: int = 64, num_frames: int = 50) -> dict:
    """`voxrt bench`'s workload in-process: N concurrent requests, pinned lengths, until all are done."""
    t0 = time.monotonic_ns()
    for i in range(num_requests):
        core.submit(SubmitRequest(f"tp-{i}", core.info.default_voice, SamplingParams(num_frames=num_frames), TEXT,
                                  True, arrival_ns=t0))
    first, samples = {}, 0
    while core.has_work():
        for event in core.step():
            if isinstance(event, AudioChunk) and event.num_samples:
                first.setdefault(event.request_id, (time.monotonic_ns() - t0) / 1e6)
                samples += event.num_samples
    wall_s = (time.monotonic_ns() - t0) / 1e9
    audio_s = samples / core.info.sample_rate
    return dict(requests=num_requests, frames=num_frames, wall_s=round(wall_s, 3), audio_s=round(audio_s, 1),
                realtime_factor=round(wall_s / audio_s, 5), ttfa_p50_ms=round(statistics.median(first.values()), 1))


def run_path(program, checkpoint: str, path: str, batches: list[int], context: int, kernels_only: bool = False,
             lanes: str = "auto") -> dict:
    """`path`: reference, fused (PDL as configured: off unless VOXRT_PDL=1), fused-pdl / fused-nopdl (PDL on /
    off while this path's graphs are captured and run), or fused-cublas (the fused path with cuBLAS products instead of kernels/gemv.py's skinny ones: what the skinny
    products buy)."""
    set_pdl({"fused-nopdl": False, "fused-pdl": True, "fused-skinny-pdl": True}.get(path))
    set_l2_prefetch(True if path in ("fused-l2", "fused-l2-skinny") else None)
    set_skinny(True if path in ("fused-skinny", "fused-l2-skinny", "fused-skinny-pdl") else None)
    set_decode_kernel({"fused-cudacores": "cuda-cores", "fused-fa2nosplit": "fa2-nosplit", "fused-fa3": "fa3",
                       "fused-tritonattn": "triton"}.get(path))
    try:
        return _run_path(program, checkpoint, path, batches, context, kernels_only, lanes)
    finally:
        set_pdl(None)
        set_l2_prefetch(None)
        set_skinny(None)
        set_decode_kernel(None)


def _run_path(program, checkpoint: str, path: str, batches: list[int], context: int, kernels_only: bool,
              lanes: str = "auto") -> dict:
    t0 = time.monotonic()
    frame_path = "reference" if path == "reference" else "fused"
    cuda = torch.device("cuda")
    if path == "fused-cublas":
        program.use_frame_path("fused", cuda, gemm_impl="torch")
    elif frame_path == "fused" and program.fused is not None and program.fused.gemm_impl != "triton":
        program.use_frame_path("fused", cuda, impl="triton", gemm_impl="triton")  # after fused-cublas
    core = EngineCore(EngineConfig(model="qwen3-tts", checkpoint=checkpoint, device="cuda", frame_path=frame_path,
                                   max_batch_size=max(batches), max_seq_len=2048, lanes=lanes), program=program)
    core.warmup()
    from voxrt.engine.runtime import knobs  # noqa: PLC0415
    from voxrt.engine.runtime.kernels import PDL_AUTO_MAX_ROWS, pdl_mode  # noqa: PLC0415

    # PDL at one row and above PDL_AUTO_MAX_ROWS (VOXRT_PDL=auto turns it on for the small batches only)
    pdl_by_rows = {"1": pdl_enabled(cuda, 1), f"{PDL_AUTO_MAX_ROWS + 1}+": pdl_enabled(cuda, PDL_AUTO_MAX_ROWS + 1)}
    out = dict(path=path, start_s=round(time.monotonic() - t0, 1), pdl_mode=pdl_mode(),
               pdl=frame_path == "fused" and pdl_by_rows["1"], pdl_rows=pdl_by_rows if frame_path == "fused" else {},
               l2_prefetch=frame_path == "fused" and l2_prefetch_enabled(cuda),
               skinny=frame_path == "fused" and skinny_enabled(cuda), decode_attention=decode_kernel(),
               paged_decode_rope=knobs.paged_decode_rope(), predictor_qkv_table=knobs.predictor_qkv_table(),
               glue_kernels=knobs.glue_kernels(), lanes=core.info.lanes)
    print(path, "lanes:", core.info.lanes, flush=True)
    print(path, "PDL", out["pdl_mode"], out["pdl_rows"], "L2 prefetch", "on" if out["l2_prefetch"] else "off",
          "tensor-core product (5..128 rows)", "on" if out["skinny"] else "off", "decode attention",
          out["decode_attention"], "rotary in the paged decode", "on" if out["paged_decode_rope"] else "off",
          "predictor q/k/v table", "on" if out["predictor_qkv_table"] else "off", "glue kernels",
          "on" if out["glue_kernels"] else "off", flush=True)
    assert core.info.frame_path == frame_path, (core.info.frame_path, path)
    pred = program.talker.code_predictor
    talker_bytes = weight_bytes(program.talker) - weight_bytes(pred)
    counts = {}

    def on_batch(b, decode, depth):
        counts[b] = kernel_count(lambda: (decode(), depth()))

    out["frames"] = frame_times(core, batches, context, talker_bytes, weight_bytes(pred), eager=False,
                                on_batch=on_batch)
    for row in out["frames"]:
        row.update(kernels_per_frame=counts[row["batch"]]["kernels"], copies_per_frame=counts[row["batch"]]["copies"],
                   ratio_to_floor=round(row["frame_graph_ms"] / row["frame_floor_ms"], 2))
        print(path, "frame", {k: v for k, v in row.items() if k != "top_kernels"}, flush=True)
        if row["batch"] in (1, 64):
            print(f"{path} batch {row['batch']}: kernel time ms, count, name (one frame)")
            for ms, count, name in counts[row["batch"]]["top"]:
                print(f"   {ms:8.3f} {count:5d}  {name}")
        row["top_kernels"] = counts[row["batch"]]["top"]
    if not kernels_only:
        out["ttfa_ms"] = ttfa_ms(core, repeats=4)
        print(path, "ttfa_ms", out["ttfa_ms"], flush=True)
        out["throughput"] = throughput(core)
        print(path, "throughput", out["throughput"], flush=True)
    del core
    gc.collect()
    torch.cuda.empty_cache()
    return out


PATHS = ("reference", "fused-cublas", "fused-nopdl", "fused", "fused-pdl", "fused-l2", "fused-skinny", "fused-l2-skinny",
         "fused-skinny-pdl",
         "fused-cudacores", "fused-fa2nosplit", "fused-fa3", "fused-tritonattn")


def print_table(name: str, results: dict) -> None:
    print(f"\n== {name}: frame on {torch.cuda.get_device_name()}, bf16, CUDA graphs, KV context {results['context']}, "
          f"lanes {results.get('lanes', 'auto')}")
    cols = ["batch", "decode_graph_ms", "depth_graph_ms", "frame_graph_ms", "frame_floor_ms", "ratio_to_floor",
            "kernels_per_frame"]
    print(f"{'path':>12} " + " ".join(f"{c:>17}" for c in cols))
    paths = [p for p in PATHS if p in results]
    for path, why in results.get("failed", {}).items():
        print(f"{path:>12} FAILED: {why}")
    for path in paths:
        for row in results[path]["frames"]:
            print(f"{path:>12} " + " ".join(f"{row[c]:>17}" for c in cols))
    pdl_path = "fused-pdl" if "fused-pdl" in results else "fused"
    if pdl_path in results and "fused-nopdl" in results:
        print(f"PDL ({pdl_path} {'with' if results[pdl_path]['pdl'] else 'WITHOUT (off or not available here)'} "
              f"PDL against fused-nopdl), frame ms:")
        for on, off in zip(results[pdl_path]["frames"], results["fused-nopdl"]["frames"]):
            print(f"   batch {on['batch']:>4}: {off['frame_graph_ms']:7.3f} -> {on['frame_graph_ms']:7.3f} "
                  f"({on['frame_graph_ms'] - off['frame_graph_ms']:+.3f} ms; decode {off['decode_graph_ms']:.3f} -> "
                  f"{on['decode_graph_ms']:.3f}, depth {off['depth_graph_ms']:.3f} -> {on['depth_graph_ms']:.3f})")
    for path in paths:
        r = results[path]
        if "ttfa_ms" not in r:
            continue
        print(f"{path:>12}: TTFA alone median {statistics.median(r['ttfa_ms'])} ms of {r['ttfa_ms']}; 64 x 50 frames: "
              f"{r['throughput']['audio_s']} s of audio in {r['throughput']['wall_s']} s "
              f"(realtime factor {r['throughput']['realtime_factor']}, TTFA p50 {r['throughput']['ttfa_p50_ms']} ms)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", action="append", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--batches", default="1,8,32,64,128")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--paths", default="reference,fused", help=f"comma-separated, of {', '.join(PATHS)}")
    ap.add_argument("--kernels-only", action="store_true", help="skip the TTFA and throughput runs")
    ap.add_argument("--gemv-programs", type=int, default=None, help="kernels/gemv.py's TARGET_PROGRAMS (the "
                    "products' grid) for every path of this run (default: the module's)")
    ap.add_argument("--gemv-first", type=int, default=None, help="kernels/gemv.py's PREFETCH_ELEMENTS (with PDL, "
                    "the weight elements a program loads before its wait) for every path of this run")
    ap.add_argument("--gemv-plain-first", type=int, default=None, help="kernels/gemv.py's PLAIN_FIRST_ELEMENTS "
                    "(without PDL, the width of a program's first weight tile; 0: an ordinary tile)")
    ap.add_argument("--gemv-skinny-config", default=None, help="kernels/gemv.py's SKINNY_CONFIG as "
                    "BLOCK_M,BLOCK_N,BLOCK_K,warps,stages (default: skinny_plan's per shape)")
    ap.add_argument("--gemv-skinny-max-dim", type=int, default=None, help="kernels/gemv.py's SKINNY_MAX_MIN_DIM: the "
                    "tensor-core product only where min(N, K) <= this (1024: the code predictor's products alone)")
    ap.add_argument("--lanes", default="auto", help="the engine's --lanes: auto runs the LM on its green-context "
                    "partition (68 SMs on an H200 by default for Qwen3-TTS; 60 before 2026-12-06), off on the whole GPU")
    args = ap.parse_args()
    unknown = set(args.paths.split(",")) - set(PATHS)
    if unknown:
        ap.error(f"unknown paths {sorted(unknown)}; expected some of {', '.join(PATHS)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.makedirs(args.out, exist_ok=True)
    from voxrt.engine.runtime.kernels import gemv  # noqa: PLC0415
    if args.gemv_programs:
        gemv.TARGET_PROGRAMS = args.gemv_programs
    if args.gemv_first:
        gemv.PREFETCH_ELEMENTS = args.gemv_first
    if args.gemv_plain_first is not None:
        gemv.PLAIN_FIRST_ELEMENTS = args.gemv_plain_first
    if args.gemv_skinny_config:
        gemv.SKINNY_CONFIG = tuple(int(v) for v in args.gemv_skinny_config.split(","))
    if args.gemv_skinny_max_dim:
        gemv.SKINNY_MAX_MIN_DIM = args.gemv_skinny_max_dim
    # what the products run with: the module's values under VOXRT_GEMV's (the pipeline and warps are set there)
    programs, plain_first, pipeline, warps, pdl_first = gemv.settings()
    print(f"gemv: programs {programs}, PDL first tile {pdl_first}, plain first tile {plain_first}, pipeline "
          f"{pipeline}, warps {warps}, SKINNY_CONFIG {gemv.SKINNY_CONFIG}, SKINNY_MAX_MIN_DIM "
          f"{gemv.SKINNY_MAX_MIN_DIM}", flush=True)
    batches = [int(b) for b in args.batches.split(",")]
    all_results = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d"),
                       gemv_programs=programs, gemv_first=pdl_first, gemv_plain_first=plain_first,
                       gemv_pipe=pipeline, gemv_warps=warps)
    for checkpoint in args.checkpoint:
        t0 = time.monotonic()
        program = build_program("qwen3-tts", checkpoint)
        name = f"{checkpoint} ({program.cfg.talker.lm.hidden_size} hidden)"
        results = dict(context=args.context, load_s=round(time.monotonic() - t0, 1), lanes=args.lanes)
        for path in args.paths.split(","):
            try:
                results[path] = run_path(program, checkpoint, path, batches, args.context, args.kernels_only,
                                         args.lanes)
            except Exception as e:  # noqa: BLE001 (one path failing, e.g. a kernel library's JIT, keeps the rest)
                logging.exception("path %s failed", path)
                results.setdefault("failed", {})[path] = f"{type(e).__name__}: {e}"
                gc.collect()
                torch.cuda.empty_cache()
        all_results[checkpoint] = results
        with open(os.path.join(args.out, "frame.json"), "w") as f:
            json.dump(all_results, f, indent=2)
        print_table(name, results)
        del program
        gc.collect()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
