"""HTTP endpoints: OpenAI-compatible speech, VoxServe-compatible /generate, models, voices, tokens, health,
readiness and Prometheus metrics. Errors are JSON `{"error": {"message", "type", "code"}}` and never carry
internals."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import AsyncIterator

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from voxrt.audio import OggOpusWriter, StreamEncoder, pcm16_encode, wav_header
from voxrt.engine.errors import EngineError
from voxrt.text import Segmenter

log = logging.getLogger("voxrt.gateway.http")

SPEECH_FORMATS = {  # response_format -> (media type, output sample rate: None = the model's)
    "wav": ("audio/wav", None),
    "pcm": ("audio/pcm", None),
    "opus": ("audio/ogg", 48000),
    "mulaw": ("audio/basic", 8000),
}


class HTTPError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_response(status: int, code: str, message: str) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status_code=status)


def _require_auth(request: Request) -> None:
    auth = request.app.state.voxrt.auth
    if not auth.check(request.headers.get("authorization"), request.query_params.get("token")):
        raise HTTPError(401, "unauthorized", "missing or invalid API key")


def _require_engine(request: Request):
    state = request.app.state.voxrt
    if state.draining:
        raise HTTPError(503, "shutting_down", "the server is shutting down; retry on another replica")
    if not state.engine_ready:
        raise HTTPError(503, "not_ready", "the engine is not ready")
    return state.engine


def handle_errors(endpoint):
    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except HTTPError as exc:
            request.app.state.voxrt.metrics.errors.labels(exc.code).inc()
            return error_response(exc.status, exc.code, exc.message)
        except EngineError as exc:
            request.app.state.voxrt.metrics.errors.labels(exc.code).inc()
            return error_response(400 if exc.code in ("unknown_voice", "invalid_params") else 503, exc.code, exc.message)
    wrapped.__name__ = endpoint.__name__
    return wrapped


def _speakable(text: str) -> str:
    segmenter = Segmenter("none")
    segmenter.push(text)
    return " ".join(s.text for s in segmenter.flush())


async def _pcm_chunks(engine, request_id: str) -> AsyncIterator[np.ndarray]:
    """The request's audio as float32 arrays; cancels the engine request if the consumer goes away."""
    finished = False
    try:
        async for chunk in engine.stream(request_id):
            yield np.frombuffer(chunk.pcm, dtype="<f4")
            finished = chunk.is_last
    finally:
        if not finished:
            await asyncio.shield(engine.cancel(request_id))


async def _encode(fmt: str, pcm_chunks: AsyncIterator[np.ndarray], model_rate: int) -> AsyncIterator[bytes]:
    if fmt in ("wav", "pcm"):
        if fmt == "wav":
            yield wav_header(model_rate)
        async for pcm in pcm_chunks:
            yield pcm16_encode(pcm)
    elif fmt == "mulaw":
        encoder = StreamEncoder("mulaw", model_rate, 8000, 20)
        async for pcm in pcm_chunks:
            yield b"".join(encoder.push(pcm))
        yield b"".join(encoder.finish())
    else:  # Ogg Opus, RFC 7845
        encoder = StreamEncoder("opus", model_rate, 48000, 20)
        writer = OggOpusWriter(48000, 20)
        yield writer.header_pages()
        async for pcm in pcm_chunks:
            packets = encoder.push(pcm)
            if packets:
                yield writer.page(packets, is_last=False)
        last = encoder.finish()
        yield writer.page(last, is_last=True, num_padding_samples=encoder.num_padding_samples)


async def _start(request: Request, text: str, voice: str | None) -> tuple[object, str]:
    state = request.app.state.voxrt
    engine = _require_engine(request)
    if not isinstance(text, str) or not text.strip():
        raise HTTPError(400, "invalid_request", "'input' must be a non-empty string")
    if len(text) > state.config.max_http_input_chars:
        raise HTTPError(400, "text_too_long", f"input has {len(text)} characters; the limit is {state.config.max_http_input_chars}")
    if voice is not None and voice not in engine.info.voices:
        raise HTTPError(400, "unknown_voice", f"unknown voice {voice!r}; available: {', '.join(engine.info.voices)}")
    request_id = await engine.submit(voice=voice, text=_speakable(text), final=True, streaming=False)
    return engine, request_id


