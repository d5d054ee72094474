"""Timing statistics shared by the gateway and the load generator: a cheap fixed-bucket histogram of
milliseconds, and an asyncio event-loop lag monitor.

The histogram is on the per-frame hot path of the gateway (every frame's send lateness goes in), so an
observation is one `bisect` and one list increment; quantiles are read by linear interpolation inside the
bucket, which is exact enough for a 5 ms bound with buckets of 0.1-0.5 ms below 5 ms.

Event-loop lag: a task asks to wake every `interval_ms` and records how late it woke. Everything else on the
loop (encoding, sends, receives) that runs without yielding shows up as lag; it is the time any frame or
message waits for the loop, on top of its own cost.
"""

from __future__ import annotations

import asyncio
import bisect
import time

# Bucket upper edges in ms: 0.1 ms steps to 1 ms, 0.5 ms to 5 ms, then coarser. The last bucket is open.
EDGES_MS: tuple[float, ...] = (
    *(round(0.1 * i, 1) for i in range(1, 11)), 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 10.0, 12.5,
    15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0, 2000.0, 5000.0)


class MsHistogram:
    """Counts of millisecond values per bucket (`EDGES_MS`), with the sum and the maximum."""

    def __init__(self) -> None:
        self.counts = [0] * (len(EDGES_MS) + 1)
        self.total_ms = 0.0
        self.max_ms = 0.0

    def observe(self, value_ms: float) -> None:
        value_ms = max(0.0, value_ms)
        self.counts[bisect.bisect_left(EDGES_MS, value_ms)] += 1
        self.total_ms += value_ms
        if value_ms > self.max_ms:
            self.max_ms = value_ms

    @property
    def count(self) -> int:
        return sum(self.counts)

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0..1), interpolated linearly inside its bucket; None when empty."""
        n = self.count
        if n == 0:
            return None
        rank = q * n
        seen = 0
        for i, c in enumerate(self.counts):
            if c and seen + c >= rank:
                lo = 0.0 if i == 0 else EDGES_MS[i - 1]
                hi = EDGES_MS[i] if i < len(EDGES_MS) else max(self.max_ms, lo)
                return min(lo + (hi - lo) * max(0.0, rank - seen) / c, self.max_ms)
            seen += c
        return self.max_ms

    def merge(self, other: "MsHistogram") -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]
        self.total_ms += other.total_ms
        self.max_ms = max(self.max_ms, other.max_ms)

    def minus(self, earlier: "MsHistogram") -> "MsHistogram":
        """What was observed since `earlier` (a copy of this histogram taken before). The window's maximum is
        not kept by buckets: it is bounded by the upper edge of the highest bucket that grew (and this
        histogram's maximum)."""
        out = MsHistogram()
        out.counts = [a - b for a, b in zip(self.counts, earlier.counts)]
        out.total_ms = self.total_ms - earlier.total_ms
        grown = [i for i, c in enumerate(out.counts) if c]
        if grown:
            top = grown[-1]
            out.max_ms = min(self.max_ms, EDGES_MS[top]) if top < len(EDGES_MS) else self.max_ms
        return out

    def copy(self) -> "MsHistogram":
        out = MsHistogram()
        out.counts, out.total_ms, out.max_ms = list(self.counts), self.total_ms, self.max_ms
        return out

    def summary(self) -> dict:
        def r(x):
            return None if x is None else round(x, 3)
        n = self.count
        return {"count": n, "p50_ms": r(self.quantile(0.5)), "p99_ms": r(self.quantile(0.99)),
                "max_ms": round(self.max_ms, 3), "mean_ms": r(self.total_ms / n) if n else None}

    def to_dict(self) -> dict:
        return {"edges_ms": list(EDGES_MS), "counts": self.counts, "total_ms": self.total_ms, "max_ms": self.max_ms}

    @classmethod
    def from_dict(cls, data: dict) -> "MsHistogram":
        if list(data["edges_ms"]) != list(EDGES_MS):
            raise ValueError("histogram edges differ from this version's EDGES_MS")
        out = cls()
        out.counts, out.total_ms, out.max_ms = list(data["counts"]), data["total_ms"], data["max_ms"]
        return out


class LoopLagMonitor:
    """Records how late a task scheduled every `interval_ms` wakes, and the process's CPU time.

    `start()` on the running loop, `stop()` when done; `window()` returns the lag and CPU since the last call.
    """

    def __init__(self, interval_ms: float = 10.0) -> None:
        if not interval_ms > 0:
            raise ValueError(f"interval_ms must be > 0, got {interval_ms}")
        self.interval_ms = interval_ms
        self.lag = MsHistogram()
        self._task: asyncio.Task | None = None
        self._mark_lag = self.lag.copy()
        self._mark_wall_s = time.monotonic()
        self._mark_cpu_s = time.process_time()
        self._worst: tuple[float, float] | None = None  # (lag ms, monotonic s it ended) of the window's worst wake

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="voxrt-loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        interval_s = self.interval_ms / 1000
        while True:
            before = time.monotonic()
            await asyncio.sleep(interval_s)
            now = time.monotonic()
            lag_ms = (now - before - interval_s) * 1000
            self.lag.observe(lag_ms)
            if self._worst is None or lag_ms > self._worst[0]:
                self._worst = (lag_ms, now)

    def window(self) -> dict:
        """Lag percentiles and CPU (fraction of one core, all threads) since the previous call (or start), and
        when the worst lag ended (`max_at_s`, monotonic; None when nothing was observed): a stall's time, to
        set against the point's own timeline."""
        now_s, cpu_s = time.monotonic(), time.process_time()
        lag = self.lag.minus(self._mark_lag)
        wall_s = max(1e-9, now_s - self._mark_wall_s)
        out = {"loop_lag": lag.summary(), "cpu_cores": round((cpu_s - self._mark_cpu_s) / wall_s, 4),
               "wall_s": round(wall_s, 3), "max_at_s": self._worst[1] if self._worst is not None else None}
        self._mark_lag, self._mark_wall_s, self._mark_cpu_s = self.lag.copy(), now_s, cpu_s
        self._worst = None
        return out
