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
                          codec_launches=(("urgent", 3),)))
    m.update_engine(stats(early_chunks=6, sm_mode_switches=2, deferred_admissions=1, chunks_on_time=5,
                          codec_launches=(("urgent", 3),)))  # only what is new counts
    text = m.render().decode()
    assert value(text, "voxrt_engine_early_chunks_total") == 6
    assert value(text, "voxrt_engine_sm_mode_switches_total") == 2
    assert value(text, "voxrt_engine_deferred_admissions_total") == 1
    assert value(text, 'voxrt_engine_codec_launches_total{lane="urgent"}') == 3
    assert value(text, "voxrt_engine_queue_depth") == 1
