"""HTTP endpoints: VoxServe-compatible /generate, models, voices, tokens, health,
readiness and Prometheus metrics. Errors are JSON `{"error": {"message", "type", "code"}}` and never carry
internals. OpenAI's /v1/audio/speech is compat/openai_speech.py.

Hardening: a request body over `--max-http-body-bytes` is refused (413) before it is read in full, one that
does not arrive within `--http-body-timeout-s` gets 408; JSON nested too deeply for the parser and fields of
the wrong type are 400s. Synthesis takes an admission slot shared with the realtime sessions (429 with
`Retry-After` when none is free within the queue's wait); the engine request is cancelled, and the slot
returned, as soon as the client leaves, whether or not the response had started; a turn longer than the
model's length cap goes on in a further engine request (as a realtime context does)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import AsyncIterator

import numpy as np
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from voxrt.audio import pcm16_encode, wav_header
from voxrt.engine.errors import EngineError
from voxrt.engine.params import SamplingParams
from voxrt.gateway.admission import Busy
from voxrt.gateway.context_core import CAPPED_REASONS, resume_point
from voxrt.protocol.events import replace_lone_surrogates
from voxrt.text import Segmenter

log = logging.getLogger("voxrt.gateway.http")



class HTTPError(Exception):
    """`param`: the request field at fault (OpenAI's error object names it; None: no one field)."""

    def __init__(self, status: int, code: str, message: str, retry_after_ms: int | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after_ms, self.param = retry_after_ms, param


def error_response(status: int, code: str, message: str, retry_after_ms: int | None = None,
                   param: str | None = None) -> JSONResponse:
    """OpenAI's error shape, `{"error": {"message", "type", "param", "code"}}` (`param` null when no one field is
    at fault), which the `openai` SDK reads into its exceptions' `.param` / `.code`."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    # a client's string echoed in the message may hold a lone surrogate, which no UTF-8 body can carry
    error = {"message": replace_lone_surrogates(message), "type": kind, "param": param, "code": code}
    headers = None
    if retry_after_ms is not None:
        error["retry_after_ms"] = retry_after_ms
        headers = {"Retry-After": str(max(1, -(-retry_after_ms // 1000)))}
    return JSONResponse({"error": error}, status_code=status, headers=headers)


async def read_body(request: Request) -> bytes:
    """The request body, at most `max_http_body_bytes` (413 past it, judged by Content-Length first), within
    `http_body_timeout_s` (408). Cached on the request, so `request.form()` / `.json()` read it from here."""
    config = request.app.state.voxrt.config
    limit = config.max_http_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.strip().isdigit() or int(declared) > limit):
        raise HTTPError(413, "body_too_large", f"the request body may hold at most {limit} bytes")

    async def collect() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPError(413, "body_too_large", f"the request body may hold at most {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        body = await asyncio.wait_for(collect(), config.http_body_timeout_s)
    except asyncio.TimeoutError:
        raise HTTPError(408, "timeout", f"the request body did not arrive within {config.http_body_timeout_s:g} s") \
            from None
    except ClientDisconnect:  # the client left mid-body: an answer nobody reads, not a server error
        raise HTTPError(400, "client_disconnected", "the client closed the connection before its body ended") \
            from None
    request._body = body  # Starlette's own cache: stream(), body(), form() and json() serve it
    return body


async def _read_json_object(request: Request) -> dict:
    raw = await read_body(request)
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser recurses
        raise HTTPError(400, "invalid_json", "the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise HTTPError(400, "invalid_json", "the body must be a JSON object")
    return body


def _require_auth(request: Request) -> None:
    auth = request.app.state.voxrt.auth
    if not auth.check(request.headers.get("authorization"), request.query_params.get("token")):
        raise HTTPError(401, "unauthorized", "missing or invalid API key")


def _require_engine(request: Request):
    state = request.app.state.voxrt
    if state.draining:
        raise HTTPError(503, "shutting_down", "the server is shutting down; retry on another replica")
    if not state.engine_is_ready:
        raise HTTPError(503, "not_ready", "the engine is not ready (starting or restarting); retry shortly",
                        retry_after_ms=1000)
    return state.engine


def handle_errors(endpoint):
    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except HTTPError as exc:
            request.app.state.voxrt.metrics.errors.labels(exc.code).inc()
            return error_response(exc.status, exc.code, exc.message, exc.retry_after_ms, exc.param)
        except EngineError as exc:
            request.app.state.voxrt.metrics.errors.labels(exc.code).inc()
            return error_response(400 if exc.code in ("unknown_voice", "invalid_params") else 503, exc.code, exc.message)
    wrapped.__name__ = endpoint.__name__
    return wrapped


def _speakable(text: str) -> str:
    segmenter = Segmenter("none")
    segmenter.push(text)
    return " ".join(s.text for s in segmenter.flush())


class _Synthesis:
    """One HTTP synthesis: its admission slot and engine request(s), released exactly once (`close`) when the
    audio was all read, the client left, or the response never started."""

    def __init__(self, state, engine, text: str, voice: str | None, params: SamplingParams | dict | None = None) -> None:
        self.state, self.engine, self.text, self.voice, self.params = state, engine, text, voice, params
        self.request_id: str | None = None
        self.is_finished = False
        self._has_slot = False

    async def start(self) -> None:
        try:
            await self.state.admission.acquire()
        except Busy as busy:
            raise HTTPError(429, "server_busy", busy.message, busy.retry_after_ms) from None
        self._has_slot = True
        try:
            self.engine = self.engine.for_context()  # one replica for every request of it (engine/replicas.py)
            self.request_id = await self.engine.submit(voice=self.voice, params=self.params, text=self.text,
                                                       final=True, streaming=False)
        except BaseException:
            await self.close()
            raise

    async def pcm_chunks(self) -> AsyncIterator[np.ndarray]:
        """The audio as float32 arrays. A request cut at the engine's length cap goes on in a further one from
        the start of the last word it consumed (a word may be said twice, none is lost)."""
        offset = 0
        try:
            while True:
                capped, span_end = False, None
                async for chunk in self.engine.stream(self.request_id):
                    if chunk.text_span is not None:
                        span_end = offset + chunk.text_span[1]
                    yield np.frombuffer(chunk.pcm, dtype="<f4")
                    capped = chunk.is_last and chunk.finish_reason in CAPPED_REASONS
                if not capped:
                    break
                resume_at = resume_point(self.text, offset, span_end)
                if span_end is None or resume_at <= offset or not self.text[resume_at:].strip():
                    if self.text[resume_at:].strip():
                        log.warning("HTTP synthesis ended at the length cap with %d characters unspoken",
                                    len(self.text) - resume_at)
                    break
                offset = resume_at
                self.request_id = await self.engine.submit(voice=self.voice, params=self.params,
                                                           text=self.text[offset:], final=True, streaming=False)
            self.is_finished = True
        finally:
            await asyncio.shield(self.close())

    async def close(self) -> None:
        if self.request_id is not None and not self.is_finished:
            request_id, self.request_id = self.request_id, None
            try:
                await self.engine.cancel(request_id)
            except (EngineError, asyncio.TimeoutError):
                pass
        if self._has_slot:
            self._has_slot = False
            self.state.admission.release()


class _SynthesisResponse(StreamingResponse):
    """A streamed synthesis whose engine request and slot are released however the response ends, even when
    the client left before its body began (Starlette then never starts the body iterator)."""

    def __init__(self, synthesis: _Synthesis, content, media_type: str) -> None:
        super().__init__(content, media_type=media_type)
        self.synthesis = synthesis

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await asyncio.shield(self.synthesis.close())


async def _wav_stream(pcm_chunks: AsyncIterator[np.ndarray], model_rate: int) -> AsyncIterator[bytes]:
    yield wav_header(model_rate)
    async for pcm in pcm_chunks:
        yield pcm16_encode(pcm)


async def _start(request: Request, text, voice, params: SamplingParams | dict | None = None) -> _Synthesis:
    """`params`: the engine request's (the same for each request of a long turn; None, or the fields of a dict
    that it leaves out: the model's defaults, EngineClient.submit)."""
    state = request.app.state.voxrt
    engine = _require_engine(request)
    if not isinstance(text, str) or not text.strip():
        raise HTTPError(400, "invalid_request", "'input' must be a non-empty string", param="input")
    if len(text) > state.config.max_http_input_chars:
        raise HTTPError(400, "text_too_long", f"input has {len(text)} characters; the limit is "
                        f"{state.config.max_http_input_chars}", param="input")
    if voice is not None and (not isinstance(voice, str) or voice not in engine.info.voices):
        raise HTTPError(400, "unknown_voice", f"unknown voice {voice!r}; available: {', '.join(engine.info.voices)}",
                        param="voice")
    synthesis = _Synthesis(state, engine, _speakable(replace_lone_surrogates(text)), voice, params)
    await synthesis.start()
    return synthesis


@handle_errors
async def generate(request: Request) -> Response:
    """POST /generate (VoxServe-compatible): multipart form `text`, optional `streaming` (default true),
    optional `voice`; WAV out, streamed with an open-ended header or whole with exact sizes."""
    _require_auth(request)
    await read_body(request)
    try:
        form = await request.form()
    except Exception:  # noqa: BLE001 (malformed multipart)
        raise HTTPError(400, "invalid_request", "expected a multipart or url-encoded form") from None
    if form.get("audio") is not None:
        raise HTTPError(400, "unsupported", "audio input is not supported by this model")
    streaming = str(form.get("streaming", "true")).lower() not in ("false", "0", "no")
    synthesis = await _start(request, form.get("text"), form.get("voice"))
    request.app.state.voxrt.metrics.http_requests.labels("generate").inc()
    rate = synthesis.engine.info.sample_rate
    if streaming:
        return _SynthesisResponse(synthesis, _wav_stream(synthesis.pcm_chunks(), rate), "audio/wav")
    # Whole: generated before the response starts, so nothing else would notice the client leaving: the
    # disconnect is watched beside it, and cancels it.
    collect = asyncio.ensure_future(_collect_pcm16(synthesis))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not collect.done():
            collect.cancel()
            await asyncio.gather(collect, return_exceptions=True)
            await synthesis.close()
    if collect.cancelled():
        log.info("/generate: the client left before its audio was complete; request cancelled")
        return Response(status_code=499)
    body = collect.result()
    return Response(wav_header(rate, data_bytes=len(body)) + body, media_type="audio/wav")


async def _collect_pcm16(synthesis: _Synthesis) -> bytes:
    return b"".join([pcm16_encode(pcm) async for pcm in synthesis.pcm_chunks()])


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (the body was read already: the next ASGI message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


# Programs with random weights: their audio is noise (the browser page says so). A random checkpoint made by
# `voxrt make-checkpoint` for a real program cannot be told apart here.
NOISE_MODELS = ("tiny", "tiny-lite", "standin", "qwen3-tts-1.7b-shape")


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
    raw = await read_body(request)
    if raw:
        try:
            body = json.loads(raw)
            ttl = float(body.get("ttl_s", ttl)) if isinstance(body, dict) else ttl
        except (ValueError, TypeError, RecursionError):
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
    replicas = _replica_counts(state.engine)
    if state.engine_is_ready:
        return JSONResponse({"status": "ready", "model": state.engine.info.name, **replicas})
    return JSONResponse({"status": "not_ready", **replicas}, status_code=503)


def _replica_counts(engine) -> dict:
    """With --dp-size N: {"replicas": {"ready": k, "total": N}} (ready while k >= 1); nothing for one engine."""
    clients = getattr(engine, "replicas", None)
    if clients is None:
        return {}
    return {"replicas": {"ready": sum(1 for c in clients if c.is_ready), "total": len(clients)}}


async def metrics(request: Request) -> Response:
    state = request.app.state.voxrt
    if state.engine_is_ready:
        try:  # the engine's last idle pool check, not a new one: a scrape costs the engine no pool walk
            state.metrics.update_engine(await state.engine.stats(timeout_s=2.0))
        except Exception:  # noqa: BLE001 (metrics must render even when the engine is stuck)
            log.warning("engine stats unavailable for /metrics")
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")
