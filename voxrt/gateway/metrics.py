"""Prometheus metrics of one gateway, in its own registry (tests run several apps in one process)."""

from __future__ import annotations

from typing import Callable

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from voxrt.timing import EDGES_MS, LoopLagMonitor, MsHistogram

TTFA_BUCKETS_S = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0)
_EDGES = np.array(EDGES_MS)


class FrameLateness:
    """Every frame's send lateness (ms), kept as one float appended to a list on the per-frame path (`paced`:
    frames whose due time the pacing rule set, `ready`: frames whose due time their chunk's arrival set) and
    folded into three MsHistograms (all frames, paced, ready) when they are read, or when the lists pass
    `FOLD_AT` values (AudioOut checks that once per chunk, so memory stays bounded with nobody reading).
    Two MsHistogram.observe calls a frame (bisect, increments, max) were the largest part of the per-frame
    metrics; folding ~2000 values at once is one numpy searchsorted and bincount. The folded figures are
    those observe would give (its rules: values clamped at 0, buckets by bisect_left), up to float rounding in
    the sums."""

    FOLD_AT = 4096

    def __init__(self) -> None:
        self.paced: list[float] = []
        self.ready: list[float] = []
        self._all, self._paced, self._ready = MsHistogram(), MsHistogram(), MsHistogram()

    @property
    def num_pending(self) -> int:
        return len(self.paced) + len(self.ready)

    def fold(self) -> None:
        for pending, hist in ((self.paced, self._paced), (self.ready, self._ready)):
            if not pending:
                continue
            values = np.maximum(np.array(pending, dtype=np.float64), 0.0)
            pending.clear()  # in place: AudioOut holds the lists' bound `append`
            counts = np.bincount(np.searchsorted(_EDGES, values, side="left"), minlength=len(EDGES_MS) + 1)
            for one in (hist, self._all):
                one.counts = [a + int(b) for a, b in zip(one.counts, counts)]
                one.total_ms += float(values.sum())
                one.max_ms = max(one.max_ms, float(values.max()))

    @property
    def all(self) -> MsHistogram:
        self.fold()
        return self._all

    @property
    def paced_hist(self) -> MsHistogram:
        self.fold()
        return self._paced

    @property
    def ready_hist(self) -> MsHistogram:
        self.fold()
        return self._ready


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions = Gauge("voxrt_sessions", "open WebSocket sessions", registry=r)
        self.contexts = Gauge("voxrt_contexts", "open contexts (agent turns being spoken)", registry=r)
        self.ttfa = Histogram("voxrt_ttfa_seconds", "time from a context's first text to its first audio frame sent",
                              buckets=TTFA_BUCKETS_S, registry=r)
        self.errors = Counter("voxrt_errors", "errors sent to clients, by code", ["code"], registry=r)
        self.http_requests = Counter("voxrt_http_speech_requests", "HTTP synthesis requests", ["endpoint"], registry=r)
        self.engine_waiting = Gauge("voxrt_engine_queue_depth", "engine requests waiting for admission", registry=r)
        self.engine_running = Gauge("voxrt_engine_running", "engine requests generating", registry=r)
        self.engine_requests = Gauge("voxrt_engine_requests", "live engine requests", registry=r)
        self.engine_pages_free = Gauge("voxrt_engine_kv_pages_free", "free KV-cache pages", registry=r)
        self.engine_pages_total = Gauge("voxrt_engine_kv_pages_total", "KV-cache pages", registry=r)
        self.engine_slots_free = Gauge("voxrt_engine_slots_free", "free per-request state slots", registry=r)
        self.engine_pool_ok = Gauge("voxrt_engine_pool_ok", "1 when the page and slot pools pass their integrity check", registry=r)
        self.engine_codec_launches = Counter("voxrt_engine_codec_launches", "codec launches by lane (loop: the "
                                             "time-shared loop)", ["lane"], registry=r)
        self.engine_chunks = Counter("voxrt_engine_chunks", "audio chunks with a deadline, decoded on time or late",
                                     ["timing"], registry=r)
        self.engine_deferred = Counter("voxrt_engine_deferred_admissions", "admissions a policy deferred to "
                                       "protect running streams", registry=r)
        self.engine_sm_switches = Counter("voxrt_engine_sm_mode_switches", "moves between SM splits "
                                          "(--sm-mode adaptive)", registry=r)
        self.engine_held = Counter("voxrt_engine_held_steps", "engine steps that admitted no stream because half "
                                   "the recent chunks were late (--deadline-late-chunk-hold-ms)", registry=r)
        self.engine_early = Counter("voxrt_engine_early_chunks", "chunks the deadline policy cut before all their "
                                    "frames were there, so as not to be late", registry=r)
        self._last: dict[tuple[str, str], int] = {}  # engine totals already counted
        self._state = None  # the app's state, read at scrape time (watch())
        # Per-frame figures kept in cheap histograms (voxrt/timing.py) and exported at scrape time: a frame's
        # send time against its due time (the pacing rule's earliest send, or its chunk's arrival when later),
        # and the event loop's lag (started by the app's lifespan).
        # (send_lateness, _paced, _ready below: read through `lateness`, which AudioOut appends to)
        self.lateness = FrameLateness()
        # voxrt_frames_sent: a plain int on the per-frame path, exported when scraped (a Prometheus Counter takes
        # a lock on every increment)
        self.num_frames_sent = 0
        self.num_frame_writes = 0  # transport writes that carried audio frames (one send() each; stats.py)
        self.loop_lag = LoopLagMonitor()
        ProcessCollector(registry=r)  # process_cpu_seconds_total etc.: CPU per gateway process
        r.register(_FrameCounter(self))
        r.register(_MsHistograms({"voxrt_frame_send_lateness_seconds": ("audio frame send time minus its due "
                                                                        "time", lambda: self.send_lateness),
                                  "voxrt_frame_send_lateness_paced_seconds": ("send lateness of the frames whose "
                                                                              "due time the pacing rule set",
                                                                              lambda: self.send_lateness_paced),
                                  "voxrt_frame_send_lateness_ready_seconds": ("send lateness of the frames whose "
                                                                              "due time their chunk's arrival "
                                                                              "set (lead fills)",
                                                                              lambda: self.send_lateness_ready),
                                  "voxrt_event_loop_lag_seconds": ("how late a 10 ms timer of the gateway's "
                                                                   "event loop fired", lambda: self.loop_lag.lag)}))

    @property
    def send_lateness(self) -> MsHistogram:
        """Every frame's send time minus its due time (ms)."""
        return self.lateness.all

    @property
    def send_lateness_paced(self) -> MsHistogram:
        """The frames whose due time the pacing rule set (audio_out.py)."""
        return self.lateness.paced_hist

    @property
    def send_lateness_ready(self) -> MsHistogram:
        """The frames whose due time their chunk's arrival set."""
        return self.lateness.ready_hist

    def watch(self, state) -> None:
        """Figures read from the app's state at scrape time: engine restarts and readiness, admission."""
        self._state = state
        self.registry.register(_StateCollector(state))

    def update_engine(self, stats) -> None:
        self.engine_waiting.set(stats.num_waiting)
        self.engine_running.set(stats.num_running)
        self.engine_requests.set(stats.num_requests)
        self.engine_pages_free.set(stats.num_pages_free)
        self.engine_pages_total.set(stats.num_pages_total)
        self.engine_slots_free.set(stats.num_slots_free)
        self.engine_pool_ok.set(1 if stats.pool_ok else 0)
        for lane, total in stats.codec_launches:
            self._advance(self.engine_codec_launches.labels(lane), ("launches", lane), total)
        self._advance(self.engine_chunks.labels("on_time"), ("chunks", "on_time"), stats.chunks_on_time)
        self._advance(self.engine_chunks.labels("late"), ("chunks", "late"), stats.chunks_late)
        self._advance(self.engine_deferred, ("deferred", ""), stats.deferred_admissions)
        self._advance(self.engine_early, ("early", ""), stats.early_chunks)
        self._advance(self.engine_held, ("held", ""), stats.held_steps)
        self._advance(self.engine_sm_switches, ("sm_switches", ""), stats.sm_mode_switches)

    def _advance(self, counter, key: tuple[str, str], total: int) -> None:
        """Engine totals -> Prometheus counters (incremented by what is new since the last scrape)."""
        delta = total - self._last.get(key, 0)
        if delta > 0:
            counter.inc(delta)
            self._last[key] = total

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _FrameCounter:
    """`voxrt_frames_sent_total`, read from `GatewayMetrics.num_frames_sent` at scrape time."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    def collect(self):
        yield CounterMetricFamily("voxrt_frames_sent", "binary audio frames sent", value=self._metrics.num_frames_sent)


class _MsHistograms:
    """Exports MsHistograms (milliseconds) as Prometheus histograms in seconds."""

    def __init__(self, histograms: dict[str, tuple[str, Callable[[], MsHistogram]]]) -> None:
        self._histograms = histograms

    def collect(self):
        for name, (doc, read) in self._histograms.items():
            hist = read()
            buckets, running = [], 0
            for edge_ms, count in zip((*EDGES_MS, float("inf")), hist.counts):
                running += count
                buckets.append((str(edge_ms / 1000) if edge_ms != float("inf") else "+Inf", running))
            yield HistogramMetricFamily(name.removesuffix("_seconds") + "_seconds", doc, buckets=buckets,
                                        sum_value=hist.total_ms / 1000)


class _StateCollector:
    """Engine supervision and admission, read from the app's state when scraped."""

    def __init__(self, state) -> None:
        self._state = state

    def collect(self):
        state = self._state
        engine = state.engine
        yield CounterMetricFamily("voxrt_engine_restarts", "engine processes restarted (or rejoined) after the "
                                  "engine died or stopped answering heartbeats",
                                  value=getattr(engine, "num_restarts", 0))
        yield GaugeMetricFamily("voxrt_engine_ready", "1 when the engine serves (0 while it starts or restarts)",
                                value=1 if state.engine_is_ready else 0)
        admission = state.admission
        if admission is not None:
            yield GaugeMetricFamily("voxrt_admission_active", "admission slots taken (realtime sessions and HTTP "
                                    "syntheses)", value=admission.num_active)
            yield GaugeMetricFamily("voxrt_admission_queued", "requests waiting for an admission slot",
                                    value=admission.num_queued)
            yield CounterMetricFamily("voxrt_admission_refused", "sessions and HTTP requests refused at capacity "
                                      "(4029 / 429)", value=admission.num_refused)
