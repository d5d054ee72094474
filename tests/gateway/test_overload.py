"""Overload protection over the WebSocket (`--max-admission-wait-ms`): a context the engine cannot start in time is
refused with a non-fatal `server_busy` error for that context alone; the session and its other contexts go on, and
the refused context holds nothing afterwards. A real uvicorn server and engine process."""

from __future__ import annotations

import asyncio
import json

import httpx

from conftest import connect, metric, run, start_session
from voxrt_live import ONE_PLACE, live_server

BURST = {"pacing": {"mode": "burst"}}
LONG = "This first turn is long enough to keep the only batch slot busy for many engine steps, on purpose."


def test_a_context_the_engine_cannot_start_in_time_is_refused_alone():
    # one live request (every policy: the deadline policy admits twice the batch by default) and no admission
    # wait: the second context, submitted while the first one holds the only place, is refused at the first step
    # that leaves it waiting
    with live_server(ONE_PLACE) as live:
        async def scenario():
            async with connect(live) as ws:
                await start_session(ws, **BURST)
                for cid, text in (("a", LONG), ("b", "Second turn.")):
                    await ws.send(json.dumps({"type": "text", "context_id": cid, "text": text}))
                    await ws.send(json.dumps({"type": "context.end", "context_id": cid}))
                errors, done, audio = [], {}, 0
                while len(done) < 2:
                    message = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(message, bytes):
                        audio += 1
                        continue
                    data = json.loads(message)
                    if data["type"] == "error":
                        errors.append(data)
                    elif data["type"] == "context.done":
                        done[data["context_id"]] = data
                # the session goes on: a context after the first one ended is served
                await ws.send(json.dumps({"type": "text", "context_id": "c", "text": "Third turn."}))
                await ws.send(json.dumps({"type": "context.end", "context_id": "c"}))
                while True:
                    message = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(message, str) and (data := json.loads(message))["type"] == "context.done":
                        return errors, done, audio, data

        errors, done, audio, third = run(scenario())
        assert [(e["code"], e["fatal"], e["context_id"]) for e in errors] == [("server_busy", False, "b")]
        assert "server at capacity" in errors[0]["message"] and "retry" in errors[0]["message"]
        assert done["b"]["reason"] == "error" and done["a"]["reason"] == "completed" and audio > 0
        assert third["context_id"] == "c" and third["reason"] == "completed"
        assert metric(live, "voxrt_engine_kv_pages_free") == metric(live, "voxrt_engine_kv_pages_total")
        assert metric(live, "voxrt_engine_requests") == 0
        scrape = httpx.get(f"{live.http}/metrics", timeout=10).text
        assert 'voxrt_errors_total{code="server_busy"} 1.0' in scrape.splitlines()


def test_tokens_still_streaming_into_a_refused_context_do_not_close_the_session():
    """An agent streaming LLM tokens into a context the engine refused keeps sending until it reads the error:
    its later tokens are dropped without a reply (before, each was an `invalid_message`, and the 21st in a row
    closed the whole session with 4400), and the session serves its next context."""
    with live_server(ONE_PLACE) as live:
        async def scenario():
            async with connect(live) as ws:
                await start_session(ws, **BURST)
                await ws.send(json.dumps({"type": "text", "context_id": "a", "text": LONG}))
                await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
                await ws.send(json.dumps({"type": "text", "context_id": "b", "text": "This turn streams its words. "}))
                messages = []
                while not any(m.get("type") == "error" for m in messages):  # b refused while still open
                    message = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(message, str):
                        messages.append(json.loads(message))
                for i in range(40):  # more than max_invalid_messages (20)
                    await ws.send(json.dumps({"type": "text", "context_id": "b", "text": f" token{i}"}))
                await ws.send(json.dumps({"type": "context.end", "context_id": "b"}))
                while {m["context_id"] for m in messages if m.get("type") == "context.done"} != {"a", "b"}:
                    message = await asyncio.wait_for(ws.recv(), 60)  # the only place is free again
                    if isinstance(message, str):
                        messages.append(json.loads(message))
                await ws.send(json.dumps({"type": "text", "context_id": "c", "text": "Next turn."}))
                await ws.send(json.dumps({"type": "context.end", "context_id": "c"}))
                while not any(m.get("type") == "context.done" and m["context_id"] == "c" for m in messages):
                    message = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(message, str):
                        messages.append(json.loads(message))
                return messages

        messages = run(scenario())
        errors = [m for m in messages if m["type"] == "error"]
        assert [(e["code"], e["fatal"], e["context_id"]) for e in errors] == [("server_busy", False, "b")]
        done = {m["context_id"]: m["reason"] for m in messages if m["type"] == "context.done"}
        assert done == {"a": "completed", "b": "error", "c": "completed"}
        assert metric(live, "voxrt_engine_requests") == 0
