"""The gateway benchmark's pure parts: figures from the gateway processes' stats files, and the ceiling."""

from __future__ import annotations

from voxrt.loadgen import gateway_bench
from voxrt.loadgen.gateway_bench import ceiling, format_table, window_figures
from voxrt.timing import MsHistogram


def _stats(pid: int, t: float, cpu: float, frames: int, late_ms: list[float], writes: int | None = None) -> dict:
    late = MsHistogram()
    for x in late_ms:
        late.observe(x)
    stats = {"pid": pid, "monotonic_s": t, "cpu_s": cpu, "frames_sent": frames, "sessions": 1,
             "send_lateness": late.to_dict(), "loop_lag": MsHistogram().to_dict()}
    if writes is not None:  # gateways before round 12 wrote none
        stats["frame_writes"] = writes
    return stats


def test_window_adds_up_every_gateway_process():
    before = {1: _stats(1, 10.0, 5.0, 100, [0.5]), 2: _stats(2, 10.0, 1.0, 0, [])}
    after = {1: _stats(1, 20.0, 10.0, 600, [0.5, 1.0, 2.0]), 2: _stats(2, 20.0, 4.0, 500, [30.0]),
             3: _stats(3, 20.0, 9.0, 9, [])}  # a process seen only once is left out
    figures = window_figures(before, after)
    assert figures["cpu_cores"] == 0.8 and figures["frames_per_s"] == 100.0
    assert figures["jitter"]["count"] == 3 and figures["jitter"]["max_ms"] == 30.0
    assert figures["frame_writes_per_frame"] == 0.0  # no process wrote the figure


def test_writes_a_frame_over_the_window():
    before = {1: _stats(1, 10.0, 5.0, 100, [], writes=90)}
    after = {1: _stats(1, 20.0, 10.0, 1100, [], writes=590)}
    assert window_figures(before, after)["frame_writes_per_frame"] == 0.5


def _row(n: int, p99: float | None, errors: int = 0) -> dict:
    return {"sessions": n, "jitter": {"p50_ms": 1.0, "p99_ms": p99, "max_ms": 9.0}, "loop_lag": {"p99_ms": 1.0},
            "cpu_cores": n / 100, "cpu_per_session_pct": 1.0, "sessions_per_core": 100.0, "frames_per_s": 50.0 * n,
            "client_stalls": 0, "client_loop_lag_p99_ms": 1.0, "client_errors": errors}


def test_ceiling_is_the_last_point_of_the_unbroken_run_within_the_bound():
    rows = [_row(50, 1.0), _row(100, 4.9), _row(150, 7.0), _row(200, 3.0)]
    assert ceiling(rows, 5.0)["sessions"] == 100
    assert ceiling([_row(50, 6.0)], 5.0) is None
    assert ceiling([_row(50, 1.0, errors=1)], 5.0) is None
    assert "OVER" in format_table(rows, 5.0)


def test_serve_flags_after_the_double_dash_are_read_either_way():
    args = ["--opus-signal=music", "--encode-threads", "1", "--opus-rate", "wire"]
    assert gateway_bench._serve_arg(args, "--opus-signal", "auto") == "music"
    assert gateway_bench._serve_arg(args, "--opus-rate", "auto") == "wire"
    assert gateway_bench._serve_arg(args, "--loop", "auto") == "auto"
    assert gateway_bench._serve_arg(["--opus-rate"], "--opus-rate", "auto") == "auto"  # no value: the default


def test_the_floor_at_the_gateways_input_rate_times_the_same_streams():
    from voxrt.engine.standin import opus_floor_us

    at_48 = opus_floor_us(repeats=1, signal="music", num_streams=2)
    at_24 = opus_floor_us(repeats=1, signal="music", num_streams=2, rate=24000, bitrate=51000)
    assert 0 < at_48 < 1e5 and 0 < at_24 < 1e5  # microseconds a frame (the figures are the benchmark's to judge)
    floor = gateway_bench._floor(100.0, rate=24000)
    assert floor == {"rate": 24000, "us_per_frame": 100.0, "sessions_per_core": 200}
