"""Python's garbage collector as the step loop sees it (issue 13: the host loop must not make the GPU wait).

A collection stops the engine's only thread: a full (generation 2) one walks every tracked object, and after
start-up that is mostly the model, its graphs and caches, which never become garbage. `settle_heap()` runs once
after warm-up: one collection, then `gc.freeze()`, which moves every surviving object to a permanent generation
that later collections do not walk. `GcPauses` measures the collections (through `gc.callbacks`) so that the
trace can charge LM idle gaps to them (`gc_ms` on each `lm` record)."""

from __future__ import annotations

import gc
import time


def settle_heap() -> int:
    """Collects once and freezes what survives (start-up's objects); returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class GcPauses:
    """Time spent in collections since the last `take()`, and how many, while installed."""

    def __init__(self) -> None:
        self._started: float | None = None
        self.ms = 0.0
        self.count = 0
        self.max_ms = 0.0
        self.total_ms = 0.0
        self.total_count = 0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif phase == "stop" and self._started is not None:
            ms = (time.perf_counter() - self._started) * 1e3
            self._started = None
            self.ms += ms
            self.count += 1
            self.total_ms += ms
            self.total_count += 1
            self.max_ms = max(self.max_ms, ms)

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
