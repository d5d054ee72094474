"""voxrt.timing: the millisecond histogram and the event-loop lag monitor."""

from __future__ import annotations

import asyncio

import pytest

from voxrt.timing import LoopLagMonitor, MsHistogram


def test_quantiles_interpolate_inside_buckets():
    h = MsHistogram()
    for i in range(1000):
        h.observe(i / 100)  # 0 .. 9.99 ms, uniform
    assert h.count == 1000 and h.max_ms == pytest.approx(9.99)
    assert h.quantile(0.5) == pytest.approx(5.0, abs=0.1)
    assert h.quantile(0.99) == pytest.approx(9.9, abs=0.2)
    assert MsHistogram().quantile(0.5) is None
    h.observe(-3)  # a clock step backwards counts as 0, not as a negative lateness
    assert h.counts[0] >= 1


def test_window_and_round_trip():
    h = MsHistogram()
    h.observe(1.0)
    before = h.copy()
    h.observe(40.0)
    window = h.minus(before)
    assert window.count == 1 and window.max_ms == pytest.approx(40.0)
    again = MsHistogram.from_dict(h.to_dict())
    assert again.counts == h.counts and again.summary() == h.summary()
    with pytest.raises(ValueError, match="edges"):
        MsHistogram.from_dict({**h.to_dict(), "edges_ms": [1.0]})


def test_loop_lag_monitor_records_a_blocked_loop():
    async def scenario():
        monitor = LoopLagMonitor(interval_ms=5)
        monitor.start()
        await asyncio.sleep(0.02)
        import time  # noqa: PLC0415

        blocked_at = time.monotonic()
        time.sleep(0.05)  # the loop is blocked: the monitor's next wake-up is ~50 ms late
        unblocked_at = time.monotonic()
        await asyncio.sleep(0.02)
        called_at = time.monotonic()
        window = monitor.window()
        empty = monitor.window()  # nothing observed since: no time either
        await monitor.stop()
        return window, unblocked_at, called_at, empty

    window, unblocked_at, called_at, empty = asyncio.run(scenario())
    assert window["loop_lag"]["max_ms"] >= 30 and window["cpu_cores"] >= 0
    # when the worst lag ended: at the block's end or later (a loaded machine may hold a later wake-up longer)
    assert unblocked_at <= window["max_at_s"] <= called_at
    assert empty["max_at_s"] is None or empty["loop_lag"]["count"] > 0
    with pytest.raises(ValueError):
        LoopLagMonitor(interval_ms=0)
