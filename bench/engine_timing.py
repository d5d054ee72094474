"""Timing helpers shared by the GPU benchmarks: CUDA-event timing of the runner's stages on real requests."""

from __future__ import annotations

import torch

from voxrt.engine.messages import SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.graphs import GraphedStage

HBM_BYTES_PER_S = 4.254e12  # measured copy bandwidth on the H200 (../shared/gpu/README.md)


def time_ms(fn, iters: int = 30) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def weight_bytes(module: torch.nn.Module, skip: str = "embedding") -> int:
    """Bytes a step streams from HBM: every parameter except embedding tables (rows are gathered)."""
    return sum(p.numel() * p.element_size() for n, p in module.named_parameters() if skip not in n)


def frame_times(core, batches, context: int, talker_bytes: int, pred_bytes: int, text: str = "word ",
                eager: bool = True, on_batch=None) -> list[dict]:
    """Decode step (talker + code-0 sampling) and predictor frame, as graphs (and eagerly unless `eager` is
    False) at each batch size with `context` tokens of KV per request, beside the weight-streaming floor
    (talker_bytes once per step, pred_bytes once per predictor step). `on_batch(b, decode_fn, depth_fn)` runs
    with the stages ready (the kernel counts of bench/gpu_frame.py)."""
    runner, program = core.runner, core.program
    geom = program.lm_geometry
    kv_bytes_per_token = geom.num_layers * 2 * geom.num_kv_heads * geom.head_dim * 2
    rows = []
    for b in batches:
        reqs = [core.submit(SubmitRequest(f"t{b}-{i}", core.info.default_voice,
                                          SamplingParams(num_frames=context + 8), text * (context + 8), True))
                for i in range(b)]
        while min(r.num_tokens for r in reqs) < context:
            core.step()
        core.finish_lm()
        items = [core.scheduler.next_decode(r) for r in reqs]
        fill = runner.decode_filler(items)
        decode_eager = GraphedStage("decode-eager", [], runner._make_decode_buffers, runner._decode_body, False)
        depth_eager = GraphedStage("depth-eager", [], runner._make_depth_buffers, runner._depth_body, False)
        with torch.inference_mode():
            graph_ms = time_ms(lambda: runner.decode_stage.run(b, fill))
            eager_ms = time_ms(lambda: decode_eager.run(b, fill), iters=10) if eager else float("nan")
            depth_ms = time_ms(lambda: runner.depth_stage.run(b, lambda bb, s: None))
            depth_eager_ms = time_ms(lambda: depth_eager.run(b, lambda bb, s: None), iters=5) if eager else float("nan")
            if on_batch is not None:
                on_batch(b, lambda: runner.decode_stage.run(b, fill), lambda: runner.depth_stage.run(b, lambda bb, s: None))
        floor_ms = (talker_bytes + b * context * kv_bytes_per_token) / HBM_BYTES_PER_S * 1e3
        pred_floor_ms = (program.num_codebooks - 1) * pred_bytes / HBM_BYTES_PER_S * 1e3
        rows.append(dict(batch=b, context=context, decode_graph_ms=round(graph_ms, 3), decode_eager_ms=round(eager_ms, 3),
                         decode_floor_ms=round(floor_ms, 3), depth_graph_ms=round(depth_ms, 3),
                         depth_eager_ms=round(depth_eager_ms, 3), frame_graph_ms=round(graph_ms + depth_ms, 3),
                         frame_floor_ms=round(floor_ms + pred_floor_ms, 3)))
        for r in reqs:
            core.cancel(r.request_id)
        core.scheduler.check_integrity()
        assert core.scheduler.pages.num_free == core.scheduler.pages.num_pages
    return rows


def codec_times(core, batches) -> list[dict]:
    """One codec chunk per request (state carried), per frames-per-chunk stage and batch size."""
    runner = core.runner
    rows = []
    for frames, stage in sorted(runner.codec_stages.items()):
        for b in batches:
            with torch.inference_mode():
                ms = time_ms(lambda: stage.run(b, lambda bufs, size: None), iters=10)
            rows.append(dict(frames=frames, batch=b, chunk_ms=round(ms, 3),
                             audio_ms_per_chunk=round(frames * 1000 / core.info.frame_rate_hz, 1)))
    return rows
