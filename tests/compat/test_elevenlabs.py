"""ElevenLabs-compatible WebSockets against a live server: the `elevenlabs` SDK's realtime helper
(stream-input), and a client written from ElevenLabs' published multi-context message reference."""

from __future__ import annotations

import asyncio
import base64
import json

import elevenlabs
import pytest
import websockets

from compat_audio import TINY_CHARS_PER_S, decoded_seconds, s16_seconds
from voxrt_live import live_server, run

TOKENS = ["Hello", " there", ",", " my", " good", " friend", "."]
TEXT = "".join(TOKENS)


def sdk_client(live, **kwargs):
    client = elevenlabs.ElevenLabs(base_url=live.http, **kwargs)
    # The SDK's realtime helper always dials wss:// (RealtimeTextToSpeechClient._ws_base_url); this server runs
    # plain ws:// in the test. Behind TLS no change is needed (docs/compat-elevenlabs.md).
    client.text_to_speech._ws_base_url = live.ws.replace("/v1/realtime", "")
    return client


def expected_seconds(text: str) -> float:
    return len(text) / TINY_CHARS_PER_S


@pytest.mark.parametrize("output_format,rate", [("pcm_16000", 16000), ("pcm_24000", 24000)])
def test_sdk_convert_realtime_pcm(live, output_format, rate):
    audio = b"".join(sdk_client(live, api_key="unused").text_to_speech.convert_realtime(
        voice_id="default", text=iter(TOKENS), model_id="eleven_flash_v2_5", output_format=output_format))
    seconds = s16_seconds(audio, rate)
    assert abs(seconds - expected_seconds(TEXT)) < 0.5, seconds


def test_sdk_convert_realtime_mp3_default(live):
    audio = b"".join(sdk_client(live, api_key="unused").text_to_speech.convert_realtime(
        voice_id="default", text=iter(TOKENS)))  # output_format defaults to mp3_44100_128
    seconds, rate = decoded_seconds(audio, "mp3")
    assert rate == 44100 and abs(seconds - expected_seconds(TEXT)) < 0.5, (seconds, rate)


async def _stream_input(live, output_format: str, headers=None, query: str = "", first_extra=None):
    url = live.ws.replace("/v1/realtime", f"/v1/text-to-speech/default/stream-input?output_format={output_format}{query}")
    messages = []
    async with websockets.connect(url, additional_headers=headers or {}) as ws:
        await ws.send(json.dumps({"text": " ", "voice_settings": {"stability": 0.5, "similarity_boost": 0.8},
                                  "generation_config": {"chunk_length_schedule": [50, 120]}, **(first_extra or {})}))
        for token in TOKENS:
            await ws.send(json.dumps({"text": token + " " if token == "." else token, "try_trigger_generation": True}))
        await ws.send(json.dumps({"text": ""}))
        async for message in ws:
            messages.append(json.loads(message))
        return messages, ws.close_code


def test_stream_input_ulaw_opus_and_alignment(live):
    messages, code = run(_stream_input(live, "ulaw_8000"))
    assert code == 1000 and messages[-1] == {"isFinal": True}
    audio = b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))
    assert abs(len(audio) / 8000 - expected_seconds(TEXT)) < 0.5
    alignments = [m["alignment"] for m in messages if m.get("alignment")]
    assert alignments and all(len(a["chars"]) == len(a["charStartTimesMs"]) == len(a["charDurationsMs"])
                              for a in alignments)
    spoken = "".join(ch for a in alignments for ch in a["chars"])
    assert "Hello" in spoken and "friend" in spoken
    messages, code = run(_stream_input(live, "opus_48000_64"))
    ogg = b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))
    seconds, rate = decoded_seconds(ogg, "ogg")
    assert rate == 48000 and abs(seconds - expected_seconds(TEXT)) < 0.5


def test_bad_output_format_and_voice_are_refused(live):
    async def scenario(path):
        async with websockets.connect(live.ws.replace("/v1/realtime", path)) as ws:
            reply = json.loads(await ws.recv())
            with pytest.raises(websockets.ConnectionClosed):
                await ws.recv()
            return reply, ws.close_code

    reply, code = run(scenario("/v1/text-to-speech/default/stream-input?output_format=wav_1"))
    assert code == 1008 and reply["error"] == "invalid_output_format"
    reply, code = run(scenario("/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/stream-input"))
    assert code == 1008 and reply["error"] == "unknown_voice" and "default" in reply["message"]


