"""The official `openai` SDK against a live server: speech.create and with_streaming_response, every
response_format decoded to its duration, model and voice aliases, speed, instructions, stream_format sse."""

from __future__ import annotations

import base64
import io
import json
import wave

import httpx
import openai
import pytest

from compat_audio import decoded_seconds, s16_seconds

TEXT = "Hello there, my good friend."  # ~1.9 s of tiny audio: short, CI runs it on a CPU
CODEC_SLACK_S = 0.12  # encoder delay and padding (an MP3 frame is 1152 samples, AAC priming 1024)


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=f"{live.http}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference_s(client):
    """The WAV with exact sizes (no stream_format): its duration is what every format must decode to."""
    data = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="wav").content
    assert data[:4] == b"RIFF"
    with wave.open(io.BytesIO(data)) as f:  # the stdlib reader checks the sizes
        assert f.getnframes() * 2 == len(data) - 44
        seconds = f.getnframes() / f.getframerate()
    assert seconds > 1.0, seconds
    return seconds


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_each_container_format_decodes_to_the_duration(client, reference_s, fmt):
    data = client.audio.speech.create(model="gpt-4o-mini-tts", voice="nova", input=TEXT, response_format=fmt).content
    seconds, rate = decoded_seconds(data)
    assert abs(seconds - reference_s) < CODEC_SLACK_S, (fmt, seconds, reference_s)
    assert rate == (48000 if fmt == "opus" else 24000)


def test_pcm_is_24k_s16_of_the_duration(client, reference_s):
    data = client.audio.speech.create(model="tts-1-hd", voice="shimmer", input=TEXT, response_format="pcm").content
    assert abs(s16_seconds(data, 24000) - reference_s) < 0.02


def test_default_format_is_mp3_as_openai(client, reference_s):
    data = client.audio.speech.create(model="tts-1", voice="echo", input=TEXT).content
    seconds, _ = decoded_seconds(data, "mp3")
    assert abs(seconds - reference_s) < CODEC_SLACK_S


def test_with_streaming_response_streams_each_format(client, reference_s):
    for fmt in ("mp3", "pcm"):
        chunks = []
        with client.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=TEXT,
                                                                response_format=fmt) as response:
            assert response.http_request.url.path == "/v1/audio/speech"
            for chunk in response.iter_bytes():
                chunks.append(chunk)
        data = b"".join(chunks)
        if fmt == "pcm":
            seconds = s16_seconds(data, 24000)
        else:
            seconds, _ = decoded_seconds(data)
        assert abs(seconds - reference_s) < CODEC_SLACK_S, (fmt, seconds, reference_s)


def test_stream_format_audio_wav_is_open_ended(client, reference_s):
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=TEXT,
                                                            response_format="wav", stream_format="audio") as r:
        data = r.read()
    assert data[4:8] == b"\xff\xff\xff\xff" and data[40:44] == b"\xff\xff\xff\xff"  # sizes unknown when streaming
    assert abs(s16_seconds(data[44:], 24000) - reference_s) < 0.02


def test_stream_format_sse_events(client, reference_s):
    with client.audio.speech.with_streaming_response.create(model="gpt-4o-mini-tts", voice="alloy", input=TEXT,
                                                            response_format="pcm", stream_format="sse") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in r.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert deltas and events[-1]["type"] == "speech.audio.done" and "usage" in events[-1]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert abs(s16_seconds(pcm, 24000) - reference_s) < 0.02


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_speed_changes_the_duration(client, reference_s, speed):
    data = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="wav",
                                      speed=speed).content
    seconds = s16_seconds(data[44:], 24000)
    assert abs(seconds - reference_s / speed) < 0.05 * reference_s / speed + 0.05, (speed, seconds, reference_s)


def test_speed_out_of_range_is_refused(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, speed=5.0)
    assert info.value.code == "invalid_speed" and info.value.param == "speed"
    body = info.value.body  # OpenAI's error object: param present, null where no one field is at fault
    assert set(body) >= {"message", "type", "param", "code"} and body["type"] == "invalid_request_error"


def test_instructions_are_refused_by_models_that_do_not_take_them(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(model="gpt-4o-mini-tts", voice="alloy", input=TEXT,
                                   instructions="Speak like a pirate.")
    assert info.value.code == "unsupported_parameter" and "instructions" in str(info.value)


def test_model_and_voice_aliases(client, live):
    served = client.models.list().data[0].id
    voices = httpx.get(f"{live.http}/v1/voices", timeout=10).json()["voices"]
    for model, voice in (("tts-1-hd", "ash"), ("gpt-4o-mini-tts", "marin"), (served, voices[0]["id"])):
        assert client.audio.speech.create(model=model, voice=voice, input="Hi.", response_format="pcm").content
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(model="tts-1", voice="nobody", input="Hi.")
    assert info.value.code == "unknown_voice" and info.value.param == "voice"
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(model="gpt-9-tts", voice="alloy", input="Hi.")
    assert info.value.code == "unknown_model" and info.value.param == "model"
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", response_format="ogg")  # type: ignore[arg-type]
    assert info.value.code == "invalid_format" and info.value.param == "response_format"


def test_configured_voice_alias(tmp_path):
    """--voice-alias NAME=VOICE maps another API's voice id onto a served voice; unknown targets fail at once."""
    from voxrt.gateway.compat.aliases import Aliases, AliasError

    aliases = Aliases.parse(voice_aliases=["21m00Tcm4TlvDq8ikWAM=tenor", "alloy=whisper"])
    voices = ("default", "alto", "tenor", "whisper")
    assert aliases.resolve_voice("21m00Tcm4TlvDq8ikWAM", voices, "default") == "tenor"
    assert aliases.resolve_voice("alloy", voices, "default") == "whisper"  # overrides the built-in
    assert aliases.resolve_voice("ash", voices, "default") == "alto"  # built-in round-robin
    with pytest.raises(AliasError):
        aliases.resolve_voice("nobody", voices, "default")
    with pytest.raises(ValueError):
        Aliases.parse(voice_aliases=["novoice"])
