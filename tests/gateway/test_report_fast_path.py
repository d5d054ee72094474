"""Playback reports taken at once from uvicorn's protocol (server.py `on_text_now`, realtime.py `_receive_now`):
handled as the receive loop handles them, without the queue, the ASGI task's wake-up and Starlette's receive;
anything else, or a report while the loop is busy or out of rate tokens, goes the ordinary way, in order."""

from __future__ import annotations

import json
import time

from conftest import collect_context, connect, recv_json, run, start_session

from voxrt.gateway import realtime
from voxrt.gateway.admission import TokenBucket
from voxrt.gateway.context import ContextRunner


def test_try_take_takes_a_token_exactly_when_delay_s_would_say_zero():
    for tokens_before in (0.0, 0.5, 0.999, 1.0, 1.5, 3.0):
        a, b = TokenBucket(10, 4, now_s=0.0), TokenBucket(10, 4, now_s=0.0)
        a._tokens = b._tokens = tokens_before
        took = a.try_take(now_s=0.0)
        assert took == (b.delay_s(now_s=0.0) == 0.0)
        if took:
            assert a._tokens == b._tokens
        else:
            assert a._tokens == tokens_before  # nothing taken
    bucket = TokenBucket(10, 2, now_s=0.0)
    assert bucket.try_take(now_s=0.0) and bucket.try_take(now_s=0.0) and not bucket.try_take(now_s=0.0)
    assert bucket.try_take(now_s=0.1)  # refilled at the rate


def test_reports_are_taken_at_once_and_other_messages_keep_their_order(live, monkeypatch):
    taken, reports = [], []
    original_now, original_report = realtime.RealtimeSession._receive_now, ContextRunner.report_playback

    def spy_now(self, text):
        ok = original_now(self, text)
        taken.append((json.loads(text)["type"], ok))
        return ok

    def spy_report(self, played_ms):
        reports.append(played_ms)
        return original_report(self, played_ms)
    monkeypatch.setattr(realtime.RealtimeSession, "_receive_now", spy_now)
    monkeypatch.setattr(ContextRunner, "report_playback", spy_report)

    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, output={"codec": "opus", "sample_rate": 48000, "frame_ms": 20})
            await ws.send(json.dumps({"type": "text", "context_id": "a", "text": "Hello there, how are you today?"}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
            assert (await recv_json(ws))["type"] == "context.started"
            for i in range(5):
                await ws.send(json.dumps({"type": "playback", "context_id": "a", "played_ms": 10.0 * i}))
                time.sleep(0.01)  # noqa: ASYNC251 (let the server read each alone)
            # a report of an unknown context: parsed at once, its error sent by the receive loop, before the pong
            await ws.send(json.dumps({"type": "playback", "context_id": "nope", "played_ms": 1}))
            await ws.send(json.dumps({"type": "ping", "id": "p1"}))
            frames, messages = await collect_context(ws)
            return frames, messages

    frames, messages = run(scenario())
    assert [h.seq for h, _ in frames] == list(range(len(frames))) and frames[-1][0].is_last
    types = [m["type"] for m in messages]
    error = next(i for i, m in enumerate(messages) if m["type"] == "error")
    assert messages[error]["code"] == "unknown_context" and messages[error]["fatal"] is False
    assert types.index("pong") > error  # the client's order kept
    assert reports[:5] == [0.0, 10.0, 20.0, 30.0, 40.0]  # every report reached its context, in order
    assert ("playback", True) in taken  # taken at once through uvicorn's protocol
    assert messages[-1]["type"] == "context.done" and messages[-1]["reason"] == "completed"


def test_a_report_while_the_receive_loop_is_busy_is_left_to_the_queue():
    session = realtime.RealtimeSession.__new__(realtime.RealtimeSession)
    session._is_receiving, session.is_closed = False, False
    session.rate = TokenBucket(10, 2)
    assert not session._receive_now('{"type":"playback","context_id":"a","played_ms":1}')
    session._is_receiving = True
    session.rate._tokens = 0.0
    assert not session._receive_now('{"type":"playback","context_id":"a","played_ms":1}')  # no token: the loop waits
    assert not session._receive_now('{"type":"ping"}')  # not a report
