"""Start-up measurement of what the policies' cost model needs: the LM step (decode + code predictor, or the
program's LM sub-steps of a frame) at the smallest and largest batch bucket, and codec launches per chunk
size and batch, each replayed as the graphs the engine will run, on their lanes. Fitted into a `CostModel`
(flags may override any field)."""

from __future__ import annotations

import torch

from voxrt.engine.runtime.lanes import LM
from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.plan import BACKGROUND


def lane_time_ms(fn, stream, repeats: int = 5) -> float:
    """GPU milliseconds per call of `fn` (which launches on `stream`, None: the current stream), after one
    warm call: CUDA events on that stream (a device-wide synchronize misses green-context streams)."""
    stream = stream or torch.cuda.current_stream()
    fn()
    stream.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(repeats):
        fn()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / repeats


@torch.inference_mode()
def measure_costs(runner) -> CostModel:
    """Replays captured graphs on their padding rows (scratch page and slot): no request state is touched."""
    lanes = runner.lanes
    lm_points = []
    lm_stream = lanes.stream(LM)
    for size in sorted({runner.decode_stage.buckets[0], runner.decode_stage.buckets[-1]}):
        decode = runner.decode_stage.graphs[size]
        depth = runner.depth_stage.graphs[size] if runner.program.has_depth else None

        def step(decode=decode, depth=depth) -> None:  # a frame as the program makes it (its frame shape)
            with lanes.on(LM):
                for _ in range(runner.tokens_per_frame):
                    decode.replay()
                if depth is not None:
                    depth.replay()
        lm_points.append((size, lane_time_ms(step, lm_stream)))
    codec_points = []
    stages = runner.codec_stages_by_lane.get(BACKGROUND, runner.codec_stages)
    stream = lanes.stream(BACKGROUND)
    for frames, stage in sorted(stages.items()):
        for size in sorted({stage.buckets[0], stage.buckets[-1]}):
            graph = stage.graphs[size]

            def run(graph=graph) -> None:
                with lanes.on(BACKGROUND):
                    graph.replay()
            codec_points.append((size, frames, lane_time_ms(run, stream)))
    return CostModel.fit(lm_points, codec_points)
