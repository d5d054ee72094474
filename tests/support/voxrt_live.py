"""A real voxrt server (uvicorn + the tiny model's engine process on the CPU) on a free loopback port."""

from __future__ import annotations

import os
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

from voxrt.engine.messages import EngineConfig
from voxrt.gateway.config import GatewayConfig
from voxrt.gateway.server import make_server


# The model live servers run: tiny's structure with 4 codebooks (models/tiny/program.py), ~2.5x less CPU per
# frame than `tiny`; VOXRT_TEST_MODEL=tiny runs the suites on the default model.
TEST_MODEL = os.environ.get("VOXRT_TEST_MODEL", "tiny-lite")
# VOXRT_TEST_CHECKPOINT: the model's checkpoint (scripts/test.sh's Orpheus pass: `make-checkpoint --arch orpheus-tiny`)
TEST_CHECKPOINT = os.environ.get("VOXRT_TEST_CHECKPOINT") or None
# VOXRT_TEST_VOICES: the test model's default voice and another of its voices, which the suites ask for by
# name (tiny's: "default,alto")
TEST_VOICE, OTHER_VOICE = os.environ.get("VOXRT_TEST_VOICES", "default,alto").split(",")
# VOXRT_TEST_MAX_SEQ_LEN: the live engine's KV positions per request (Orpheus spends 7 a frame: 4096 for a
# sentence's ~11 s, which 1024 would cut)
TEST_MAX_SEQ_LEN = int(os.environ.get("VOXRT_TEST_MAX_SEQ_LEN", "1024"))


# An engine with room for one live request that refuses, at its next step, a stream it cannot start (overload
# protection, `max_admission_wait_ms`): `live_server(ONE_PLACE)`, then `busy_engine` takes the place.
ONE_PLACE = {"max_batch_size": 1, "max_live_requests": 1, "max_admission_wait_ms": 0.0}
BUSY_TEXT = " ".join(["This sentence keeps the engine busy for a good while."] * 12)


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
def live_server(engine_kwargs: dict | None = None, **gateway_kwargs):
    """VOXRT_TEST_SCHEDULER and VOXRT_TEST_LANES pick the engine's policy and lanes, VOXRT_TEST_MODEL its model
    (scripts/test.sh runs the gateway and client suites a second time with the deadline policy on inline lanes).
    `engine_kwargs` override EngineConfig fields (e.g. a small max_seq_len)."""
    gateway = GatewayConfig(**gateway_kwargs)
    engine = EngineConfig(**{"model": TEST_MODEL, "checkpoint": TEST_CHECKPOINT, "device": "cpu", "max_batch_size": 32,
                             "max_seq_len": TEST_MAX_SEQ_LEN,
                             "scheduler_type": os.environ.get("VOXRT_TEST_SCHEDULER", "base"),
                             "lanes": os.environ.get("VOXRT_TEST_LANES", "auto"), **(engine_kwargs or {})})
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


def metric(live: Live, name: str, default: float | None = None) -> float:
    """A metric's value in the server's /metrics: `name` alone or with its labels as the scrape writes them
    (`voxrt_errors_total{code="server_busy"}`); a missing series is `default`, or KeyError without one."""
    import httpx  # noqa: PLC0415

    for line in httpx.get(f"{live.http}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    if default is None:
        raise KeyError(name)
    return default


def run(coro, timeout_s: float = 120):
    """Runs a test's async scenario to completion, failing it after `timeout_s` instead of hanging."""
    import asyncio  # noqa: PLC0415

    return asyncio.run(asyncio.wait_for(coro, timeout_s))


@asynccontextmanager
async def busy_engine(live: Live):
    """Holds the engine's only place (`ONE_PLACE`) for the block: a context of a session of its own, generating
    (its first audio came) until the block ends or the test cancels it. Yields that context."""
    from voxrt.client import AudioFrame, connect  # noqa: PLC0415

    async with connect(live.ws, pacing="burst") as session:
        busy = session.context("busy")
        await busy.send(BUSY_TEXT)
        await busy.end()
        async for item in busy.events():
            if isinstance(item, AudioFrame):
                break
        yield busy
        await busy.cancel()  # idempotent