async def _multi(live, headers=None):
    """Two contexts on one socket: ctx-a speaks to the end, ctx-b is closed mid-speech (barge-in); the socket
    stays open for a third, then close_socket."""
    url = live.ws.replace("/v1/realtime", "/v1/text-to-speech/default/multi-stream-input?output_format=pcm_24000")
    audio: dict[str, bytes] = {}
    finals: list[str] = []
    async with websockets.connect(url, additional_headers=headers or {}) as ws:
        async def until_final(context_id):
            while True:
                m = json.loads(await asyncio.wait_for(ws.recv(), 180))
                if m.get("audio"):
                    audio[m["contextId"]] = audio.get(m["contextId"], b"") + base64.b64decode(m["audio"])
                if m.get("isFinal"):
                    finals.append(m["contextId"])
                    if m["contextId"] == context_id:
                        return

        await ws.send(json.dumps({"text": " ", "context_id": "ctx-a", "voice_settings": {"stability": 0.5}}))
        await ws.send(json.dumps({"text": "Short answer. ", "context_id": "ctx-a"}))
        await ws.send(json.dumps({"context_id": "ctx-a", "flush": True}))
        await ws.send(json.dumps({"context_id": "ctx-a", "close_context": True}))  # the flush finishes
        await until_final("ctx-a")
        await ws.send(json.dumps({"text": "A much longer answer that will be interrupted before it ends, " * 6,
                                  "context_id": "ctx-b"}))
        while "ctx-b" not in audio:
            m = json.loads(await asyncio.wait_for(ws.recv(), 180))
            assert "error" not in m, m
            if m.get("audio"):
                audio[m["contextId"]] = audio.get(m["contextId"], b"") + base64.b64decode(m["audio"])
        await ws.send(json.dumps({"context_id": "ctx-b", "close_context": True}))
        await until_final("ctx-b")
        await ws.send(json.dumps({"text": "", "context_id": "ctx-c"}))  # keep-alive: nothing opens
        await ws.send(json.dumps({"text": "Still here. ", "context_id": "ctx-c", "flush": True}))
        await until_final("ctx-c")
        await ws.send(json.dumps({"close_socket": True}))
        rest = [json.loads(m) async for m in ws]
        for m in rest:
            if m.get("audio"):
                audio[m["contextId"]] = audio.get(m["contextId"], b"") + base64.b64decode(m["audio"])
        return audio, finals, rest, ws.close_code


def test_multi_stream_input_contexts_never_close_the_socket(live):
    audio, finals, rest, code = run(_multi(live, headers={"xi-api-key": "unused"}), timeout_s=600)
    assert [c for i, c in enumerate(finals) if c not in finals[:i]][:3] == ["ctx-a", "ctx-b", "ctx-c"]
    assert code == 1000
    assert abs(s16_seconds(audio["ctx-a"], 24000) - expected_seconds("Short answer. ")) < 0.5
    assert s16_seconds(audio["ctx-b"], 24000) < expected_seconds("A much longer answer " * 6) / 2  # cut short
    assert s16_seconds(audio["ctx-c"], 24000) > 0.2  # flushed, never ended: what the text's words took


def test_keyed_server_takes_xi_api_key_header_query_first_message_and_bearer():
    with live_server(api_keys=("secret-key",)) as keyed:
        for kwargs in ({"headers": {"xi-api-key": "secret-key"}}, {"query": "&xi-api-key=secret-key"},
                       {"first_extra": {"xi-api-key": "secret-key"}},
                       {"headers": {"Authorization": "Bearer secret-key"}}):
            messages, code = run(_stream_input(keyed, "pcm_16000", **kwargs))
            assert code == 1000 and messages[-1] == {"isFinal": True}, kwargs
        async def refused():
            url = keyed.ws.replace("/v1/realtime", "/v1/text-to-speech/default/stream-input")
            async with websockets.connect(url, additional_headers={"xi-api-key": "wrong"}) as ws:
                await ws.send(json.dumps({"text": " "}))  # no key in the first message either
                reply = json.loads(await ws.recv())
                with pytest.raises(websockets.ConnectionClosed):
                    await ws.recv()
                return reply, ws.close_code

        reply, code = run(refused())
        assert code == 4001 and reply["error"] == "unauthorized"
        audio = b"".join(sdk_client(keyed, api_key="secret-key").text_to_speech.convert_realtime(
            voice_id="default", text=iter(["Hi", " there."]), output_format="pcm_16000"))
        assert len(audio) > 16000 * 2 * 0.3


def test_bad_input_gets_errors_and_the_socket_goes_on(live):
    async def scenario():
        url = live.ws.replace("/v1/realtime", "/v1/text-to-speech/default/multi-stream-input?output_format=pcm_16000")
        async with websockets.connect(url) as ws:
            for bad in ("{nope", "[1, 2]", json.dumps({"text": 5, "context_id": "x"}),
                        json.dumps({"text": "hi", "context_id": ""})):
                await ws.send(bad)
                reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
                assert reply.get("error") in ("invalid_json", "invalid_message"), (bad, reply)
            await ws.send(json.dumps({"text": "Still fine. ", "context_id": "ok", "flush": True}))
            while True:
                m = json.loads(await asyncio.wait_for(ws.recv(), 180))
                if m.get("isFinal"):
                    return m

    assert run(scenario())["contextId"] == "ok"
