"""Engine totals -> Prometheus counters: each scrape adds what is new since the last one."""

from voxrt.engine.messages import EngineStats
from voxrt.gateway.metrics import GatewayMetrics


def stats(**totals) -> EngineStats:
    base = dict(token=0, num_waiting=1, num_running=2, num_requests=3, num_pages_total=100, num_pages_free=90,
                num_slots_total=8, num_slots_free=6, num_steps=10, num_failed_steps=0, pool_ok=True)
    return EngineStats(**(base | totals))


def value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_engine_totals_become_counters_once():
    m = GatewayMetrics()
    m.update_engine(stats(early_chunks=4, sm_mode_switches=2, deferred_admissions=1, chunks_on_time=5,
                          held_steps=7, codec_launches=(("urgent", 3),)))
    m.update_engine(stats(early_chunks=6, sm_mode_switches=2, deferred_admissions=1, chunks_on_time=5,
                          held_steps=9, codec_launches=(("urgent", 3),)))  # only what is new counts
    text = m.render().decode()
    assert value(text, "voxrt_engine_early_chunks_total") == 6
    assert value(text, "voxrt_engine_sm_mode_switches_total") == 2
    assert value(text, "voxrt_engine_deferred_admissions_total") == 1
    assert value(text, "voxrt_engine_held_steps_total") == 9
    assert value(text, 'voxrt_engine_codec_launches_total{lane="urgent"}') == 3
    assert value(text, "voxrt_engine_queue_depth") == 1


def test_frame_lateness_folds_into_what_observe_gives():
    """Per-frame lateness is a list append, folded into the histograms when read (metrics.py): the same
    buckets, count and maximum as MsHistogram.observe value by value, sums up to float rounding."""
    import random

    from voxrt.gateway.metrics import FrameLateness
    from voxrt.timing import EDGES_MS, MsHistogram

    rng = random.Random(7)
    values = [rng.choice([-1.0, 0.0, 0.1, 5.0, 4.99, *EDGES_MS]) if i % 3 else rng.uniform(-2, 300) for i in range(5000)]
    lateness, paced, ready, every = FrameLateness(), MsHistogram(), MsHistogram(), MsHistogram()
    for i, value in enumerate(values):
        (lateness.paced if i % 2 else lateness.ready).append(value)
        (paced if i % 2 else ready).observe(value)
        every.observe(value)
        if i == 2500:
            assert lateness.all.count == 2501 and lateness.num_pending == 0  # read part-way: folded so far
    for got, want in ((lateness.all, every), (lateness.paced_hist, paced), (lateness.ready_hist, ready)):
        assert got.counts == want.counts and got.max_ms == want.max_ms
        assert abs(got.total_ms - want.total_ms) < 1e-6 * max(1.0, want.total_ms)
