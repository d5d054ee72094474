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
from voxrt.gateway.compat import elevenlabs as el
from voxrt.gateway.compat.elevenlabs import CharAligner, relative
from voxrt_live import ONE_PLACE, busy_engine, live_server, run

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


@pytest.mark.parametrize("output_format,rate", [("pcm_16000", 16000), ("pcm_24000", 24000),
                                                ("pcm_22050", 22050), ("pcm_44100", 44100)])
def test_sdk_convert_realtime_pcm(live, output_format, rate):
    # pcm_22050 and pcm_44100 are resampled from the native 48000 (both are in the SDK's OutputFormat)
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
                       {"headers": {"Authorization": "Bearer secret-key"}},
                       {"query": "&authorization=Bearer%20secret-key"}):  # ElevenLabs' query `authorization`
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

        async def silent(query):  # no key and no first message: not held for ever
            url = keyed.ws.replace("/v1/realtime", f"/v1/text-to-speech/default/stream-input{query}")
            async with websockets.connect(url) as ws:
                reply = json.loads(await asyncio.wait_for(ws.recv(), 60))
                with pytest.raises(websockets.ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 60)
                return reply, ws.close_code

        reply, code = run(silent("?inactivity_timeout=1"))  # the wait for a key is the inactivity timeout
        assert code == 1008 and reply["error"] == "input_timeout_exceeded" and reply["code"] == 1008, reply
        audio = b"".join(sdk_client(keyed, api_key="secret-key").text_to_speech.convert_realtime(
            voice_id="default", text=iter(["Hi", " there."]), output_format="pcm_16000"))
        assert len(audio) > 16000 * 2 * 0.3


def test_bad_input_gets_errors_and_the_socket_goes_on(live):
    async def scenario():
        url = live.ws.replace("/v1/realtime", "/v1/text-to-speech/default/multi-stream-input?output_format=pcm_16000")
        async with websockets.connect(url) as ws:
            for bad in ("{nope", "[1, 2]", json.dumps({"text": 5, "context_id": "x"}),
                        json.dumps({"text": "hi", "context_id": ""}), b"\x00\x01binary"):
                await ws.send(bad)
                reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
                assert reply.get("error") in ("invalid_json", "invalid_message"), (bad, reply)
            await ws.send(json.dumps({"text": "Still fine. ", "context_id": "ok", "flush": True}))
            while True:
                m = json.loads(await asyncio.wait_for(ws.recv(), 180))
                if m.get("isFinal"):
                    return m

    assert run(scenario())["contextId"] == "ok"


def test_binary_frame_gets_an_error_and_the_stream_goes_on(live):
    async def scenario():
        url = live.ws.replace("/v1/realtime", "/v1/text-to-speech/default/stream-input?output_format=pcm_16000")
        async with websockets.connect(url) as ws:
            await ws.send(json.dumps({"text": " "}))
            await ws.send(b"\x00\x01binary")
            await ws.send(json.dumps({"text": "Still speaking. "}))
            await ws.send(json.dumps({"text": ""}))
            return [json.loads(m) async for m in ws], ws.close_code

    messages, code = run(scenario())
    assert messages[0]["error"] == "invalid_message" and "binary" in messages[0]["message"], messages[0]
    assert code == 1000 and messages[-1] == {"isFinal": True}
    audio = b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))
    assert abs(s16_seconds(audio, 16000) - expected_seconds("Still speaking. ")) < 0.5


def test_messages_after_end_of_input_get_errors_and_the_owed_audio_still_comes(live):
    """Text after stream-input's end-of-input message: an error each, never forwarded (the native session used
    to close the socket 4400 after 20 of them, before the audio still owed was out)."""
    async def scenario():
        url = live.ws.replace("/v1/realtime", "/v1/text-to-speech/default/stream-input?output_format=pcm_16000")
        async with websockets.connect(url) as ws:
            await ws.send(json.dumps({"text": " "}))
            await ws.send(json.dumps({"text": "Still speaking. "}))
            await ws.send(json.dumps({"text": ""}))
            for _ in range(30):
                await ws.send(json.dumps({"text": "late words "}))
            return [json.loads(m) async for m in ws], ws.close_code

    messages, code = run(scenario())
    errors = [m for m in messages if m.get("error")]
    assert code == 1000 and messages[-1] == {"isFinal": True}, (code, messages[-1])
    assert len(errors) == 30 and all("input has ended" in m["message"] for m in errors), errors[:2]
    audio = b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))
    assert abs(s16_seconds(audio, 16000) - expected_seconds("Still speaking. ")) < 0.5


