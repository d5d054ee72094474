"""Python's garbage collector as a latency-bound loop sees it (issue 13: the engine's host loop must not make
the GPU wait; issue 21: a gateway worker's event loop must not hold every session's frames).

A collection stops the process's running thread: a full (generation 2) one walks every tracked object, and
after start-up that is mostly modules, the model, its graphs and caches, which never become garbage.
`settle_heap()` runs once after start-up: one collection, then `gc.freeze()`, which moves every surviving object
to a permanent generation that later collections do not walk. `raise_young_threshold()` makes the young collections
rarer where a loop times audio frames (below). The engine process calls it after warm-up, each
gateway worker once its engine client is connected (gateway/app.py; a full collection of a gateway's start-up
heap took 12 ms on the dev VM, 53 ms while `voxrt serve` still loaded torch there, though none ran while serving
in 60 s of the gateway benchmark: bench/results/2026-12-05-gateway-gc/), and each load generator process
before its point. `GcPauses` measures the collections (through `gc.callbacks`): the engine's trace charges LM
idle gaps to them (`gc_ms` on each `lm` record), the gateway's stats file keeps their histogram (`gc`).
"""

from __future__ import annotations

import gc
import os
import time

from voxrt.timing import MsHistogram


def settle_heap() -> int:
    """Collects once and freezes what survives (start-up's objects); returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


# A young collection every this many net new container objects instead of Python's 700 (gateway workers and the
# load generator's point processes: loops that time every audio frame). Objects that die before the next
# collection are never walked, so a larger young generation walks fewer objects in all and interrupts the loop
# ~20x less often; its own walk stays ~10,000 objects (ms). On the dev VM, one gateway process at 19 sessions a
# second: 5 collections in a run instead of 98-99, the longest 5.1-5.8 ms instead of 6.2-8.4, the loop's
# worst lag 4 ms instead of 9-10 (bench/results/2026-12-05-gc-threshold/). On an H100 host, six gateway processes at
# 104 req/s: 32 collections instead of 691, 189 ms collecting instead of 767, each young one up to 18 ms instead of
# 7, the same attainment, send jitter and loop lag p99 (bench/results/2026-12-05-h100-gc-batch/).
YOUNG_THRESHOLD = 10_000
# Sets the threshold `raise_young_threshold()` uses instead (an A/B on a GPU host: bench/gpu_product_path.sh's
# GW_GC_YOUNG); 700, Python's own, leaves the collector as Python sets it.
YOUNG_THRESHOLD_ENV = "VOXRT_GC_YOUNG_THRESHOLD"


def young_threshold() -> int:
    """`VOXRT_GC_YOUNG_THRESHOLD` when set (a positive integer, else ValueError naming it), else YOUNG_THRESHOLD."""
    raw = os.environ.get(YOUNG_THRESHOLD_ENV, "").strip()
    if not raw:
        return YOUNG_THRESHOLD
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{YOUNG_THRESHOLD_ENV} must be a positive integer (objects between young collections), "
                         f"got {raw!r}")
    return value


def raise_young_threshold(threshold: int | None = None) -> tuple[int, int, int]:
    """Sets the young generation's threshold to `threshold` (default `young_threshold()`; never lowers it; the older
    generations' stay as they are) and returns the collector's thresholds."""
    if threshold is None:
        threshold = young_threshold()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, threshold), middle, old)
    return gc.get_threshold()


class GcPauses:
    """Time spent in collections since the last `take()`, and how many, while installed."""

    def __init__(self) -> None:
        self._started: float | None = None
        self.ms = 0.0
        self.count = 0
        self.max_ms = 0.0
        self.total_ms = 0.0
        self.total_count = 0
        self.histogram = MsHistogram()  # every pause since install, ms
        # the same per generation (0 young ... 2 full): which one holds the loop says what to cut
        self.by_generation = [MsHistogram() for _ in range(3)]
        self.collected = [0, 0, 0]  # unreachable objects each generation's collections found (cycles freed)

    def _callback(self, phase: str, info: dict) -> None:
        """gc's callback, which must never raise: a collection can start anywhere, also a frame or two under the
        recursion limit (the gateway parsing a deeply nested JSON message, its error then handled), where any
        call in here raises RecursionError; Python reports that as an unraisable exception (pytest fails the test
        it lands in: tests/reliability's fuzzing, once in CI). Such a collection's pause is not counted."""
        try:
            self._record(phase, info)
        except RecursionError:
            self._started = None

    def _record(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif phase == "stop" and self._started is not None:
            ms = (time.perf_counter() - self._started) * 1e3
            self._started = None
            generation = info.get("generation")
            if generation in (0, 1, 2):
                self.by_generation[generation].observe(ms)
                self.collected[generation] += info.get("collected", 0)
            self.ms += ms
            self.count += 1
            self.total_ms += ms
            self.total_count += 1
            self.max_ms = max(self.max_ms, ms)
            self.histogram.observe(ms)

    def install(self) -> GcPauses:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        return self

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def take(self) -> tuple[float, int]:
        """(ms, collections) since the previous take."""
        out = (self.ms, self.count)
        self.ms, self.count = 0.0, 0
        return out
