"""Playback reports reach the engine only when they move its deadlines (context.py, `_forward_playback`): the
first of each engine request, a change of the stall state, a drift of `PLAYBACK_TOLERANCE_MS` or more from the
last anchor sent. Time is set by hand: no clock is read."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from voxrt.gateway import context
from voxrt.gateway.context import PLAYBACK_TOLERANCE_MS, ContextRunner
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.protocol.config import OutputFormat, Pacing, SessionConfig


class Engine:
    def __init__(self) -> None:
        self.info = SimpleNamespace(sample_rate=24000, consumes_text_incrementally=True)
        self.reports: list[tuple] = []

    def set_playback_nowait(self, request_id, played_samples, anchor_ns=None, is_stalled=False):
        self.reports.append((request_id, played_samples, anchor_ns, is_stalled))


async def _noop(*_args) -> None:
    return None


@pytest.fixture
def clock_at(monkeypatch):
    now = {"ms": 0.0}
    monkeypatch.setattr(context, "now_ms", lambda: now["ms"])

    def at(ms: float) -> None:
        now["ms"] = ms
    return at


def _runner(engine: Engine, sent_ms: float) -> ContextRunner:
    """Built on a loop of its own (its AudioOut takes the running loop's pacer); driven by plain calls."""
    return asyncio.run(_build(engine, sent_ms))


async def _build(engine: Engine, sent_ms: float) -> ContextRunner:
    config = SessionConfig("v", "m", OutputFormat("pcm16", 24000, 20), Pacing("realtime", 300))
    runner = ContextRunner("c1", 0, config, engine, _noop, _noop, lambda *_: None, GatewayMetrics())
    runner.request_id = "r1"
    runner.clock.on_audio_sent(sent_ms, 1000.0)  # playback starts at t = 1000 ms
    return runner


def test_reports_that_agree_with_real_time_are_not_sent_again(clock_at):
    engine = Engine()
    runner = _runner(engine, 5000.0)
    for t, played in ((1100, 100), (1200, 200), (1300, 300 + PLAYBACK_TOLERANCE_MS / 2), (1400, 400)):
        clock_at(t)
        runner.report_playback(played)
    assert [r[1] for r in engine.reports] == [2400]  # only the first: the rest agree within the tolerance
    assert engine.reports[0][2] == 1100 * 1_000_000  # anchored at its arrival


def test_a_drift_past_the_tolerance_is_sent_and_drift_does_not_accumulate(clock_at):
    engine = Engine()
    runner = _runner(engine, 5000.0)
    clock_at(1100)
    runner.report_playback(100)
    step = PLAYBACK_TOLERANCE_MS * 0.6  # each report lags a little more: the second crosses the tolerance
    clock_at(1200)
    runner.report_playback(200 - step)
    clock_at(1300)
    runner.report_playback(300 - 2 * step)
    assert len(engine.reports) == 2 and engine.reports[1][1] == int((300 - 2 * step) * 24)


def test_a_stall_and_a_new_engine_request_are_always_sent(clock_at):
    engine = Engine()
    runner = _runner(engine, 500.0)  # 500 ms sent
    clock_at(1400)
    runner.report_playback(400)
    clock_at(1500)
    runner.report_playback(500)  # in step with real time, but the listener has run dry now
    assert [r[3] for r in engine.reports] == [False, True]
    runner.request_id = "r2"  # long-form: the turn went on in a further engine request
    clock_at(1500)
    runner.report_playback(500)
    assert [r[0] for r in engine.reports] == ["r1", "r1", "r2"]
