"""A real uvicorn server (tiny model, CPU engine process) on a free loopback port, per test module."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest
import websockets

from voxrt.engine.messages import EngineConfig
from voxrt.gateway.config import GatewayConfig
from voxrt.gateway.server import make_server
from voxrt.protocol.frames import decode_audio_frame


@dataclass
class Live:
    host: str
    port: int
    server: object

    @property
    def http(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://{self.host}:{self.port}/v1/realtime"

    @property
    def state(self):
        return self.server.config.app.state.voxrt


@contextmanager
def live_server(**gateway_kwargs):
    gateway = GatewayConfig(**gateway_kwargs)
    engine = EngineConfig(device="cpu", max_batch_size=32, max_seq_len=1024)
    server = make_server(gateway, engine, "127.0.0.1", 0, log_level="warning")
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 180
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Live("127.0.0.1", port, server)
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def live():
    with live_server() as server:
        yield server


def run(coro, timeout_s: float = 120):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


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


def metric(live: Live, name: str) -> float:
    text = httpx.get(f"{live.http}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def connect(live: Live, **kwargs):
    return websockets.connect(live.ws, max_size=None, **kwargs)