@handle_errors
async def speech(request: Request) -> Response:
    """POST /v1/audio/speech (OpenAI-compatible): JSON {model, input, voice, response_format}."""
    _require_auth(request)
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HTTPError(400, "invalid_json", "the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise HTTPError(400, "invalid_json", "the body must be a JSON object")
    info = _require_engine(request).info
    model = body.get("model")
    if model is not None and model != info.name:
        raise HTTPError(400, "unknown_model", f"unknown model {model!r}; served: {info.name}")
    fmt = body.get("response_format", "wav")
    if fmt not in SPEECH_FORMATS:
        raise HTTPError(400, "invalid_format", f"response_format {fmt!r} is not supported; choose one of {sorted(SPEECH_FORMATS)}")
    engine, request_id = await _start(request, body.get("input"), body.get("voice"))
    request.app.state.voxrt.metrics.http_requests.labels("speech").inc()
    media = SPEECH_FORMATS[fmt][0]
    return StreamingResponse(_encode(fmt, _pcm_chunks(engine, request_id), info.sample_rate), media_type=media)


@handle_errors
async def generate(request: Request) -> Response:
    """POST /generate (VoxServe-compatible): multipart form `text`, optional `streaming` (default true),
    optional `voice`; WAV out, streamed with an open-ended header or whole with exact sizes."""
    _require_auth(request)
    try:
        form = await request.form()
    except Exception:  # noqa: BLE001 (malformed multipart)
        raise HTTPError(400, "invalid_request", "expected a multipart or url-encoded form") from None
    if form.get("audio") is not None:
        raise HTTPError(400, "unsupported", "audio input is not supported by this model")
    streaming = str(form.get("streaming", "true")).lower() not in ("false", "0", "no")
    engine, request_id = await _start(request, form.get("text"), form.get("voice"))
    request.app.state.voxrt.metrics.http_requests.labels("generate").inc()
    rate = engine.info.sample_rate
    if streaming:
        return StreamingResponse(_encode("wav", _pcm_chunks(engine, request_id), rate), media_type="audio/wav")
    body = b"".join([pcm16_encode(pcm) async for pcm in _pcm_chunks(engine, request_id)])
    return Response(wav_header(rate, data_bytes=len(body)) + body, media_type="audio/wav")


@handle_errors
async def models(request: Request) -> Response:
    _require_auth(request)
    info = _require_engine(request).info
    return JSONResponse({"object": "list", "data": [{"id": info.name, "object": "model", "owned_by": "voxrt",
                                                     "sample_rate": info.sample_rate, "device": info.device}]})


@handle_errors
async def voices(request: Request) -> Response:
    _require_auth(request)
    info = _require_engine(request).info
    return JSONResponse({"default": info.default_voice,
                         "voices": [{"id": v, "name": v, "model": info.name} for v in info.voices]})


@handle_errors
async def tokens(request: Request) -> Response:
    """POST /v1/tokens: an API key (not a token) mints a short-lived token for browsers."""
    state = request.app.state.voxrt
    auth = state.auth
    if not auth.enabled:
        raise HTTPError(400, "auth_disabled", "this server has no API keys configured; no token is needed")
    header = request.headers.get("authorization") or ""
    if not auth.check_key(header.partition(" ")[2].strip() if header.lower().startswith("bearer ") else None):
        raise HTTPError(401, "unauthorized", "an API key is required to mint tokens")
    ttl = state.config.token_ttl_s
    raw = await request.body()
    if raw:
        try:
            body = json.loads(raw)
            ttl = float(body.get("ttl_s", ttl)) if isinstance(body, dict) else ttl
        except (ValueError, TypeError):
            raise HTTPError(400, "invalid_json", "the body must be a JSON object like {\"ttl_s\": 300}") from None
    if not (0 < ttl <= state.config.max_token_ttl_s):
        raise HTTPError(400, "invalid_request", f"ttl_s must be in (0, {state.config.max_token_ttl_s:g}]")
    token, expires = auth.mint(ttl)
    return JSONResponse({"token": token, "expires_at": expires, "expires_in_s": ttl})


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    state = request.app.state.voxrt
    if state.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    if state.engine_ready and state.engine is not None and state.engine.is_alive:
        return JSONResponse({"status": "ready", "model": state.engine.info.name})
    return JSONResponse({"status": "not_ready"}, status_code=503)


async def metrics(request: Request) -> Response:
    state = request.app.state.voxrt
    if state.engine_ready:
        try:
            state.metrics.update_engine(await state.engine.stats(timeout_s=2.0))
        except Exception:  # noqa: BLE001 (metrics must render even when the engine is stuck)
            log.warning("engine stats unavailable for /metrics")
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")