def test_alignment_spells_the_text_and_rides_on_its_audio(live):
    """ElevenLabs' alignment: the characters spoken in a chunk (spaces and punctuation included), on that
    chunk's audio message, times relative to the chunk's start."""
    messages, code = run(_stream_input(live, "pcm_24000"))
    assert code == 1000
    aligned = [m for m in messages if m.get("alignment")]
    assert aligned
    assert "".join(ch for m in aligned for ch in m["alignment"]["chars"]) == TEXT
    for m in aligned:
        a = m["alignment"]
        assert m["audio"], m  # rides on its chunk's audio, never alone
        assert len(a["chars"]) == len(a["charStartTimesMs"]) == len(a["charDurationsMs"])
        assert a["charStartTimesMs"] == sorted(a["charStartTimesMs"]) and min(a["charStartTimesMs"]) >= 0
        chunk_ms = len(base64.b64decode(m["audio"])) / 2 / 24
        assert max(a["charStartTimesMs"]) <= chunk_ms + 1, (a, chunk_ms)  # relative to its own chunk
        assert m["normalizedAlignment"] == a


def test_inactivity_timeout_closes_an_unflushed_socket_as_elevenlabs_does(live):
    async def idle(path, messages):
        url = live.ws.replace("/v1/realtime", f"/v1/text-to-speech/default/{path}")
        async with websockets.connect(url) as ws:
            for message in messages:
                await ws.send(json.dumps(message))
            replies = []
            with pytest.raises(websockets.ConnectionClosed):
                while True:  # audio for the words so far, then the timeout (no tight bound on when)
                    replies.append(json.loads(await asyncio.wait_for(ws.recv(), 120)))
            return replies, ws.close_code

    # text that is never flushed nor ended: the engine waits for the rest, the socket must still time out
    for path, messages in (
            ("stream-input?output_format=pcm_16000&inactivity_timeout=2",
             [{"text": " "}, {"text": "Idle after this"}]),
            ("multi-stream-input?output_format=pcm_16000&inactivity_timeout=2",
             [{"text": " ", "context_id": "i"}, {"text": "Unflushed and idle", "context_id": "i"}])):
        replies, code = run(idle(path, messages))
        assert code == 1008, (path, replies)
        assert replies[-1]["error"] == "input_timeout_exceeded" and replies[-1]["code"] == 1008, replies[-1]
        assert "2.0 seconds" in replies[-1]["message"]

    async def refused(query):
        url = live.ws.replace("/v1/realtime", f"/v1/text-to-speech/default/stream-input?{query}")
        async with websockets.connect(url) as ws:
            reply = json.loads(await ws.recv())
            with pytest.raises(websockets.ConnectionClosed):
                await ws.recv()
            return reply, ws.close_code

    for query in ("inactivity_timeout=181", "inactivity_timeout=abc"):  # ElevenLabs' maximum is 180
        reply, code = run(refused(query))
        assert code == 1008 and reply["error"] == "invalid_inactivity_timeout", reply


def test_multi_context_id_can_be_reused_after_close_context(live):
    async def scenario():
        url = live.ws.replace("/v1/realtime", "/v1/text-to-speech/default/multi-stream-input?output_format=pcm_16000")
        lives: list[dict] = []
        async with websockets.connect(url) as ws:
            for text in ("First life. ", "Second life. "):
                life = {"audio": b"", "chars": ""}
                lives.append(life)
                await ws.send(json.dumps({"text": " ", "context_id": "r"}))
                await ws.send(json.dumps({"text": text, "context_id": "r", "flush": True}))
                while True:
                    m = json.loads(await asyncio.wait_for(ws.recv(), 120))
                    assert "error" not in m, m
                    assert m["contextId"] == "r"
                    if m.get("isFinal"):
                        break
                    life["audio"] += base64.b64decode(m["audio"])
                    life["chars"] += "".join((m.get("alignment") or {}).get("chars", []))
                await ws.send(json.dumps({"context_id": "r", "close_context": True}))
            await ws.send(json.dumps({"close_socket": True}))
            rest = [json.loads(m) async for m in ws]
            return lives, rest, ws.close_code

    lives, rest, code = run(scenario())
    assert code == 1000 and not any("error" in m for m in rest), rest
    for life, text in zip(lives, ("First life. ", "Second life. ")):
        assert life["chars"] == text.strip()  # the second life is not linked to the first
        assert s16_seconds(life["audio"], 16000) > 0.2  # flushed (its isFinal), then closed: what its words took


