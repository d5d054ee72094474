"""`voxrt serve --loop auto|uvloop|asyncio` (gateway/event_loop.py): the choice resolves to uvloop where it can
be imported and to the standard library's loop otherwise, `--loop uvloop` without uvloop is a clear error
before anything starts, a server runs and paces audio on either loop, and the pacer does not spin on uvloop's
whole-millisecond timers."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

from voxrt.gateway import event_loop
from voxrt.gateway.event_loop import LoopUnavailable, describe, loop_factory, resolve_loop, uvloop_version
from voxrt.gateway.pacer import Pacer

# uvloop is a dependency where it has wheels (pyproject.toml); the fallback's tests run without it too
needs_uvloop = pytest.mark.skipif(uvloop_version() is None, reason="uvloop is not installed here")


@pytest.fixture
def no_uvloop(monkeypatch):
    """uvloop made unimportable here (None in sys.modules: `import uvloop` raises ImportError)."""
    monkeypatch.setitem(sys.modules, "uvloop", None)


@needs_uvloop
def test_auto_resolves_to_uvloop_when_it_imports():
    import uvloop  # noqa: PLC0415

    assert uvloop_version() == uvloop.__version__
    assert resolve_loop("auto") == resolve_loop("uvloop") == "uvloop"
    assert resolve_loop("asyncio") == "asyncio"
    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert describe("uvloop", "auto") == f"event loop: uvloop {uvloop.__version__} (--loop auto)"


def test_auto_falls_back_to_asyncio_without_uvloop_and_says_so(no_uvloop):
    assert uvloop_version() is None
    assert resolve_loop("auto") == "asyncio"
    assert resolve_loop("asyncio") == "asyncio"
    assert "uvloop is not installed" in describe("asyncio", "auto")
    with pytest.raises(LoopUnavailable, match="pip install uvloop"):
        resolve_loop("uvloop")
    with pytest.raises(ValueError, match="auto, uvloop, asyncio"):
        resolve_loop("trio")


@needs_uvloop
def test_run_uses_the_chosen_loop():
    async def kind():
        return type(asyncio.get_running_loop()).__module__.partition(".")[0]
    assert event_loop.run(kind(), "uvloop") == "uvloop"
    assert event_loop.run(kind(), "asyncio") == "asyncio"


def test_serve_loop_uvloop_without_uvloop_is_a_clear_error(no_uvloop, capsys):
    from voxrt.cli import main  # noqa: PLC0415

    with pytest.raises(SystemExit) as exc:
        main(["serve", "--model", "standin", "--port", "0", "--loop", "uvloop"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--loop uvloop: the uvloop package is not installed" in err and "--loop asyncio" in err


def test_gateway_config_refuses_an_unknown_loop():
    from voxrt.gateway.config import GatewayConfig  # noqa: PLC0415

    with pytest.raises(ValueError, match="loop must be auto, uvloop or asyncio"):
        GatewayConfig(loop="gevent")


@needs_uvloop
def test_the_pacer_does_not_spin_on_uvloop_timers():
    """uvloop's timers count whole milliseconds and a delay under 0.5 ms runs at once: asking for a wake-up
    `tick_ms` before a frame's due time made ~34 wake-ups a frame in the gateway benchmark, serving nothing.
    Now a few a frame at most."""
    class Stream:
        def __init__(self, pacer: Pacer, dues: list[float]) -> None:
            self.pacer, self.dues, self.num_served = pacer, dues, 0

        def on_due(self, now: float) -> float | None:
            self.dues.pop(0)
            self.num_served += 1
            return self.dues[0] if self.dues else None

        def prepare(self) -> None:
            pass

    async def main():
        pacer = Pacer(asyncio.get_running_loop())
        now = time.monotonic_ns() / 1e6
        streams = [Stream(pacer, [now + 5 + 7.3 * k + 20 * i for i in range(10)]) for k in range(3)]
        for stream in streams:
            pacer.schedule(stream, stream.dues[0])
        while any(s.dues for s in streams):
            await asyncio.sleep(0.01)
        return pacer.num_wakeups, sum(s.num_served for s in streams)

    wakeups, num_served = event_loop.run(main(), "uvloop")
    assert num_served == 30
    assert wakeups <= 3 * num_served, wakeups  # spinning made hundreds


@pytest.mark.parametrize("loop", [pytest.param("uvloop", marks=needs_uvloop), "asyncio"])
def test_a_server_paces_audio_on_either_loop(loop):
    from voxrt_live import live_server  # noqa: PLC0415

    import websockets  # noqa: PLC0415

    async def session(url: str) -> list[bytes]:
        async with websockets.connect(url, max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.start", "output": {"codec": "opus", "sample_rate": 48000,
                                                                         "frame_ms": 20},
                                      "pacing": {"mode": "realtime", "lead_ms": 40}}))
            assert json.loads(await ws.recv())["type"] == "session.started"
            await ws.send(json.dumps({"type": "text", "context_id": "c", "text": "Hi there.", "num_frames": 3}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "c"}))
            frames = []
            while True:
                message = await asyncio.wait_for(ws.recv(), 30)
                if isinstance(message, bytes):
                    frames.append(message)
                elif json.loads(message)["type"] == "context.done":
                    return frames

    with live_server({"model": "standin", "standin_speed": 20.0}, loop=loop, allow_pinned_lengths=True) as live:
        frames = asyncio.run(asyncio.wait_for(session(live.ws), 60))
        server_loop = live.server._loop
        assert type(server_loop).__module__.partition(".")[0] == loop
        assert live.server.loop_description.startswith(f"event loop: {loop}")
    assert len(frames) >= 12  # 3 model frames of 80 ms: 240 ms in 20 ms frames (the last padded)
    assert frames[0][1] & 1 and frames[-1][1] & 2  # FIRST on the first, LAST on the last
