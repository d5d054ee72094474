"""Frames written at once (gateway/wire.py, AudioOut's batches): several due frames in one transport write,
each still its own WebSocket message with its own header; the ordinary awaitable path wherever a write cannot
happen at once; nothing after close. No timing assertions: counts and orders only."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
from websockets.protocol import State
from websockets.server import ServerProtocol

from conftest import collect_context, connect, recv_json, run, start_session
from voxrt.audio import StreamEncoder
from voxrt.gateway import wire
from voxrt.gateway.audio_out import MAX_FRAMES_PER_WRITE, AudioOut
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.gateway.pacer import Pacer
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import OutputFormat, Pacing, SessionConfig
from voxrt.protocol.frames import decode_audio_frame


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


def _fake_protocol():
    """An object shaped like uvicorn's WebSocketsSansIOProtocol, with a real websockets ServerProtocol."""
    cls = type("WebSocketsSansIOProtocol", (), {"__module__": "uvicorn.protocols.websockets.fake"})
    protocol = cls()
    protocol.conn = ServerProtocol()
    protocol.conn.state = State.OPEN
    protocol.transport = _Transport()
    protocol.writable = asyncio.Event()
    protocol.writable.set()
    protocol.disconnected = protocol.close_sent = False
    protocol.handshake_complete, protocol.initial_response = True, None

    async def send(message) -> None:
        raise AssertionError("not used")
    protocol.send = send.__get__(protocol)
    return protocol


def _messages(data: bytes) -> list[bytes]:
    """The binary WebSocket messages in what the server wrote (RFC 6455 §5.2: unmasked, FIN, opcode 2)."""
    out, i = [], 0
    while i < len(data):
        assert data[i] == 0x82  # FIN + binary: one whole message per frame
        length, i = data[i + 1], i + 2
        assert length & 0x80 == 0  # a server never masks
        if length == 126:
            length, i = int.from_bytes(data[i:i + 2], "big"), i + 2
        out.append(data[i:i + length])
        i += length
    return out


def test_a_writer_without_uvicorns_protocol_never_writes_at_once():
    async def plain_send(message) -> None:
        pass
    for send in (None, plain_send, object().__init__):
        writer = wire.FrameWriter(send)
        assert not writer.is_direct and writer.write_now([b"x"]) is False


def test_write_now_frames_each_message_and_writes_them_together():
    protocol = _fake_protocol()
    writer = wire.FrameWriter(protocol.send)
    assert writer.is_direct
    assert writer.write_now([b"one", b"two", b"three"]) is True
    assert len(protocol.transport.writes) == 1  # one system call for three messages
    assert _messages(protocol.transport.writes[0]) == [b"one", b"two", b"three"]
    protocol.writable.clear()  # the transport's buffer is full: nothing now, the caller waits instead
    assert writer.write_now([b"four"]) is False and len(protocol.transport.writes) == 1
    protocol.writable.set()
    protocol.close_sent = True
    with pytest.raises(ConnectionError):
        writer.write_now([b"five"])
    protocol.close_sent, protocol.conn.state = False, State.CLOSING  # the client started closing
    with pytest.raises(ConnectionError):
        writer.write_now([b"six"])
    assert len(protocol.transport.writes) == 1


