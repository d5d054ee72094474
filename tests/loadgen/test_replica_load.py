"""The load generator's per-replica figures from a server's /metrics (voxrt/loadgen/replica_load.py)."""

from __future__ import annotations

from voxrt.loadgen.replica_load import format_replicas, metrics_url, parse_replicas, point_replicas

SCRAPE = """\
# HELP voxrt_replica_contexts_routed_total new contexts routed to the replica
# TYPE voxrt_replica_contexts_routed_total counter
voxrt_replica_contexts_routed_total{replica="0"} 12.0
voxrt_replica_contexts_routed_total{replica="1"} 15.0
# TYPE voxrt_replica_restarts_total counter
voxrt_replica_restarts_total{replica="0"} 1.0
voxrt_replica_restarts_total{replica="1"} 0.0
# TYPE voxrt_replica_headroom gauge
voxrt_replica_headroom{replica="0"} 0.75
voxrt_replica_headroom{replica="1"} 0.5
# TYPE voxrt_replica_running gauge
voxrt_replica_running{replica="1"} 4.0
# TYPE voxrt_engine_running gauge
voxrt_engine_running 4.0
"""


def test_metrics_url_follows_the_websocket_url():
    assert metrics_url("ws://127.0.0.1:8000/v1/realtime") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("wss://tts.example/v1/realtime?token=x") == "https://tts.example/metrics"


def test_parse_and_point_figures():
    after = parse_replicas(SCRAPE)
    assert after["0"] == {"contexts": 12, "restarts": 1, "headroom": 0.75}
    assert after["1"]["running"] == 4
    before = {"0": {"contexts": 2, "restarts": 1}, "1": {"contexts": 5, "restarts": 0}}
    point = point_replicas(before, after)
    assert point["0"] == {"contexts": 10, "restarts": 0, "chunks_late": 0, "headroom": 0.75}
    assert point["1"]["contexts"] == 10 and point["1"]["running"] == 4
    assert format_replicas(point) == "replica 0: 10 contexts; replica 1: 10 contexts"
    assert parse_replicas("voxrt_engine_running 1.0\n") == {}
