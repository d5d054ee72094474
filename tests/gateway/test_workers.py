"""`voxrt serve --workers 2`: two gateway processes on one port (SO_REUSEPORT) in front of one engine process
(the stand-in core, so no model loads), with every protocol guarantee per context."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from voxrt.protocol.frames import decode_audio_frame


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("workers") / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "voxrt.cli", "serve", "--model", "standin", "--standin-speed",
                                 "20", "--port", str(port), "--workers", "2", "--allow-pinned-lengths"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while "voxrt ready" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    yield port, log.read_text()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


async def _one_turn(port: int, frames: int):
    import websockets  # noqa: PLC0415

    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime", max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.start", "pacing": {"mode": "burst"}}))
        assert json.loads(await ws.recv())["type"] == "session.started"
        await ws.send(json.dumps({"type": "text", "context_id": "t", "text": "Hello.", "num_frames": frames}))
        await ws.send(json.dumps({"type": "context.end", "context_id": "t"}))
        headers, done = [], None
        while done is None:
            message = await asyncio.wait_for(ws.recv(), 30)
            if isinstance(message, bytes):
                headers.append(decode_audio_frame(message)[0])
            elif json.loads(message)["type"] == "context.done":
                done = json.loads(message)
        return headers, done


def test_sessions_spread_over_two_gateway_processes(two_workers):
    port, ready_line = two_workers
    assert "2 gateway processes" in ready_line

    async def scenario():
        return await asyncio.gather(*(_one_turn(port, 10) for _ in range(8)))

    for headers, done in asyncio.run(asyncio.wait_for(scenario(), 120)):
        assert done["reason"] == "completed"
        assert [h.seq for h in headers] == list(range(len(headers)))  # no gaps
        assert [h.is_last for h in headers] == [False] * (len(headers) - 1) + [True]
        assert len(headers) == 40  # 10 frames of 80 ms in 20 ms Opus frames (nothing held back, nothing added)
