"""HTTP endpoints of the gateway against a live server."""

from __future__ import annotations

import io
import struct
import time
import wave

import httpx
import numpy as np

from conftest import metric, run
from voxrt.audio import OpusDecoder
from voxrt_live import OTHER_VOICE, TEST_MODEL, TEST_VOICE


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
    assert [m["id"] for m in models["data"]] == [TEST_MODEL]
    voices = httpx.get(f"{live.http}/v1/voices").json()
    assert voices["default"] == TEST_VOICE and {TEST_VOICE, OTHER_VOICE} <= {v["id"] for v in voices["voices"]}


def test_one_engine_is_replica_0(live):
    """Without --dp-size: /readyz as before (no replica counts), and the per-replica series name the one engine
    replica "0" (docs/multi-gpu.md)."""
    assert "replicas" not in httpx.get(f"{live.http}/readyz").json()
    for _ in range(500):  # the engine's first load report comes within ~50 ms of its start
        if live.state.engine.load is not None:
            break
        time.sleep(0.02)
    assert metric(live, 'voxrt_replica_ready{replica="0"}') == 1
    assert metric(live, 'voxrt_replica_max_batch_size{replica="0"}') == live.state.engine.load.max_batch_size


def test_speech_wav(live):
    response = httpx.post(f"{live.http}/v1/audio/speech", json={"model": TEST_MODEL, "input": "Hello **world** 👋.",
                                                               "voice": OTHER_VOICE, "response_format": "wav"}, timeout=60)
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
        ({"input": "x", "response_format": "wma"}, "invalid_format"),
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


def test_metrics_count_codec_launches_and_chunk_timing(live):
    """After some speech, /metrics counts codec launches by lane; the deadline pass also times the chunks of a
    streamed context (an HTTP request is not streamed: its chunks have no deadline)."""
    import os  # noqa: PLC0415

    from voxrt.client import connect  # noqa: PLC0415

    async def speak() -> None:
        async with connect(live.ws) as session:
            ctx = session.context()
            await ctx.send("Metrics, please, for a streamed context.")
            await ctx.end()
            await ctx.audio()

    run(speak())
    text = httpx.get(f"{live.http}/metrics", timeout=10).text
    launches = [line for line in text.splitlines() if line.startswith("voxrt_engine_codec_launches_total{")]
    assert launches and sum(float(line.rsplit(" ", 1)[1]) for line in launches) > 0
    chunks = {timing: metric(live, f'voxrt_engine_chunks_total{{timing="{timing}"}}')
              for timing in ("on_time", "late")}
    if os.environ.get("VOXRT_TEST_SCHEDULER") == "deadline":
        assert chunks["on_time"] + chunks["late"] > 0
    assert metric(live, "voxrt_engine_deferred_admissions_total") >= 0
    assert metric(live, "voxrt_engine_early_chunks_total") >= 0
    assert metric(live, "voxrt_engine_sm_mode_switches_total") == 0  # one split on the CPU
