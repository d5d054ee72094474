"""HTTP endpoints: VoxServe-compatible /generate, models, voices, tokens, health,
readiness and Prometheus metrics. Errors are JSON `{"error": {"message", "type", "code"}}` and never carry
internals. OpenAI's /v1/audio/speech is compat/openai_speech.py."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import AsyncIterator

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from voxrt.audio import pcm16_encode, wav_header
from voxrt.engine.errors import EngineError
from voxrt.text import Segmenter

log = logging.getLogger("voxrt.gateway.http")

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


async def _wav_stream(pcm_chunks: AsyncIterator[np.ndarray], model_rate: int) -> AsyncIterator[bytes]:
    yield wav_header(model_rate)
    async for pcm in pcm_chunks:
        yield pcm16_encode(pcm)


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
        return StreamingResponse(_wav_stream(_pcm_chunks(engine, request_id), rate), media_type="audio/wav")
    body = b"".join([pcm16_encode(pcm) async for pcm in _pcm_chunks(engine, request_id)])
    return Response(wav_header(rate, data_bytes=len(body)) + body, media_type="audio/wav")


# Programs with random weights: their audio is noise (the browser page says so). A random checkpoint made by
# `voxrt make-checkpoint` for a real program cannot be told apart here.
NOISE_MODELS = ("tiny", "standin", "qwen3-tts-1.7b-shape")


@handle_errors
async def models(request: Request) -> Response:
    _require_auth(request)
    info = _require_engine(request).info
    return JSONResponse({"object": "list", "data": [{"id": info.name, "object": "model", "owned_by": "voxrt",
                                                     "sample_rate": info.sample_rate, "device": info.device,
                                                     "audio_is_noise": info.name in NOISE_MODELS}]})


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
