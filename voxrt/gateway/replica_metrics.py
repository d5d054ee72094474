"""Per-replica Prometheus series (`replica` label): one engine is replica "0"; `--dp-size N` gives "0".."N-1".

Read at scrape time from what the gateway already holds: each engine's latest pushed load report
(`EngineLoad`, about every 50 ms: voxrt/engine/process.py) and its supervisor's state, so a scrape asks no
engine anything. The aggregate engine series (`voxrt_engine_*`, metrics.py) stay what they were: with
replicas they are the sums over the ready replicas (`ReplicaSet.stats`).

| series | kind | meaning |
|---|---|---|
| `voxrt_replica_info{replica,device}` | gauge (1) | which device the replica's engine runs on |
| `voxrt_replica_ready` | gauge | 1 while the replica serves, 0 while it starts, restarts or is dead |
| `voxrt_replica_restarts_total` | counter | its engine restarted after it died or froze |
| `voxrt_replica_contexts_routed_total` | counter | new contexts (and HTTP syntheses) routed to it |
| `voxrt_replica_queue_depth` | gauge | requests waiting for admission |
| `voxrt_replica_running` | gauge | requests admitted (holding KV pages and a slot) |
| `voxrt_replica_decode_batch` | gauge | requests its latest LM step decoded |
| `voxrt_replica_max_batch_size` | gauge | the most one LM step decodes |
| `voxrt_replica_least_slack_seconds` | gauge | least slack of its generating streams' next chunks (absent: none) |
| `voxrt_replica_headroom` | gauge | the routing rule's headroom (voxrt/engine/headroom.py; absent: not ready) |
| `voxrt_replica_kv_pages_free`, `voxrt_replica_slots_free` | gauge | free KV pages, free state slots |
| `voxrt_replica_chunks_late_total` | counter | chunks with a deadline decoded after it (since its engine started) |
| `voxrt_replica_load_age_seconds` | gauge | age of the load report these figures come from |
"""

from __future__ import annotations

import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from voxrt.engine.headroom import headroom
from voxrt.engine.replicas import ReplicaSet


def replica_set(engine) -> ReplicaSet | None:
    """The engine as a replica set: itself with --dp-size N, a set of one around a single engine."""
    if engine is None:
        return None
    return engine if isinstance(engine, ReplicaSet) else ReplicaSet([engine])


class ReplicaCollector:
    """Registered in the app's registry (app.py); reads `state.engine` when scraped."""

    def __init__(self, state) -> None:
        self._state = state

    def collect(self):
        replicas = replica_set(self._state.engine)
        families = {
            "info": GaugeMetricFamily("voxrt_replica_info", "the device each replica's engine runs on (value 1)",
                                      labels=["replica", "device"]),
            "ready": GaugeMetricFamily("voxrt_replica_ready", "1 while the replica serves (0 while it starts, "
                                       "restarts or is dead)", labels=["replica"]),
            "restarts": CounterMetricFamily("voxrt_replica_restarts", "the replica's engine restarted after it "
                                            "died or stopped answering heartbeats", labels=["replica"]),
            "routed": CounterMetricFamily("voxrt_replica_contexts_routed", "new contexts and HTTP syntheses "
                                          "routed to the replica", labels=["replica"]),
            "waiting": GaugeMetricFamily("voxrt_replica_queue_depth", "requests waiting for admission",
                                         labels=["replica"]),
            "running": GaugeMetricFamily("voxrt_replica_running", "requests admitted (holding KV pages and a "
                                         "slot)", labels=["replica"]),
            "batch": GaugeMetricFamily("voxrt_replica_decode_batch", "requests the latest LM step decoded",
                                       labels=["replica"]),
            "max_batch": GaugeMetricFamily("voxrt_replica_max_batch_size", "the most one LM step decodes",
                                           labels=["replica"]),
            "slack": GaugeMetricFamily("voxrt_replica_least_slack_seconds", "least slack of the generating "
                                       "streams' next chunks", labels=["replica"]),
            "headroom": GaugeMetricFamily("voxrt_replica_headroom", "SLO headroom by the routing rule (1 idle, "
                                          "below 0 overloaded)", labels=["replica"]),
            "pages": GaugeMetricFamily("voxrt_replica_kv_pages_free", "free KV-cache pages", labels=["replica"]),
            "slots": GaugeMetricFamily("voxrt_replica_slots_free", "free per-request state slots",
                                       labels=["replica"]),
            "late": CounterMetricFamily("voxrt_replica_chunks_late", "chunks with a deadline decoded after it, "
                                        "since the replica's engine started", labels=["replica"]),
            "age": GaugeMetricFamily("voxrt_replica_load_age_seconds", "age of the load report behind these "
                                     "figures", labels=["replica"]),
        }
        if replicas is not None:
            now_s = time.monotonic()
            for index, (client, load) in enumerate(zip(replicas.replicas, replicas.loads(now_s))):
                self._one(families, str(index), client, load, getattr(client, "num_contexts", 0), now_s)
        yield from families.values()

    @staticmethod
    def _one(families: dict, label: str, client, load, num_routed: int, now_s: float) -> None:
        info = client.info
        families["info"].add_metric([label, info.device if info is not None else ""], 1)
        families["ready"].add_metric([label], 1 if client.is_ready else 0)
        families["restarts"].add_metric([label], client.num_restarts)
        families["routed"].add_metric([label], num_routed)
        room = headroom(load)
        if room is not None:
            families["headroom"].add_metric([label], room)
        report = client.load
        if report is None:
            return
        families["waiting"].add_metric([label], report.num_waiting)
        families["running"].add_metric([label], report.num_running)
        families["batch"].add_metric([label], report.decode_batch)
        families["max_batch"].add_metric([label], report.max_batch_size)
        if report.min_slack_ms is not None:
            families["slack"].add_metric([label], report.min_slack_ms / 1000)
        families["pages"].add_metric([label], report.num_pages_free)
        families["slots"].add_metric([label], report.num_slots_free)
        families["late"].add_metric([label], report.chunks_late)
        families["age"].add_metric([label], max(0.0, now_s - client.load_received_s))
