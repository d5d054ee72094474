"""Per-replica load of a server under test, from its /metrics (`voxrt serve --dp-size N`: the `replica` label).

Scraped before and after each point (over the WebSocket only: engine-direct runs have no gateway); a point's
summary gets `replicas`: per replica, the contexts routed to it during the point, its restarts and late chunks
in the point, and its gauges at the end (ready, queue, admitted, decode batch, headroom). A server without
per-replica series (older, or another product) gives none, and the point goes on without them.
Parsing uses prometheus_client's own text parser; the scrape is one plain GET in a thread (no extra client).
"""

from __future__ import annotations

import asyncio
import urllib.parse
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = {"voxrt_replica_contexts_routed": "contexts", "voxrt_replica_restarts": "restarts",
            "voxrt_replica_chunks_late": "chunks_late"}
GAUGES = {"voxrt_replica_ready": "ready", "voxrt_replica_queue_depth": "queue_depth",
          "voxrt_replica_running": "running", "voxrt_replica_decode_batch": "decode_batch",
          "voxrt_replica_headroom": "headroom"}


def metrics_url(ws_url: str) -> str:
    """ws(s)://host:port/v1/realtime -> http(s)://host:port/metrics."""
    parts = urllib.parse.urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urllib.parse.urlunsplit((scheme, parts.netloc, "/metrics", "", ""))


def parse_replicas(text: str) -> dict[str, dict[str, float]]:
    """{replica: {short name: value}} of the counters and gauges above (PURE)."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        short = COUNTERS.get(family.name) or GAUGES.get(family.name)
        if short is None:
            continue
        for sample in family.samples:
            replica = sample.labels.get("replica")
            if replica is not None and not sample.name.endswith("_created"):
                out.setdefault(replica, {})[short] = sample.value
    return out


def point_replicas(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, dict]:
    """A point's per-replica figures: counters as the point's increase, gauges as at its end (PURE)."""
    point = {}
    for replica in sorted(after, key=lambda r: (len(r), r)):
        now, then = after[replica], before.get(replica, {})
        figures = {short: round(now.get(short, 0) - then.get(short, 0)) for short in COUNTERS.values()}
        figures.update({short: now[short] for short in GAUGES.values() if short in now})
        point[replica] = figures
    return point


async def scrape(url: str, timeout_s: float = 5.0) -> dict[str, dict[str, float]] | None:
    """The server's per-replica series, or None when /metrics cannot be read or has none."""
    def get() -> str:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (the server under test)
            return response.read().decode("utf-8", "replace")

    try:
        text = await asyncio.get_running_loop().run_in_executor(None, get)
        return parse_replicas(text) or None
    except (OSError, ValueError):
        return None


def format_replicas(point: dict[str, dict]) -> str:
    """One progress line: `replica 0: 12 contexts, ...; replica 1: ...`."""
    parts = []
    for replica, f in point.items():
        extra = "".join(f", {f[k]} {k.replace('_', ' ')}" for k in ("restarts", "chunks_late") if f.get(k))
        parts.append(f"replica {replica}: {f.get('contexts', 0)} contexts{extra}")
    return "; ".join(parts)
