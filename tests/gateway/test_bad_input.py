"""Every bad input of the protocol's "Errors and limits" section, while another session keeps being served."""

from __future__ import annotations

import asyncio
import json
import time

import websockets

from conftest import collect_context, connect, metric, recv_json, run, start_session

BURST = {"pacing": {"mode": "burst"}}


async def _background_speaker(live, stop: asyncio.Event) -> int:
    """A well-behaved session that keeps completing contexts while the others misbehave."""
    completed = 0
    async with connect(live) as ws:
        await start_session(ws, **BURST)
        i = 0
        while not stop.is_set() or completed == 0:
            cid = f"bg{i}"
            await ws.send(json.dumps({"type": "text", "context_id": cid, "text": "Background speech goes on."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": cid}))
            _, messages = await collect_context(ws)
            assert messages[-1]["reason"] == "completed"
            completed += 1
            i += 1
    return completed


async def _error(ws) -> dict:
    data = await recv_json(ws)
    assert data["type"] == "error", data
    return data


async def _closed(ws) -> int:
    try:
        while True:
            await asyncio.wait_for(ws.recv(), 30)
    except websockets.ConnectionClosed:
        return ws.close_code


def test_bad_inputs_get_clear_errors_and_others_keep_being_served(live):
    async def scenario():
        stop = asyncio.Event()
        background = asyncio.create_task(_background_speaker(live, stop))
        limits = None

        # a first message that is not session.start: fatal 4400
        async with connect(live) as ws:
            await ws.send(json.dumps({"type": "text", "context_id": "x", "text": "hi"}))
            err = await _error(ws)
            assert err["fatal"] is True
            assert await _closed(ws) == 4400

        async with connect(live) as ws:
            # non-JSON before start: non-fatal, session can still start
            await ws.send("this is not json")
            assert (await _error(ws))["code"] == "invalid_json"
            # unknown voice, bad codec, bad rate: non-fatal, retry possible
            await ws.send(json.dumps({"type": "session.start", "voice": "nobody"}))
            err = await _error(ws)
            assert err["code"] == "unknown_voice" and err["fatal"] is False and "default" in err["message"]
            await ws.send(json.dumps({"type": "session.start", "output": {"codec": "mp3"}}))
            assert (await _error(ws))["code"] == "invalid_message"
            await ws.send(json.dumps({"type": "session.start", "output": {"sample_rate": 44100}}))
            assert (await _error(ws))["code"] == "invalid_message"
            started = await start_session(ws, **BURST)
            limits = started["limits"]
            # no type, unknown type, binary frame
            await ws.send(json.dumps({"context_id": "x"}))
            assert (await _error(ws))["code"] == "invalid_message"
            await ws.send(json.dumps({"type": "dance"}))
            assert (await _error(ws))["code"] == "unknown_type"
            await ws.send(b"\x01\x02\x03")
            assert (await _error(ws))["code"] == "unexpected_binary"
            # text over max_text_chars: non-fatal, for that context
            await ws.send(json.dumps({"type": "text", "context_id": "big", "text": "a" * (limits["max_text_chars"] + 1)}))
            err = await _error(ws)
            assert err["code"] == "text_too_long" and err["context_id"] == "big" and err["fatal"] is False
            # playback for an unknown context
            await ws.send(json.dumps({"type": "playback", "context_id": "ghost", "played_ms": 10}))
            assert (await _error(ws))["code"] == "unknown_context"
            # cancel of an unknown context: answered, not an error; cancel twice
            await ws.send(json.dumps({"type": "cancel", "context_id": "ghost"}))
            assert (await recv_json(ws))["type"] == "cancelled"
            await ws.send(json.dumps({"type": "cancel", "context_id": "ghost"}))
            assert (await recv_json(ws))["type"] == "cancelled"
            # ping still works after all that, and the session still speaks
            await ws.send(json.dumps({"type": "ping", "id": 7}))
            pong = await recv_json(ws)
            assert pong["type"] == "pong" and pong["id"] == 7
            await ws.send(json.dumps({"type": "text", "context_id": "ok", "text": "Still fine."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "ok"}))
            await recv_json(ws)
            _, messages = await collect_context(ws)
            assert messages[-1]["reason"] == "completed"
            # a message over max_message_bytes: error, then close 1009
            await ws.send(json.dumps({"type": "text", "context_id": "huge", "text": "b" * limits["max_message_bytes"]}))
            err = await _error(ws)
            assert err["fatal"] is True
            assert await _closed(ws) == 1009

        # disconnect mid-stream: the engine request is cancelled and its pages return
        ws = await websockets.connect(live.ws)
        await start_session(ws, pacing={"mode": "realtime", "lead_ms": 100})
        await ws.send(json.dumps({"type": "text", "context_id": "cut", "text": "A long answer. " * 20}))
        while not isinstance(await asyncio.wait_for(ws.recv(), 30), bytes):
            pass
        await ws.close()

        stop.set()
        return await background

    completed = run(scenario(), timeout_s=240)
    assert completed >= 1
    for _ in range(100):
        if metric(live, "voxrt_engine_requests") == 0:
            break
        time.sleep(0.1)
    assert metric(live, "voxrt_engine_kv_pages_free") == metric(live, "voxrt_engine_kv_pages_total")
    assert metric(live, "voxrt_engine_slots_free") > 0 and metric(live, "voxrt_engine_pool_ok") == 1
    assert metric(live, "voxrt_sessions") == 0 and metric(live, "voxrt_contexts") == 0


def test_garbage_forever_is_closed(live):
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws)
            limit = 25
            for _ in range(limit):
                await ws.send("{not json")
            return await _closed(ws)

    assert run(scenario()) == 4400
