"""Graceful drain (gateway/drain.py): what SIGTERM does to a running server. The server runs in a thread, so
the test delivers the signal the way uvicorn's handler would (`handle_exit(SIGTERM)`); the packaging test
(tests/packaging) sends a real SIGTERM to a `voxrt serve` process."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import httpx
import websockets

from conftest import connect, recv_json, run, start_session
from voxrt_live import live_server

BURST = {"pacing": {"mode": "burst"}}
LONG_TEXT = "This turn is long enough to outlast a one second grace period by a wide margin. " * 6


async def _until_closed(ws, timeout_s: float = 60) -> tuple[list[dict], int]:
    """Every JSON message until the server closes; (messages, close code)."""
    messages = []
    try:
        while True:
            message = await asyncio.wait_for(ws.recv(), timeout_s)
            if isinstance(message, str):
                messages.append(json.loads(message))
    except websockets.ConnectionClosed as closed:
        return messages, closed.rcvd.code if closed.rcvd else None


async def _wait_for(predicate, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


def test_sigterm_refuses_new_work_and_lets_running_contexts_finish():
    with live_server(drain_grace_s=120) as live:
        async def scenario():
            async with connect(live) as busy, connect(live) as idle:
                await start_session(busy, voice="default", **BURST)
                await start_session(idle, voice="default", **BURST)
                await busy.send(json.dumps({"type": "text", "context_id": "t1", "text": "Hello there, one turn."}))
                assert (await recv_json(busy))["type"] == "context.started"
                live.server.handle_exit(signal.SIGTERM, None)
                await _wait_for(lambda: live.state.draining)
                async with httpx.AsyncClient(base_url=live.http, timeout=30) as http:
                    ready = await http.get("/readyz")
                    assert ready.status_code == 503 and ready.json() == {"status": "draining"}
                    speech = await http.post("/v1/audio/speech", json={"input": "Hi.", "voice": "default"})
                    assert speech.status_code == 503 and speech.json()["error"]["code"] == "shutting_down"
                    assert (await http.get("/healthz")).status_code == 200  # alive: liveness must not kill it
                async with connect(live) as late:  # a new session: refused like a full server, so it retries
                    refused, code = await _until_closed(late)
                assert code == 4029 and refused[0]["code"] == "server_busy" and refused[0]["retry_after_ms"] > 0
                # the idle session leaves at once, told why
                messages, code = await _until_closed(idle)
                assert code == 1001
                assert messages[-1]["type"] == "error" and messages[-1]["code"] == "server_shutting_down"
                assert messages[-1]["fatal"] is True
                # the running context finishes: the rest of its turn is spoken, then its session is closed
                await busy.send(json.dumps({"type": "context.end", "context_id": "t1"}))
                messages, code = await _until_closed(busy)
                done = [m for m in messages if m["type"] == "context.done"]
                assert done and done[0]["reason"] == "completed" and done[0]["audio_ms"] > 0
                assert code == 1001 and messages[-1]["code"] == "server_shutting_down"

        run(scenario())
        deadline = time.monotonic() + 30
        while not live.server.should_exit:  # no session left: the drain ends and the server stops
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_grace_period_over_closes_running_contexts_with_a_reason():
    with live_server(drain_grace_s=1.0) as live:
        async def scenario():
            async with connect(live) as ws:
                await start_session(ws, voice="default")  # real-time pacing: the long turn takes many seconds
                await ws.send(json.dumps({"type": "text", "context_id": "t1", "text": LONG_TEXT}))
                await ws.send(json.dumps({"type": "context.end", "context_id": "t1"}))
                assert (await recv_json(ws))["type"] == "context.started"
                start = time.monotonic()
                live.server.handle_exit(signal.SIGTERM, None)
                messages, code = await _until_closed(ws)
                assert not [m for m in messages if m["type"] == "context.done"]  # cut, not completed
                assert code == 1001
                assert messages[-1]["type"] == "error" and messages[-1]["code"] == "server_shutting_down"
                assert "shutting down" in messages[-1]["message"]
                return time.monotonic() - start

        elapsed_s = run(scenario())
        assert elapsed_s >= 1.0  # not before the grace period
        deadline = time.monotonic() + 30
        while live.state.sessions:  # the session's end cancels its context (pages and slots return)
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert live.state.metrics.contexts._value.get() == 0
