"""HTTP endpoints of the gateway against a live server."""

from __future__ import annotations

import io
import struct
import wave

import httpx
import numpy as np

from voxrt.audio import OpusDecoder


def _ogg_packets(data: bytes) -> list[bytes]:
    """Minimal Ogg page parser (RFC 3533) for the test: returns the packets, checks the capture pattern."""
    packets, partial, pos = [], b"", 0
    while pos < len(data):
        assert data[pos:pos + 4] == b"OggS"
        num_segments = data[pos + 26]
        lacing = data[pos + 27:pos + 27 + num_segments]
        pos += 27 + num_segments
        for size in lacing:
            partial += data[pos:pos + size]
            pos += size
            if size < 255:
                packets.append(partial)
                partial = b""
    return packets


def test_health_ready_models_voices(live):
    assert httpx.get(f"{live.http}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{live.http}/readyz").json()["status"] == "ready"
    models = httpx.get(f"{live.http}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["tiny"]
    voices = httpx.get(f"{live.http}/v1/voices").json()
    assert voices["default"] == "default" and {"default", "alto"} <= {v["id"] for v in voices["voices"]}


def test_speech_wav(live):
    response = httpx.post(f"{live.http}/v1/audio/speech", json={"model": "tiny", "input": "Hello **world** 👋.",
                                                               "voice": "alto", "response_format": "wav"}, timeout=60)
    assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
    body = response.content
    assert body[:4] == b"RIFF" and body[8:12] == b"WAVE"
    rate = struct.unpack("<I", body[24:28])[0]
    assert rate == 24000 and len(body) - 44 > 24000 * 2 * 0.5


def test_speech_pcm_mulaw_opus(live):
    def post(fmt):
        response = httpx.post(f"{live.http}/v1/audio/speech", json={"input": "Short test sentence.",
                                                                   "response_format": fmt}, timeout=60)
        assert response.status_code == 200, response.text
        return response.content

    pcm = post("pcm")
    assert len(pcm) % 2 == 0 and len(pcm) > 24000
    mulaw = post("mulaw")
    assert abs(len(mulaw) / 8000 - len(pcm) / 2 / 24000) < 0.05  # same duration at 8 kHz
    packets = _ogg_packets(post("opus"))
    assert packets[0].startswith(b"OpusHead") and packets[1].startswith(b"OpusTags")
    decoder = OpusDecoder(48000)
    audio = np.concatenate([decoder.decode(p, 960) for p in packets[2:]])
    assert abs(len(audio) / 48000 - len(pcm) / 2 / 24000) < 0.05


def test_generate_streaming_and_whole(live):
    streamed = httpx.post(f"{live.http}/generate", files={"text": (None, "Hello from generate.")}, timeout=60)
    assert streamed.status_code == 200 and streamed.content[:4] == b"RIFF"
    whole = httpx.post(f"{live.http}/generate", data={"text": "Hello from generate.", "streaming": "false"}, timeout=60)
    assert whole.status_code == 200
    with wave.open(io.BytesIO(whole.content)) as f:  # exact sizes: the stdlib reader accepts it
        assert f.getframerate() == 24000 and f.getnframes() * 2 == len(whole.content) - 44


def test_http_errors_are_clear(live):
    cases = [
        ({"input": "x", "response_format": "mp3"}, "invalid_format"),
        ({"input": "", "response_format": "wav"}, "invalid_request"),
        ({"input": "hi", "voice": "nobody"}, "unknown_voice"),
        ({"input": "hi", "model": "gpt-9"}, "unknown_model"),
        ({"input": "a" * 30000}, "text_too_long"),
    ]
    for body, code in cases:
        response = httpx.post(f"{live.http}/v1/audio/speech", json=body, timeout=30)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["code"] == code
    bad_json = httpx.post(f"{live.http}/v1/audio/speech", content=b"{nope", timeout=30)
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == "invalid_json"
    missing = httpx.post(f"{live.http}/generate", data={"streaming": "false"}, timeout=30)
    assert missing.status_code == 400


def test_metrics_exposes_gateway_and_engine(live):
    text = httpx.get(f"{live.http}/metrics").text
    for name in ("voxrt_sessions", "voxrt_contexts", "voxrt_ttfa_seconds_bucket", "voxrt_frames_sent_total",
                 "voxrt_engine_queue_depth", "voxrt_engine_kv_pages_free"):
        assert name in text, name
