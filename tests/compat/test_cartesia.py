"""The `cartesia` SDK (its websocket_base_url targets this server) against the Cartesia-compatible
WebSocket: pushed transcripts, raw encodings decoded to the expected duration, word timestamps, cancel."""

from __future__ import annotations

import base64

import cartesia
import numpy as np
import pytest

from compat_audio import TINY_CHARS_PER_S

TEXT_PARTS = ["Hello there, ", "my good ", "friend."]
TEXT = "".join(TEXT_PARTS)


@pytest.fixture(scope="module")
def client(live):
    return cartesia.Cartesia(api_key="unused", base_url=live.http,
                             websocket_base_url=live.ws.replace("/v1/realtime", ""))


def _speak(client, output_format, add_timestamps=False):
    chunks, events = [], []
    with client.tts.websocket_connect() as connection:
        ctx = connection.context(model_id="sonic-2", voice={"mode": "id", "id": "default"},
                                 output_format=output_format, add_timestamps=add_timestamps)
        for part in TEXT_PARTS:
            ctx.push(part)
        ctx.no_more_inputs()
        for event in ctx.receive():
            events.append(event)
            if event.type == "chunk":
                chunks.append(base64.b64decode(event.data))
    return b"".join(chunks), events


@pytest.mark.parametrize("encoding,rate,width", [("pcm_f32le", 44100, 4), ("pcm_s16le", 24000, 2),
                                                 ("pcm_mulaw", 8000, 1)])
def test_sdk_context_push_decodes_to_the_duration(client, encoding, rate, width):
    audio, events = _speak(client, {"container": "raw", "encoding": encoding, "sample_rate": rate})
    assert events[-1].type == "done"
    seconds = len(audio) / width / rate
    assert abs(seconds - len(TEXT) / TINY_CHARS_PER_S) < 0.5, seconds
    if encoding == "pcm_f32le":
        pcm = np.frombuffer(audio, dtype="<f4")
        assert np.isfinite(pcm).all() and np.abs(pcm).max() <= 1.0


def test_word_timestamps(client):
    _, events = _speak(client, {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
                       add_timestamps=True)
    stamps = [e.word_timestamps for e in events if e.type == "timestamps"]
    words = [w for s in stamps for w in s.words]
    assert words and "Hello" in " ".join(words)
    for s in stamps:
        assert len(s.words) == len(s.start) == len(s.end) and all(a <= b for a, b in zip(s.start, s.end))


def test_cancel_stops_a_context_and_the_connection_goes_on(client):
    fmt = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
    with client.tts.websocket_connect() as connection:
        long_ctx = connection.context(model_id="sonic-2", voice={"mode": "id", "id": "default"}, output_format=fmt)
        long_ctx.push("A long answer that is going to be interrupted before the end. " * 8)
        for event in long_ctx.receive():
            if event.type == "chunk":
                break
        long_ctx.cancel()
        short = connection.context(model_id="sonic-2", voice={"mode": "id", "id": "default"}, output_format=fmt)
        short.push("Next.")
        short.no_more_inputs()
        kinds = [e.type for e in short.receive()]
    assert kinds[-1] == "done" and "chunk" in kinds


def test_bad_requests_get_errors_and_the_connection_goes_on(live):
    import asyncio  # noqa: PLC0415
    import json  # noqa: PLC0415

    import websockets  # noqa: PLC0415

    from voxrt_live import run  # noqa: PLC0415

    fmt = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}

    async def scenario():
        async with websockets.connect(live.ws.replace("/v1/realtime", "/tts/websocket")) as ws:
            for bad in ("{nope", json.dumps({"transcript": "no context"}),
                        json.dumps({"context_id": "a", "transcript": "x", "voice": {"id": "default"},
                                    "output_format": {"container": "raw", "encoding": "pcm_s8", "sample_rate": 16000}}),
                        json.dumps({"context_id": "a", "transcript": "x", "voice": {"id": "nobody"},
                                    "output_format": fmt})):
                await ws.send(bad)
                reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
                assert reply["type"] == "error", (bad, reply)
            await ws.send(json.dumps({"context_id": "b", "transcript": "Fine.", "voice": {"id": "default"},
                                      "model_id": "sonic-2", "output_format": fmt}))
            kinds = []
            while not kinds or kinds[-1] != "done":
                kinds.append(json.loads(await asyncio.wait_for(ws.recv(), 60))["type"])
            return kinds

    assert "chunk" in run(scenario())
