"""POST /v1/audio/speech, compatible with OpenAI's speech API (and so with the official `openai` SDK).

Request: JSON `{model, input, voice, response_format?, speed?, instructions?, stream_format?}` as in
OpenAI's reference. `model` and `voice` go through the alias table (aliases.py: `tts-1` means the served
model, `alloy` one of its voices). `response_format` mp3 (the default, as OpenAI's), opus (Ogg), aac (ADTS),
flac, wav, pcm (s16le at 24 kHz, as OpenAI's), and the voxrt extension mulaw (8 kHz G.711). `speed`
(0.25-4.0) is applied with FFmpeg's atempo (pitch kept; av_codec.py). `instructions` go into the prompt of
models that take them (ModelInfo.accepts_instructions: Qwen3-TTS 1.7B CustomVoice), up to
ModelInfo.max_instructions_bytes; any other model refuses them with a 400 rather than ignore them. Empty or
blank instructions are none.

Streaming: every format streams as it is generated, except `wav` without `stream_format`: then the whole
file is generated first so that its RIFF and data sizes are exact (with `stream_format: "audio"` it streams
with the open-ended 0xFFFFFFFF sizes players accept). `stream_format: "sse"` sends server-sent events
`speech.audio.delta` (base64 of the chosen format's bytes) and a final `speech.audio.done`.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from typing import AsyncIterator

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from voxrt.audio import OggOpusWriter, StreamEncoder, pcm16_encode, wav_header
from voxrt.gateway.compat.av_codec import ContainerEncoder, TimeStretcher
from voxrt.audio.resample import StreamResampler
from voxrt.gateway.compat.aliases import AliasError
from voxrt.engine.params import SamplingParams, instructions_problem
from voxrt.gateway.http import (HTTPError, _read_json_object, _require_auth, _require_engine, _start,
                                _SynthesisResponse, handle_errors)
from voxrt.protocol.events import replace_lone_surrogates

MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
               "wav": "audio/wav", "pcm": "audio/pcm", "mulaw": "audio/basic"}
PCM_RATE = 24000  # OpenAI's `pcm` is 24 kHz s16le mono whatever the model's rate
STREAM_FORMATS = ("audio", "sse")
MIN_SPEED, MAX_SPEED = 0.25, 4.0


@dataclass(frozen=True)
class SpeechRequest:
    text: str
    voice: str
    fmt: str
    speed: float
    stream_format: str | None
    instructions: str | None


def parse_speech_request(body, info, aliases) -> SpeechRequest:
    """Validates the JSON body against the served model; every problem is an HTTPError with a stable code."""
    if not isinstance(body, dict):
        raise HTTPError(400, "invalid_json", "the body must be a JSON object")
    try:
        aliases.resolve_model(_string(body, "model"), info.name)
        voice = body.get("voice")
        if isinstance(voice, dict):  # OpenAI's custom-voice form {"id": "voice_1234"}
            voice = voice.get("id")
        if voice is not None and not isinstance(voice, str):
            raise HTTPError(400, "invalid_request", "'voice' must be a string or {\"id\": string}", param="voice")
        voice = aliases.resolve_voice(voice, info.voices, info.default_voice)
    except AliasError as exc:
        raise HTTPError(400, exc.code, exc.message, param="model" if exc.code == "unknown_model" else "voice") from None
    fmt = body.get("response_format") or "mp3"
    if not isinstance(fmt, str) or fmt not in MEDIA_TYPES:
        raise HTTPError(400, "invalid_format", f"response_format {str(fmt)[:32]!r} is not supported; choose one "
                                               f"of {', '.join(MEDIA_TYPES)}", param="response_format")
    speed = body.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    # (an int is compared as it is: math.isfinite of a 310-digit one overflows)
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) \
            or (isinstance(speed, float) and not math.isfinite(speed)) or not MIN_SPEED <= speed <= MAX_SPEED:
        raise HTTPError(400, "invalid_speed", f"speed must be a number from {MIN_SPEED} to {MAX_SPEED}, got "
                                              f"{str(speed)[:32]}", param="speed")
    stream_format = body.get("stream_format")
    if stream_format is not None and stream_format not in STREAM_FORMATS:
        raise HTTPError(400, "invalid_stream_format", f"stream_format must be one of {', '.join(STREAM_FORMATS)}",
                        param="stream_format")
    instructions = _string(body, "instructions")
    # Normalized as the engine reads them (blank: none), then the engine's own rule (params.instructions_problem)
    # against the served model, so that a refusal is a 400 before any audio starts
    params = SamplingParams(instructions=replace_lone_surrogates(instructions) if instructions else None)
    problem = instructions_problem(params.instructions, info.name, info.accepts_instructions,
                                   info.max_instructions_bytes)
    if problem is not None:
        raise HTTPError(400, *problem, param="instructions")
    return SpeechRequest(body.get("input"), voice, fmt, float(speed), stream_format, params.instructions)


def _string(body: dict, name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise HTTPError(400, "invalid_request", f"'{name}' must be a string", param=name)
    return value


async def _stretched(chunks: AsyncIterator[np.ndarray], rate: int, speed: float) -> AsyncIterator[np.ndarray]:
    if speed == 1.0:
        async for pcm in chunks:
            yield pcm
        return
    stretcher = TimeStretcher(rate, speed)
    async for pcm in chunks:
        yield stretcher.push(pcm)
    yield stretcher.finish()


async def encode_stream(fmt: str, chunks: AsyncIterator[np.ndarray], rate: int) -> AsyncIterator[bytes]:
    """float32 chunks at `rate` -> the format's bytes, piece by piece (wav: open-ended header first)."""
    if fmt in ("wav", "pcm"):
        resampler = StreamResampler(rate, PCM_RATE) if fmt == "pcm" and rate != PCM_RATE else None
        if fmt == "wav":
            yield wav_header(rate)
        async for pcm in chunks:
            yield pcm16_encode(resampler.process(pcm) if resampler else pcm)
        if resampler is not None:
            yield pcm16_encode(resampler.flush())
    elif fmt == "mulaw":
        encoder = StreamEncoder("mulaw", rate, 8000, 20)
        async for pcm in chunks:
            yield b"".join(encoder.push(pcm))
        yield b"".join(encoder.finish())
    elif fmt == "opus":  # Ogg Opus (RFC 7845) with the gateway's own libopus encoder
        encoder = StreamEncoder("opus", rate, 48000, 20)
        writer = OggOpusWriter(48000, 20)
        yield writer.header_pages()
        async for pcm in chunks:
            packets = encoder.push(pcm)
            if packets:
                yield writer.page(packets, is_last=False)
        last = encoder.finish()
        yield writer.page(last, is_last=True, num_padding_samples=encoder.num_padding_samples)
    else:  # mp3, aac, flac through PyAV
        encoder = ContainerEncoder(fmt, rate)
        async for pcm in chunks:
            data = encoder.push(pcm)
            if data:
                yield data
        yield encoder.finish()


