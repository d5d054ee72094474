"""Per-request records -> a summary of one rate (PURE).

SLO: a request meets it when it completed, its TTFA is at most `ttfa_slo_ms` (200 ms) and it never stalled.
Attainment = meeting / all requests (failed ones count as missing it). Goodput = meeting / the arrival window
(`duration_s`). TTFA percentiles (linear interpolation) are over the requests that got audio.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

TTFA_SLO_MS = 200.0


@dataclass
class RequestRecord:
    id: str  # the workload row
    rate: float  # the offered rate of the run it belongs to
    arrival_s: float  # offset of its arrival in the run
    status: str  # "ok", "cancelled", or "error:<code>"
    ttfa_ms: float | None
    stalls: int
    stall_ms: float
    audio_s: float
    text_chars: int
    num_frames: int | None = None  # pinned length, when pinned
    server_ttfa_ms: float | None = None  # the server's own figure (WebSocket), for comparison
    connect_ms: float | None = None  # WebSocket handshake + session.start
    pinned_audio_s: float | None = None  # the audio the pinned length makes at the target's frame rate

    def to_json(self) -> dict:
        return asdict(self)


def meets_slo(record: RequestRecord, ttfa_slo_ms: float = TTFA_SLO_MS) -> bool:
    return (record.status == "ok" and record.ttfa_ms is not None and record.ttfa_ms <= ttfa_slo_ms
            and record.stalls == 0)


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(records: list[RequestRecord], rate: float, duration_s: float,
              ttfa_slo_ms: float = TTFA_SLO_MS) -> dict:
    n = len(records)
    good = sum(meets_slo(r, ttfa_slo_ms) for r in records)
    ok = [r for r in records if r.status == "ok"]
    ttfas = [r.ttfa_ms for r in records if r.ttfa_ms is not None]
    audio_s = sum(r.audio_s for r in records)
    return {
        "rate": rate,
        "duration_s": duration_s,
        "requests": n,
        "completed": len(ok),
        "failed": n - len(ok),
        "slo_ttfa_ms": ttfa_slo_ms,
        "slo_met": good,
        "attainment": good / n if n else 0.0,
        "stalled_requests": sum(r.stalls > 0 for r in records),
        "ttfa_p50_ms": percentile(ttfas, 50),
        "ttfa_p90_ms": percentile(ttfas, 90),
        "ttfa_p99_ms": percentile(ttfas, 99),
        "goodput_rps": good / duration_s if duration_s > 0 else 0.0,
        "audio_s_per_s": audio_s / duration_s if duration_s > 0 else 0.0,
        "mean_audio_s": sum(r.audio_s for r in ok) / len(ok) if ok else 0.0,
    }
