"""Median GPU time of a function captured as a CUDA graph, for the one-call GPU benchmarks.

    from graph_timing import graph_ms      # the bench/ scripts run with bench/ on sys.path
    ms = graph_ms(lambda: op(x))           # 3 warm-up calls on a side stream, capture, median of 20 replays
    ms = graph_ms(fn, stream=lane)         # capture and replay on a given stream (a green-context partition)
"""

from __future__ import annotations

import torch


def graph_ms(fn, iters: int = 20, stream=None, warmup: int = 3) -> float:
    lane = stream
    stream = stream or torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):  # lazy initialisation, cuBLAS handles, per-shape choices: outside the capture
            fn()
    stream.synchronize()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=lane, capture_error_mode="relaxed" if lane is not None else "global"):
        fn()
    times = []
    with torch.cuda.stream(stream):
        for i in range(iters + 1):  # the first replay uploads the graph
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            if i:
                times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]
