"""CUDA graphs per batch-size bucket, with padding for the sizes in between.

A stage is a function over a set of static buffers (inputs and outputs). With graphs on, each bucket has its
own buffers and a graph captured over them; a call picks the smallest bucket that fits, fills its inputs
(padding rows included) and replays. With graphs off (CPU, or `use_cuda_graphs=False`) the same function
runs eagerly on buffers of the exact size, so both paths share one body.
"""

from __future__ import annotations

import bisect
import logging
import time
from typing import Any, Callable, Generic, TypeVar

import torch

log = logging.getLogger("voxrt.engine.graphs")

B = TypeVar("B")


def batch_buckets(max_batch_size: int) -> list[int]:
    """1, 2, 4, 8, every 8 up to 64, every 16 up to 128, every 32 beyond, and max_batch_size itself: padding
    stays under 1/8 of a bucket past 8 rows, and a batch of 256 needs 19 graphs per stage, not 35."""
    sizes = [s for s in (1, 2, 4) if s < max_batch_size] + list(range(8, min(max_batch_size, 65), 8))
    sizes += list(range(80, min(max_batch_size, 129), 16)) + list(range(160, max_batch_size, 32))
    return sorted({s for s in sizes if s < max_batch_size} | {max_batch_size})


class GraphedStage(Generic[B]):
    def __init__(self, name: str, buckets: list[int], make_buffers: Callable[[int, bool], B], body: Callable[[B], None],
                 use_graphs: bool, pool: Any = None) -> None:
        self.name = name
        self.buckets = sorted(buckets)
        self.make_buffers = make_buffers
        self.body = body
        self.use_graphs = use_graphs
        self.pool = pool
        self.buffers: dict[int, B] = {}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def capture(self, prepare: Callable[[B], None], stream: Any = None) -> None:
        """Captures every bucket, largest first (smaller ones reuse its pool memory). `prepare` fills
        buffers with a valid dummy batch (e.g. all rows padding) before the warm-up runs. `stream`: the lane
        the graphs belong to (a graph keeps the SM partition and priority of its capture stream)."""
        if not self.use_graphs:
            return
        start = time.monotonic()
        log.info("capturing %s graphs for %d batch sizes ...", self.name, len(self.buckets))  # progress on long starts
        for size in reversed(self.buckets):
            bufs = self.make_buffers(size, True)
            prepare(bufs)
            side = stream if stream is not None else torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up: lazy inits, cuBLAS handles, autotuning happen outside capture
                    self.body(bufs)
            side.synchronize()  # a green-context stream is not covered by a device-wide synchronize
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # On a lane stream the capture is "relaxed": the first GPU run of the lanes had a capture on the
            # urgent stream invalidated ("operation not permitted when stream is capturing") by an unsafe API
            # call that the default global mode forbids process-wide.
            mode = "relaxed" if stream is not None else "global"
            with torch.cuda.graph(graph, pool=self.pool, stream=stream, capture_error_mode=mode):
                self.body(bufs)
            if stream is not None:
                stream.synchronize()
            self.buffers[size] = bufs
            self.graphs[size] = graph
        log.info("captured %s graphs for batch sizes %s in %.1f s", self.name, self.buckets, time.monotonic() - start)

    def bucket_for(self, n: int) -> int | None:
        i = bisect.bisect_left(self.buckets, n)
        return self.buckets[i] if i < len(self.buckets) else None

    def run(self, n: int, fill: Callable[[B, int], None]) -> B:
        """Runs the stage for `n` real rows; `fill(buffers, size)` writes all `size` rows (n real + padding)."""
        size = self.bucket_for(n) if self.graphs else None
        if size is None:  # eager: exact size
            bufs = self.make_buffers(n, False)
            fill(bufs, n)
            self.body(bufs)
            return bufs
        bufs = self.buffers[size]
        fill(bufs, size)
        self.graphs[size].replay()
        return bufs

