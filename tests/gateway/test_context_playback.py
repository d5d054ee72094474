"""A context's playback reports reach the engine as a plain call: no task is left behind per report, and a
report for a request the engine no longer knows (the engine died, the request ended) is dropped quietly
instead of leaving a task whose exception nobody retrieves (found after `kill -9` in the reliability long
form: bench/results/2026-12-01-reliability-full/)."""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace

from voxrt.engine.errors import EngineDeadError
from voxrt.gateway.context import ContextRunner
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.protocol.config import OutputFormat, Pacing, SessionConfig


class Engine:
    def __init__(self, dead: bool = False) -> None:
        self.info = SimpleNamespace(sample_rate=24000, consumes_text_incrementally=True)
        self.dead = dead
        self.reports: list[tuple] = []

    def set_playback_nowait(self, request_id, played_samples, anchor_ns=None, is_stalled=False):
        if self.dead:
            raise EngineDeadError("the engine process exited")
        self.reports.append((request_id, played_samples, is_stalled))

    async def set_playback(self, request_id, played_samples, anchor_ns=None, is_stalled=False):
        self.set_playback_nowait(request_id, played_samples, anchor_ns, is_stalled)  # as EngineClient's


async def _noop(*_args) -> None:
    return None


def _runner(engine: Engine) -> ContextRunner:
    config = SessionConfig("v", "m", OutputFormat("pcm16", 24000, 20), Pacing("realtime", 300))
    runner = ContextRunner("c1", 0, config, engine, _noop, _noop, lambda *_: None, GatewayMetrics())
    runner.request_id = "r1"
    return runner


def test_a_playback_report_reaches_the_engine_at_once_and_leaves_no_task():
    async def main():
        engine = Engine()
        runner = _runner(engine)
        before = len(asyncio.all_tasks())
        runner.report_playback(0.0)
        assert engine.reports and engine.reports[0][0] == "r1"  # sent before report_playback returned
        assert len(asyncio.all_tasks()) == before

    asyncio.run(main())


def test_a_report_to_a_dead_engine_is_dropped_without_an_unretrieved_task(caplog):
    async def main():
        runner = _runner(Engine(dead=True))
        before = len(asyncio.all_tasks())
        for played in (0.0, 100.0, 200.0):
            runner.report_playback(played)  # does not raise
        assert len(asyncio.all_tasks()) == before

    asyncio.run(main())
    gc.collect()  # a task left behind would log its unretrieved exception when it is collected
    assert "exception was never retrieved" not in caplog.text


class SlowCancelEngine(Engine):
    """An engine whose cancel takes 50 ms of the (fake) gateway clock: the stop's round trips."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.clock = clock

    async def cancel(self, request_id):
        self.clock[0] += 50.0
        await asyncio.sleep(0)


def test_a_cancel_reports_the_position_when_it_arrived_not_after_the_engine_stopped(monkeypatch):
    """`cancelled.played_ms` (and so `spoken_text`) is the playback position when the client's cancel arrived:
    a report of 820 ms followed at once by a cancel answers 820 however long the stop's round trips take
    (protocol.md's example); without `at_ms` the position when `cancel` is called."""
    import voxrt.gateway.context as context

    clock = [1000.0]
    monkeypatch.setattr(context, "now_ms", lambda: clock[0])

    async def main():
        runner = _runner(SlowCancelEngine(clock))
        runner.core.clock.on_audio_sent(2000.0, 100.0)  # 2 s of audio sent, playing since 100 ms
        runner.report_playback(820.0, 1000.0)
        played_ms, _ = await runner.cancel(at_ms=1000.2)  # arrived 0.2 ms after the report
        assert round(played_ms) == 820 and clock[0] == 1050.0

        clock[0] = 2000.0
        runner = _runner(SlowCancelEngine(clock))
        runner.core.clock.on_audio_sent(2000.0, 1100.0)
        runner.report_playback(820.0, 2000.0)
        clock[0] = 2010.0
        played_ms, _ = await runner.cancel()  # no arrival time: now, as it is called (10 ms after the report)
        assert round(played_ms) == 830

    asyncio.run(main())
