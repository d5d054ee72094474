"""Inputs a fuzzing run of the compatibility surfaces found to drop the connection (1006, nothing sent), log a
traceback or answer 500 (2026-12-05): each now gets its API's error, or its proper close, and the socket or
server goes on. A live server with the tiny model."""

from __future__ import annotations

import asyncio
import json

import httpx
import websockets

from voxrt_live import run

DEEP = "[" * 1000  # nested past json's recursion limit: RecursionError, not ValueError
CARTESIA_OK = {"context_id": "ok", "model_id": "sonic-2", "transcript": "Hello there.", "continue": False,
               "voice": {"mode": "id", "id": "default"},
               "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}}


async def _json_until(ws, done, timeout_s: float = 60) -> list[dict]:
    messages = []
    while not messages or not done(messages[-1]):
        raw = await asyncio.wait_for(ws.recv(), timeout_s)
        if isinstance(raw, str):
            messages.append(json.loads(raw))
    return messages


def test_cartesia_deep_nesting_and_wrong_types_get_errors_and_the_socket_goes_on(live):
    async def scenario():
        async with websockets.connect(live.ws.replace("/v1/realtime", "/tts/websocket")) as ws:
            for bad in (DEEP, json.dumps({**CARTESIA_OK, "context_id": "m", "model_id": 5}),
                        json.dumps({**CARTESIA_OK, "context_id": "v", "voice": {"mode": "id", "id": [1]}}),
                        json.dumps({**CARTESIA_OK, "context_id": "e",
                                    "output_format": {"container": "raw", "encoding": {}, "sample_rate": 16000}})):
                await ws.send(bad)
                assert (await _json_until(ws, lambda m: m["type"] == "error"))[-1]["type"] == "error"
            await ws.send(json.dumps(CARTESIA_OK))
            return await _json_until(ws, lambda m: m["type"] == "done")

    assert any(m["type"] == "chunk" for m in run(scenario()))


def test_elevenlabs_deep_nesting_gets_an_error_and_a_non_ascii_voice_gets_its_close(live):
    base = live.ws.replace("/v1/realtime", "/v1/text-to-speech")

    async def nested():
        async with websockets.connect(f"{base}/default/stream-input?output_format=pcm_16000") as ws:
            await ws.send(json.dumps({"text": " "}))
            await ws.send(DEEP)
            error = json.loads(await asyncio.wait_for(ws.recv(), 30))
            await ws.send(json.dumps({"text": "Hello there. "}))
            await ws.send(json.dumps({"text": ""}))
            final = await _json_until(ws, lambda m: m.get("isFinal") is True)
            return error, final

    error, final = run(nested())
    assert error["error"] == "invalid_json" and any(m.get("audio") for m in final)

    async def non_ascii_voice():
        async with websockets.connect(f"{base}/{'%C3%A9' * 80}/stream-input") as ws:
            try:
                await ws.send(json.dumps({"text": " "}))  # the server may have closed already
                while True:
                    await asyncio.wait_for(ws.recv(), 30)
            except websockets.ConnectionClosed:
                return ws.close_code

    assert run(non_ascii_voice()) == 1008  # the reason is cut to 123 bytes of UTF-8: the close goes out (not 1006)


def test_twilio_bad_start_is_refused_and_bad_control_messages_do_not_end_the_call(live):
    media = live.ws.replace("/v1/realtime", "/v1/twilio/media")

    async def bad_start():
        async with websockets.connect(media) as ws:
            await ws.send(json.dumps({"event": "start", "start": "abc", "streamSid": "MZ1"}))
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), 30)
            except websockets.ConnectionClosed:
                return ws.close_code

    assert run(bad_start()) == 1008  # refused with its close, not a traceback and 1006

    async def bad_control():
        async with websockets.connect(media) as phone:
            await phone.send(json.dumps({"event": "start", "streamSid": "MZ2", "start": {
                "streamSid": "MZ2", "callSid": "CA2", "customParameters": {"call_id": "fuzz-1"},
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
            control = live.ws.replace("/v1/realtime", "/v1/twilio/calls/fuzz-1")
            async with websockets.connect(control) as agent:
                assert json.loads(await agent.recv())["type"] == "call.started"
                await agent.send(json.dumps({"type": "session.start"}))
                await _json_until(agent, lambda m: m["type"] == "session.started")
                await agent.send(DEEP)
                await agent.send(json.dumps({"type": "cancel", "context_id": [1]}))
                await agent.send(json.dumps({"type": "ping", "id": "alive"}))
                return await _json_until(agent, lambda m: m["type"] == "pong")

    assert run(bad_control())[-1]["id"] == "alive"


def test_openai_huge_and_surrogate_speeds_are_400s_not_500s(live):
    url = f"{live.http}/v1/audio/speech"
    with httpx.Client(timeout=30) as http:
        huge = http.post(url, content='{"input": "hi", "speed": 1' + "0" * 309 + "}",
                         headers={"content-type": "application/json"})
        assert huge.status_code == 400 and huge.json()["error"]["param"] == "speed"
        surrogate = http.post(url, content='{"input": "hi", "speed": "\\ud800"}',
                              headers={"content-type": "application/json"})
        assert surrogate.status_code == 400 and surrogate.json()["error"]["code"] == "invalid_speed"
