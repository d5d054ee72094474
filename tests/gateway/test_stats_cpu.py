"""The stats file's CPU figures: `cpu_s` counts every thread of the gateway process (encode workers too),
`loop_cpu_s` the event loop's thread alone; the gateway benchmark sums both over processes (CPU accounting,
not wall time: no timing assertions)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

from voxrt.gateway.metrics import GatewayMetrics
from voxrt.gateway.stats import StatsWriter
from voxrt.loadgen.gateway_bench import us_per_frame, window_figures
from voxrt.timing import MsHistogram


def _spin_thread_cpu(seconds: float) -> None:
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


def test_cpu_s_counts_other_threads_and_loop_cpu_s_the_loop_alone(tmp_path):
    async def main():
        state = SimpleNamespace(metrics=GatewayMetrics(), num_sessions=0)
        writer = StatsWriter(str(tmp_path / "stats"), state)
        writer.write()
        first = json.loads(open(writer.path).read())
        other = threading.Thread(target=_spin_thread_cpu, args=(0.2,))  # a worker's CPU, off the loop
        other.start()
        other.join()
        writer.write()
        second = json.loads(open(writer.path).read())
        d_cpu, d_loop = second["cpu_s"] - first["cpu_s"], second["loop_cpu_s"] - first["loop_cpu_s"]
        assert d_cpu >= 0.2 * 0.9 and d_cpu - d_loop >= 0.2 * 0.9
        assert 0 <= d_loop <= d_cpu
    asyncio.run(main())


def _stats(pid: int, t: float, cpu: float, loop_cpu: float | None, frames: int) -> dict:
    out = {"pid": pid, "monotonic_s": t, "cpu_s": cpu, "frames_sent": frames, "sessions": 1,
           "send_lateness": MsHistogram().to_dict(), "loop_lag": MsHistogram().to_dict()}
    if loop_cpu is not None:
        out["loop_cpu_s"] = loop_cpu
    return out


def test_the_bench_sums_loop_cpu_over_processes_and_drops_it_when_one_lacks_it():
    before = {1: _stats(1, 10.0, 5.0, 3.0, 100), 2: _stats(2, 10.0, 1.0, 1.0, 0)}
    after = {1: _stats(1, 20.0, 10.0, 6.0, 600), 2: _stats(2, 20.0, 4.0, 2.0, 500)}
    figures = window_figures(before, after)
    assert figures["cpu_cores"] == 0.8 and abs(figures["loop_cpu_cores"] - 0.4) < 1e-9
    assert us_per_frame(figures) == 8000.0 and abs(us_per_frame(figures, "loop_cpu_cores") - 4000.0) < 1e-6
    after[2] = _stats(2, 20.0, 4.0, None, 500)  # a gateway of an older tree
    assert window_figures(before, after)["loop_cpu_cores"] is None


def test_the_bench_window_counts_the_gateways_collections_when_written():
    before = {1: _stats(1, 10.0, 5.0, 3.0, 100)}
    after = {1: _stats(1, 20.0, 10.0, 6.0, 600)}
    assert window_figures(before, after)["gc"] is None  # a gateway that writes none (before 2026-12-05)
    early, late = MsHistogram(), MsHistogram()
    early.observe(40.0)
    late.observe(40.0)
    late.observe(3.0)
    late.observe(0.5)
    before[1]["gc"], after[1]["gc"] = early.to_dict(), late.to_dict()
    collections = window_figures(before, after)["gc"]
    assert collections["count"] == 2 and collections["max_ms"] <= 40.0  # the window's two, not the earlier one
    assert window_figures(before, after)["gc_generations"] == [None, None, None]  # none written per generation
    young, full = MsHistogram(), MsHistogram()
    young.observe(0.5)
    full.observe(40.0)
    before[1]["gc_generations"] = json.loads(json.dumps([MsHistogram().to_dict(), MsHistogram().to_dict(),
                                                         full.to_dict()]))  # a copy, as the file is
    full.observe(3.0)
    after[1]["gc_generations"] = [young.to_dict(), MsHistogram().to_dict(), full.to_dict()]
    before[1]["gc_collected"], after[1]["gc_collected"] = [0, 0, 5], [7, 0, 9]
    generations = window_figures(before, after)["gc_generations"]
    assert generations[0]["count"] == 1 and generations[0]["collected"] == 7 and generations[1] is None
    assert generations[2]["count"] == 1 and generations[2]["collected"] == 4
