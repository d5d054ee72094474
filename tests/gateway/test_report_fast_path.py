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

    def spy_report(self, played_ms, *now):  # (round 12: the read time comes along)
        reports.append(played_ms)
        return original_report(self, played_ms, *now)
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


def test_a_read_of_one_short_text_frame_skips_the_frame_parser_and_others_take_it(live, monkeypatch):
    """server.py's `data_received`: a read that is exactly one short, masked, unfragmented text frame goes to the
    session's hook without websockets' parser; a report split over two fragments, or one whose frame is too
    long for the short header, takes the parser, and every report reaches its context in order."""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol  # noqa: PLC0415

    parsed, reports = [], []
    original_parent, original_report = WebSocketsSansIOProtocol.data_received, ContextRunner.report_playback

    def spy_parent(self, data):
        parsed.append(bytes(data))
        return original_parent(self, data)

    def spy_report(self, played_ms, *now):  # (round 12: the read time comes along)
        reports.append(played_ms)
        return original_report(self, played_ms, *now)
    monkeypatch.setattr(WebSocketsSansIOProtocol, "data_received", spy_parent)
    monkeypatch.setattr(ContextRunner, "report_playback", spy_report)

    async def scenario():
        async with connect(live, compression=None) as ws:
            await start_session(ws, output={"codec": "opus", "sample_rate": 48000, "frame_ms": 20})
            await ws.send(json.dumps({"type": "text", "context_id": "a", "text": "Hello there, how are you today?"}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
            assert (await recv_json(ws))["type"] == "context.started"
            time.sleep(0.05)  # noqa: ASYNC251 (the server reads what came before on its own)
            num_before = len(parsed)
            for i in range(3):  # short frames, each read alone: the fast path
                await ws.send(json.dumps({"type": "playback", "context_id": "a", "played_ms": 10.0 * i}))
                time.sleep(0.01)  # noqa: ASYNC251
            num_fast = len(parsed) - num_before
            # the same report in two fragments (websockets' fragmented send), then one past 125 bytes: the parser
            await ws.send(iter(['{"type":"playback","context_id":"a",', '"played_ms":30.0}']))
            time.sleep(0.01)  # noqa: ASYNC251
            await ws.send(json.dumps({"type": "playback", "context_id": "a", "played_ms": 40.0, "pad": "x" * 120}))
            frames, messages = await collect_context(ws)
            return num_fast, frames, messages

    num_fast, frames, messages = run(scenario())
    assert num_fast == 0  # none of the three short reports went through websockets' parser
    assert reports[:5] == [0.0, 10.0, 20.0, 30.0, 40.0]  # every report reached its context, in order
    assert frames[-1][0].is_last and messages[-1]["type"] == "context.done"
    assert all(m["type"] != "error" for m in messages)