async def _sse(pieces: AsyncIterator[bytes], num_chars: int) -> AsyncIterator[bytes]:
    """OpenAI's speech SSE: `speech.audio.delta` events, then `speech.audio.done`. Its usage counts input
    characters and output bytes (this server has no token counts to give)."""
    num_bytes = 0
    async for piece in pieces:
        if piece:
            num_bytes += len(piece)
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(piece).decode()}
            yield f"data: {json.dumps(event)}\n\n".encode()
    done = {"type": "speech.audio.done",
            "usage": {"input_tokens": num_chars, "output_tokens": num_bytes, "total_tokens": num_chars + num_bytes}}
    yield f"data: {json.dumps(done)}\n\n".encode()


@handle_errors
async def speech(request: Request) -> Response:
    """The synthesis itself is http.py's (`_start`): the admission slot shared with realtime sessions, the
    body limits, lone surrogates repaired, the engine request cancelled when the client leaves, long turns
    continued past the length cap."""
    _require_auth(request)
    body = await _read_json_object(request)
    state = request.app.state.voxrt
    info = _require_engine(request).info
    req = parse_speech_request(body, info, state.config.aliases)
    synthesis = await _start(request, req.text, req.voice,  # the model's sampling defaults for the rest
                             {"instructions": req.instructions} if req.instructions else None)
    state.metrics.http_requests.labels("speech").inc()
    pcm = _stretched(synthesis.pcm_chunks(), info.sample_rate, req.speed)
    pieces = encode_stream(req.fmt, pcm, info.sample_rate)
    if req.stream_format == "sse":
        return _SynthesisResponse(synthesis, _sse(pieces, len(req.text)), "text/event-stream")
    if req.fmt == "wav" and req.stream_format is None:  # exact sizes: the whole file, then the response
        try:
            parts = [piece async for piece in pieces]
        finally:
            await synthesis.close()
        data = b"".join(parts[1:])
        return Response(wav_header(info.sample_rate, data_bytes=len(data)) + data, media_type=MEDIA_TYPES["wav"])
    return _SynthesisResponse(synthesis, pieces, MEDIA_TYPES[req.fmt])
