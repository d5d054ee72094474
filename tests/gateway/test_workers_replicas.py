"""`voxrt serve --workers 2 --dp-size 2`: two gateway processes, each joined to both engine replicas (the
stand-in core, so no model loads): every worker serves, every turn completes, and each worker's /readyz sees
both replicas."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _one_turn(port: int) -> dict:
    import websockets  # noqa: PLC0415

    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime", max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.start", "pacing": {"mode": "burst"}}))
        assert json.loads(await ws.recv())["type"] == "session.started"
        await ws.send(json.dumps({"type": "text", "context_id": "t", "text": "Hello.", "num_frames": 10}))
        await ws.send(json.dumps({"type": "context.end", "context_id": "t"}))
        while True:
            message = await asyncio.wait_for(ws.recv(), 30)
            if isinstance(message, str) and json.loads(message)["type"] == "context.done":
                return json.loads(message)


def test_two_workers_in_front_of_two_replicas(tmp_path):
    port = _free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "voxrt.cli", "serve", "--model", "standin", "--standin-speed",
                                 "20", "--port", str(port), "--workers", "2", "--dp-size", "2",
                                 "--allow-pinned-lengths"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "voxrt ready" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        assert "2 engine replicas, 2 gateway processes" in log.read_text()
        for _ in range(6):  # new connections: the kernel spreads them over both workers
            body = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10,
                             headers={"connection": "close"}).json()
            assert body["status"] == "ready" and body["replicas"] == {"ready": 2, "total": 2}

        async def scenario():
            return await asyncio.gather(*(_one_turn(port) for _ in range(8)))

        for done in asyncio.run(asyncio.wait_for(scenario(), 120)):
            assert done["reason"] == "completed" and done["audio_ms"] > 0
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