@pytest.mark.parametrize("length", [0, 125, 126, 172, 65535, 65536])
def test_a_single_message_is_written_with_binary_frames_header(length):
    protocol = _fake_protocol()
    data = bytes(range(256)) * (length // 256) + bytes(length % 256)
    assert wire.FrameWriter(protocol.send).write_now([data]) is True
    assert protocol.transport.writes == [wire.binary_frame(data)]


def test_the_middleware_hands_the_servers_send_to_the_websocket_scope():
    async def main():
        seen = {}

        async def app(scope, receive, send):
            seen.update(scope)
        async def send(message):
            pass
        scope = {"type": "websocket"}
        await wire.RawSendMiddleware(app)(scope, None, send)
        assert seen[wire.RAW_SEND_KEY] is send
        assert wire.RAW_SEND_KEY not in scope  # taken out when the app is done (no protocol -> scope -> send cycle)
        seen.clear()
        await wire.RawSendMiddleware(app)({"type": "http"}, None, send)
        assert wire.RAW_SEND_KEY not in seen

        async def failing(scope, receive, send):
            raise RuntimeError("boom")
        scope = {"type": "websocket"}
        with pytest.raises(RuntimeError):
            await wire.RawSendMiddleware(failing)(scope, None, send)
        assert wire.RAW_SEND_KEY not in scope
    run(main())


def test_a_closed_connection_leaves_no_reference_cycle(live):
    """A WebSocket connection's objects are freed when it closes, by reference counting, not left to the garbage
    collector: at 100+ sessions a second each gateway process otherwise ran full collections of tens of ms
    (bench/results/2026-12-05-h100-opentext/). The collector keeps what it finds unreachable here
    (DEBUG_SAVEALL) and none of it may be a connection's protocol or websockets' objects."""
    import gc

    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, output={"codec": "opus", "sample_rate": 48000, "frame_ms": 20})
            await ws.send(json.dumps({"type": "text", "context_id": "a", "text": "Hello there."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
            await recv_json(ws)
            return await collect_context(ws)

    run(scenario())  # a first session: whatever is made once per process (caches, lazy imports) is made
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(2):
            frames, messages = run(scenario())
            assert messages[-1]["reason"] == "completed"
        deadline = time.monotonic() + 10
        while live.state.num_sessions and time.monotonic() < deadline:  # the server side has closed too
            time.sleep(0.05)
        gc.collect()
        kinds = {f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    leaked = sorted(k for k in kinds if k.startswith(("websockets.", "uvicorn.", "voxrt.", "starlette.")))
    assert not leaked, leaked


# ---- AudioOut's batches -----------------------------------------------------------------------------------

def _speech(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 24000)) / 24000
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def _trace() -> list:
    return [0, 0, 0, None, None, None, None, None, None]


def _audio_out(send_bytes, send_now, mode: str = "realtime", lead_ms: int = 300):
    cfg = SessionConfig("v", "m", OutputFormat("opus", 48000, 20), Pacing(mode, lead_ms))
    encoder = StreamEncoder("opus", 24000, 48000, 20)
    out = AudioOut(1, cfg, encoder, PlaybackClock(), GatewayMetrics(), send_bytes, 0.0,
                   pacer=Pacer(asyncio.get_running_loop()), send_now=send_now)
    return out, encoder


def test_a_lead_fill_goes_in_few_writes_and_the_first_frame_alone():
    async def main():
        writes = []

        async def send_bytes(data: bytes) -> None:
            raise AssertionError("every write could happen at once")

        def send_now(frames: list) -> bool:
            writes.append(list(frames))
            return True
        out, encoder = _audio_out(send_bytes, send_now, lead_ms=300)
        frames = encoder.split(_speech(0.25))  # ~11 frames: all inside the 300 ms lead, due at once
        await out.play(frames, False, time.monotonic_ns() / 1e6, _trace())
        assert len(writes[0]) == 1  # the context's first frame, not held for the others' encoding
        assert len(writes) < len(frames) and max(len(w) for w in writes) <= MAX_FRAMES_PER_WRITE
        seqs = [decode_audio_frame(d)[0].seq for w in writes for d in w]
        assert seqs == list(range(len(frames))) and out.num_frames_sent == len(frames)
        assert out.metrics.send_lateness.count == len(frames) and out.clock.sent_ms == 20 * len(frames)
    run(main())


def test_when_a_write_cannot_happen_at_once_frames_take_the_awaitable_path_in_order():
    async def main():
        sent, gate = [], asyncio.Event()
        calls = 0

        async def send_bytes(data: bytes) -> None:
            if not sent:
                await gate.wait()  # the first one waits (a full transport)
            sent.append(decode_audio_frame(data)[0].seq)

        def send_now(frames: list) -> bool:
            nonlocal calls
            calls += 1
            if calls % 2:  # every other write is refused: nothing sent
                return False
            sent.extend(decode_audio_frame(d)[0].seq for d in frames)
            return True
        out, encoder = _audio_out(send_bytes, send_now, mode="burst")
        frames = encoder.split(_speech(0.5))
        play = asyncio.create_task(out.play(frames, False, 0.0, _trace()))
        await asyncio.sleep(0.05)
        assert sent == [] and not play.done()  # paused on the one send that waits
        gate.set()
        await play
        assert sent == list(range(len(frames))) and out.num_frames_sent == len(frames)
    run(main())


def test_a_write_that_fails_ends_play_and_nothing_is_left_queued():
    async def main():
        async def send_bytes(data: bytes) -> None:
            raise AssertionError("not reached")

        def send_now(frames: list) -> bool:
            raise ConnectionError("the client went away")
        out, encoder = _audio_out(send_bytes, send_now, mode="burst")
        with pytest.raises(ConnectionError, match="went away"):
            await out.play(encoder.split(_speech(0.3)), False, 0.0, _trace())
        assert not out._raw and not out._ready and not out._unsent and out.num_frames_sent == 0
        await out.aclose()
        with pytest.raises(ConnectionError):
            await out.play([], True, 0.0, _trace())
    run(main())


# ---- through uvicorn ------------------------------------------------------------------------------------------

def test_frames_reach_the_client_through_direct_writes(live, monkeypatch):
    writes = []
    original = wire.FrameWriter.write_now

    def spy(self, messages):
        ok = original(self, messages)
        writes.append((ok, len(messages)))
        return ok
    monkeypatch.setattr(wire.FrameWriter, "write_now", spy)

    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, output={"codec": "opus", "sample_rate": 48000, "frame_ms": 20})
            await ws.send(json.dumps({"type": "text", "context_id": "a", "text": "Hello there, how are you?"}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
            started = await recv_json(ws)
            frames, messages = await collect_context(ws)
            return started["index"], frames, messages

    index, frames, messages = run(scenario())
    assert messages[-1]["type"] == "context.done" and messages[-1]["reason"] == "completed"
    assert [h.seq for h, _ in frames] == list(range(len(frames))) and all(h.index == index for h, _ in frames)
    assert frames[0][0].is_first and frames[-1][0].is_last
    direct = sum(n for ok, n in writes if ok)
    assert direct > 0 and direct <= len(frames)  # uvicorn's protocol was found and written to directly
    assert any(ok and n > 1 for ok, n in writes)  # the lead fill went out in shared writes


@pytest.mark.parametrize("length", [0, 125, 126, 65535, 65536])
def test_binary_frame_is_what_websockets_frames_for_a_server(length):
    """The hand-written frame header (RFC 6455 §5.2) is byte for byte websockets' own for a server's binary
    message: FIN, opcode 2, no RSV bits, no mask, 7/16/64-bit length."""
    data = bytes(range(256)) * (length // 256) + bytes(length % 256)
    conn = ServerProtocol()
    conn.state = State.OPEN
    conn.send_binary(data)
    assert wire.binary_frame(data) == b"".join(conn.data_to_send())


def test_write_now_leaves_a_fragmented_message_of_websockets_alone():
    protocol = _fake_protocol()
    writer = wire.FrameWriter(protocol.send)
    protocol.conn.send_binary(b"part", fin=False)  # never done by uvicorn; websockets then wants a continuation
    assert writer.write_now([b"frame"]) is False and protocol.transport.writes == []