def test_char_aligner_covers_spaces_and_punctuation_between_words():
    text = " Hello, big — world. Bye"
    aligner = CharAligner()
    words = [{"char_start": 1, "char_end": 7, "start_ms": 0, "end_ms": 120},  # "Hello,"
             {"char_start": 8, "char_end": 11, "start_ms": 140, "end_ms": 200}]  # "big"
    first = aligner.add(text, words)
    second = aligner.add(text, [{"char_start": 14, "char_end": 20, "start_ms": 200, "end_ms": 320}])  # "world."
    assert "".join(c for c, _, _ in first + second) == "Hello, big — world."  # the leading " " is not spoken
    space = first[6]
    assert space[0] == " " and space[1] == 120 and space[2] == 20  # the gap between the words
    assert [c for c, _, _ in second[:3]] == [" ", "—", " "] and all(d == 0 for _, _, d in second[:3])
    chunk = relative(second, 160)  # relative to the chunk starting at 160 ms of the context's audio
    assert chunk["chars"][3] == "w" and chunk["charStartTimesMs"][3] == 40 and chunk["charDurationsMs"][3] == 20
    assert relative(first, 60)["charStartTimesMs"][0] == 0  # a character begun before its chunk: 0


def test_an_alignment_that_comes_after_its_audio_went_is_relative_to_that_chunk():
    """Where a chunk's audio had to go before its alignment came, the alignment goes alone, its times relative
    to the chunk it describes (not to its own first character)."""
    from types import SimpleNamespace

    from voxrt.protocol.config import Limits
    from voxrt.protocol.frames import encode_audio_frame
    from voxrt.protocol.server_events import Alignment, ContextStarted

    class FakeWS:
        def __init__(self):
            self.out = []

        async def send_text(self, text):
            self.out.append(json.loads(text))

        async def close(self, code=1000, reason=""):
            pass

    async def scenario():
        ws = FakeWS()
        state = SimpleNamespace(config=SimpleNamespace(limits=Limits()))
        adapter = el.ElevenLabsAdapter(ws, state, "default", el.OutputFormat("pcm_16000"), multi=False)
        adapter.handle({"text": " Hello there"})
        await adapter.link.send_event(ContextStarted("default", 1))
        for seq in range(3, 6):  # a chunk from 60 ms of the context's audio
            await adapter.link.send_bytes(encode_audio_frame(1, seq, seq * 20, b"\x00" * 640,
                                                                       is_first=False, is_last=False))
        for _ in range(el.RELEASE_TURNS + 5):  # no alignment came: the audio goes alone
            await asyncio.sleep(0)
        await adapter.link.send_event(Alignment("default", [], [
            {"word": "Hello", "char_start": 1, "char_end": 6, "start_ms": 70, "end_ms": 120}], True))
        await adapter.outbox.drain()
        await adapter.outbox.stop()
        return ws.out

    audio, alone = run(scenario())
    assert audio["audio"] and audio["alignment"] is None
    assert alone["audio"] == "" and alone["alignment"] == {"chars": list("Hello"),
                                                           "charStartTimesMs": [10, 20, 30, 40, 50],
                                                           "charDurationsMs": [10, 10, 10, 10, 10]}


def test_a_refused_context_drops_the_rest_of_its_turn_until_the_client_closes_it():
    """Multi-context under overload (`--max-admission-wait-ms`): the server refuses context x (`server_busy`,
    then its isFinal) while the client's LLM is still streaming into it. The rest of that turn is dropped, not
    opened as a new context that would speak the turn's tail without its start; once the client closes x, the id
    opens a new context as ElevenLabs' do."""
    with live_server(ONE_PLACE) as live:
        async def scenario():
            url = live.ws.replace("/v1/realtime",
                                  "/v1/text-to-speech/default/multi-stream-input?output_format=pcm_16000")
            async with busy_engine(live) as busy, websockets.connect(url) as ws:
                await ws.send(json.dumps({"text": "This turn comes while the engine is full. ", "context_id": "x"}))
                first = [json.loads(await asyncio.wait_for(ws.recv(), 60)) for _ in range(2)]
                for i in range(30):
                    await ws.send(json.dumps({"text": f" more{i}", "context_id": "x", "flush": i == 29}))
                await ws.send(json.dumps({"text": "", "context_id": "x"}))  # keep-alive, answered by nothing
                with pytest.raises(asyncio.TimeoutError):  # nothing for the dropped text
                    await asyncio.wait_for(ws.recv(), 2)
                await busy.cancel()  # the place is free again
                await ws.send(json.dumps({"context_id": "x", "close_context": True}))
                await ws.send(json.dumps({"text": "A new turn. ", "context_id": "x", "flush": True}))
                later, audio = [], 0
                while not later or not later[-1].get("isFinal"):
                    later.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
                    audio += len(base64.b64decode(later[-1].get("audio") or ""))
                return first, later, audio

        first, later, audio = run(scenario())
    assert first[0]["error"] == "server_busy" and first[0]["contextId"] == "x"
    assert first[1] == {"isFinal": True, "contextId": "x"}
    assert not [m for m in later if "error" in m] and later[-1]["contextId"] == "x" and audio > 16000 * 2 * 0.3
