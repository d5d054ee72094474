"""A real uvicorn server (tiny model, CPU engine process) on a free loopback port, per test module."""

from __future__ import annotations

import asyncio
import json

import websockets

from voxrt.protocol.frames import decode_audio_frame
from voxrt_live import Live, live_server, metric, run  # noqa: F401 (tests/support, on pytest's pythonpath)


async def recv_json(ws, timeout_s: float = 30) -> dict:
    """Next JSON message, skipping binary frames."""
    while True:
        message = await asyncio.wait_for(ws.recv(), timeout_s)
        if isinstance(message, str):
            return json.loads(message)


async def start_session(ws, **fields) -> dict:
    await ws.send(json.dumps({"type": "session.start", **fields}))
    started = await recv_json(ws)
    assert started["type"] == "session.started", started
    return started


async def collect_context(ws, timeout_s: float = 60):
    """Everything until the first `context.done`: (frames [(header, payload)], json messages)."""
    frames, messages = [], []
    while True:
        message = await asyncio.wait_for(ws.recv(), timeout_s)
        if isinstance(message, bytes):
            frames.append(decode_audio_frame(message))
        else:
            data = json.loads(message)
            messages.append(data)
            if data["type"] == "context.done":
                return frames, messages


def connect(live: Live, **kwargs):
    return websockets.connect(live.ws, max_size=None, **kwargs)
