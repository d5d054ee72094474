"""Cartesia-compatible TTS WebSocket at `/tts/websocket`, translated onto the native session (bridge.py).

Client messages (Cartesia's shapes, as the `cartesia` SDK sends them): a generation request `{context_id,
model_id, transcript, voice: {mode: "id", id} | id, output_format: {container: "raw", encoding, sample_rate},
continue, add_timestamps?, flush?, max_buffer_delay_ms?, language?, speed?}` (the first for a context_id opens
it, later ones with `continue: true` append, `continue: false` is its last input) and `{context_id, cancel:
true}`. Replies: `{"type": "chunk", data: base64, done: false, flush_id, ...}`, `{"type": "timestamps",
word_timestamps: {words, start, end}, flush_id}` (seconds, when `add_timestamps`), `{"type": "flush_done",
flush_id}`, `{"type": "done", done: true}`, `{"type": "error", ...}`, each with `context_id` and `status_code`.
Encodings pcm_s16le, pcm_f32le, pcm_mulaw, pcm_alaw; sample rates 8000-48000 (22050 and 44100 are resampled
here from the native 48000). docs/compat-cartesia.md says what differs (one voice per connection; `speed`,
`language` and phoneme timestamps are refused or ignored as listed there).

Buffering (`max_buffer_delay_ms`, default 3000, 0-5000): the native session speaks whole sentences as they
come and holds the end of the text until a flush or the context's end; here, a context whose text was
followed by no input for `max_buffer_delay_ms` gets a native `flush` of its own (an internal one: no
`flush_done`), so the held end is spoken then (0: after every push). `flush_id` counts the client's flushes
per context from 1: every chunk and timestamps message carries the id of the segment it voices, `flush_done`
the id of the segment it closes. The native `flushed` events come back in the order of the flushes, so a
per-context queue tells the client's from the internal ones.

An error about a context ends it (Cartesia: `done: true`): the adapter stops it (native `cancel`) and sends
nothing more of it; a later request on it gets an error saying so (a cancel of it is ignored).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import functools
import json
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect

from voxrt.audio.pcm import pcm16_decode, pcm16_encode
from voxrt.audio.resample import StreamResampler
from voxrt.gateway.compat.aliases import AliasError
from voxrt.gateway.compat.bridge import NativeLink, Outbox, check_auth, run_adapter, session_slot, unknown_event
from voxrt.protocol.config import Limits
from voxrt.protocol.errors import CONTEXT_LIMIT, INACTIVITY_TIMEOUT, close_reason
from voxrt.protocol.frames import AudioFrameHeader
from voxrt.protocol.server_events import (Alignment, Cancelled, ContextDone, ContextStarted, Error, Flushed, Pong,
                                          ServerEvent, SessionStarted)

log = logging.getLogger("voxrt.gateway.compat.cartesia")

NATIVE_RATES = (8000, 16000, 24000, 48000)
RATES = (8000, 16000, 22050, 24000, 44100, 48000)
ENCODINGS = {"pcm_s16le": "pcm16", "pcm_f32le": "pcm16", "pcm_mulaw": "mulaw", "pcm_alaw": "alaw"}
DEFAULT_BUFFER_DELAY_MS = 3000  # Cartesia's default and range for max_buffer_delay_ms
MAX_BUFFER_DELAY_MS = 5000
IDLE_TIMEOUT_S = 300.0  # Cartesia closes idle WebSockets after 5 minutes (and asks clients to connect early)
STATUS_CODES = {CONTEXT_LIMIT: 429, INACTIVITY_TIMEOUT: 408, "server_busy": 429, "unauthorized": 401}


def session_limits(server_limits: Limits) -> Limits:
    """The native session's limits under this adapter: the server's, with Cartesia's idle timeout (5 minutes,
    also before the first request: clients are told to connect before their first generation)."""
    return dataclasses.replace(server_limits, inactivity_timeout_s=IDLE_TIMEOUT_S, start_timeout_s=IDLE_TIMEOUT_S)


class RequestError(ValueError):
    pass


class ContextOut:
    """One context's frames -> Cartesia's raw encoding at its sample rate, and its buffering and flush state."""

    def __init__(self, encoding: str, rate: int) -> None:
        self.encoding, self.rate = encoding, rate
        self.native_rate = rate if rate in NATIVE_RATES else 48000
        self._resampler = StreamResampler(self.native_rate, rate) if rate != self.native_rate else None
        self.add_timestamps = False
        self.flush_id = 1  # the segment being voiced: the client's flushes so far + 1
        self.pending_flushes: collections.deque[bool] = collections.deque()  # sent, not yet flushed: client's?
        self.buffer_delay_ms = DEFAULT_BUFFER_DELAY_MS
        self.has_unflushed_text = False  # text sent since the last flush (what the native session may hold)
        self.timer: asyncio.TimerHandle | None = None  # the buffer delay's internal flush
        self.is_ended = False  # context.end sent
        self.is_stopped = False  # cancelled or failed: nothing more of it goes out

    def native_output(self) -> dict:
        return {"codec": ENCODINGS[self.encoding], "sample_rate": self.native_rate, "frame_ms": 20}

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def stop(self) -> None:
        self.is_stopped = True
        self.cancel_timer()

    def encode(self, payloads: list[bytes], is_last: bool) -> bytes:
        data = b"".join(payloads)
        if ENCODINGS[self.encoding] != "pcm16":
            return data  # G.711 comes at 8000 Hz from the native session
        if self._resampler is not None:
            pcm = self._resampler.process_pcm16(data, last=is_last)
        elif self.encoding == "pcm_f32le":
            pcm = pcm16_decode(data)
        else:
            return data  # s16le at a rate the native session serves
        if self.encoding == "pcm_f32le":
            return pcm.astype("<f4").tobytes()
        return pcm16_encode(pcm)


def parse_output_format(value) -> tuple[str, int]:
    if not isinstance(value, dict) or value.get("container", "raw") != "raw":
        raise RequestError("output_format must be {container: 'raw', encoding, sample_rate}")
    encoding, rate = value.get("encoding"), value.get("sample_rate")
    if not isinstance(encoding, str) or encoding not in ENCODINGS:
        raise RequestError(f"encoding must be one of {', '.join(ENCODINGS)}")
    if isinstance(rate, bool) or not isinstance(rate, int) or rate not in RATES \
            or (encoding in ("pcm_mulaw", "pcm_alaw") and rate != 8000):
        raise RequestError(f"sample_rate must be one of {RATES} (8000 for mu-law and A-law)")
    return encoding, rate


def parse_voice_id(value) -> str:
    """The voice id of a request's `voice` ({mode: "id", id} or the id itself); required, never a default."""
    if value is None:
        raise RequestError("voice is required: {mode: 'id', id: VOICE_ID}")
    if isinstance(value, str) and value:
        return value
    if not isinstance(value, dict):
        raise RequestError("voice must be {mode: 'id', id: VOICE_ID}")
    mode = value.get("mode", "id")
    if mode == "embedding":
        raise RequestError("voice embeddings are not supported on this server; use {mode: 'id', id: VOICE_ID}")
    if mode != "id":
        raise RequestError(f"voice.mode must be 'id', got {str(mode)[:32]!r}")
    voice_id = value.get("id")
    if not isinstance(voice_id, str) or not voice_id:
        raise RequestError("voice.id is required: {mode: 'id', id: VOICE_ID}")
    return voice_id


def parse_buffer_delay(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or not 0 <= value <= MAX_BUFFER_DELAY_MS:
        raise RequestError(f"max_buffer_delay_ms must be a number of milliseconds from 0 to {MAX_BUFFER_DELAY_MS}")
    return int(value)


class CartesiaAdapter:
    """Cartesia sets voice and output format per request; the native session has one per session, so the
    first request fixes them and a later request that asks for another is refused for its context."""

    def __init__(self, ws: WebSocket, state) -> None:
        self.ws, self.state = ws, state
        self.outbox = Outbox(ws, stall_timeout_s=state.config.limits.inactivity_timeout_s,
                             stall_message=lambda code, message: self._error_body(None, message, code, 408))
        self.link = NativeLink(self._on_event, self._on_frame, self._on_close, (self.outbox,))
        self.session_key: tuple | None = None  # (voice, encoding, rate) of the native session
        self.contexts: dict[str, ContextOut] = {}  # open: from the first request to done, cancel or error
        self.closed: set[str] = set()  # ended by an error or a cancel: their audio and native events are dropped,
        # a request on one gets an error
        self.by_index: dict[int, str] = {}
        self.is_shut = False

    @property
    def limits(self) -> Limits:
        return session_limits(self.state.config.limits)

    async def read(self) -> None:
        while True:
            await self.link.wait_room()  # backpressure: the peer's next message once the last ones are taken
            try:
                frame = await self.ws.receive()
            except (WebSocketDisconnect, RuntimeError, KeyError):
                return
            if frame.get("type") == "websocket.disconnect":
                return
            raw = frame.get("text")
            if raw is None:
                self._error(None, "binary frames are not supported: send each request as a JSON text frame")
                continue
            try:
                message = json.loads(raw)
            except (ValueError, RecursionError):  # RecursionError: '[[[[...' nested past the parser
                self._error(None, "message is not valid JSON")
                continue
            if not isinstance(message, dict):
                self._error(None, "message must be a JSON object")
                continue
            try:
                self.handle(message)
            except Exception:  # noqa: BLE001 (a message of a shape no check foresaw: its error, not the socket's end)
                log.warning("cartesia adapter: a message failed", exc_info=True)
                context_id = message.get("context_id")
                self._error(context_id if isinstance(context_id, str) and context_id else None,
                            "this request could not be read: check its fields' types against Cartesia's API")

    def handle(self, message: dict) -> None:
        context_id = message.get("context_id")
        if not isinstance(context_id, str) or not context_id:
            return self._error(None, "context_id must be a non-empty string")
        if context_id in self.closed:  # its error (done: true) or cancel ended it
            if message.get("cancel") is not True:  # a request on it is answered, never met with silence
                self._error(context_id, f"context {context_id[:64]!r} has ended (cancelled or failed); send "
                                        f"this request on a new context_id")
            return None
        if message.get("cancel") is True:
            out = self.contexts.pop(context_id, None)
            if out is not None:
                out.stop()
                self.closed.add(context_id)
            if self.session_key is not None:  # before any request there is nothing to cancel
                self.link.send({"type": "cancel", "context_id": context_id})
            return None
        try:
            self._generation(context_id, message)
        except RequestError as exc:
            self._fail(context_id, str(exc))
        except AliasError as exc:
            self._fail(context_id, exc.message, exc.code)
        return None

    def _generation(self, context_id: str, message: dict) -> None:
        info = self.state.engine.info
        aliases = self.state.config.aliases
        aliases.resolve_model(message.get("model_id"), info.name)
        out = self.contexts.get(context_id)
        transcript = message.get("transcript", "")
        if transcript is None:
            transcript = ""
        if not isinstance(transcript, str):
            raise RequestError("transcript must be a string")
        if out is not None and not transcript:
            voice = self.session_key[0]  # a message that only ends or flushes an open context voices nothing
        else:
            voice = aliases.resolve_voice(parse_voice_id(message.get("voice")), info.voices, info.default_voice)
        encoding, rate = parse_output_format(message.get("output_format"))
        if message.get("speed") not in (None, "normal", 1, 1.0):
            raise RequestError("speed is not supported on this server (normal only)")
        buffer_delay_ms = parse_buffer_delay(message.get("max_buffer_delay_ms"))
        is_last = message.get("continue", False) is not True
        key = (voice, encoding, rate)
        if self.session_key is not None and key != self.session_key:
            raise RequestError("this server takes one voice and output_format per connection; open another "
                               "connection for a different one")
        if out is None and not transcript and is_last:
            # nothing was said and nothing will be: done at once, without a native context
            self.outbox.json({"type": "done", "context_id": context_id, "status_code": 200, "done": True})
            return
        if self.session_key is None:
            self.session_key = key
            self.link.send({"type": "session.start", "voice": voice,
                            "output": ContextOut(encoding, rate).native_output(), "pacing": {"mode": "burst"}})
        if out is None:
            out = self.contexts[context_id] = ContextOut(encoding, rate)
            self.link.send({"type": "text", "context_id": context_id, "text": transcript})  # opens it
        elif transcript:
            self.link.send({"type": "text", "context_id": context_id, "text": transcript})
        out.has_unflushed_text = out.has_unflushed_text or bool(transcript)
        out.add_timestamps = out.add_timestamps or message.get("add_timestamps") is True
        if buffer_delay_ms is not None:
            out.buffer_delay_ms = buffer_delay_ms
        out.cancel_timer()  # input came: the buffer delay starts again
        if is_last:
            out.is_ended = True
            self.link.send({"type": "context.end", "context_id": context_id})
        elif message.get("flush") is True:
            self._flush(context_id, out, by_client=True)
        elif out.has_unflushed_text:
            if out.buffer_delay_ms == 0:
                self._flush(context_id, out, by_client=False)
            else:
                out.timer = asyncio.get_running_loop().call_later(out.buffer_delay_ms / 1000, self._buffer_elapsed,
                                                                  context_id, out)

    def _flush(self, context_id: str, out: ContextOut, by_client: bool) -> None:
        out.pending_flushes.append(by_client)
        out.has_unflushed_text = False
        out.cancel_timer()
        self.link.send({"type": "flush", "context_id": context_id})

    def _buffer_elapsed(self, context_id: str, out: ContextOut) -> None:
        """No input for the context's max_buffer_delay_ms: what the native session holds is spoken now."""
        out.timer = None
        if self.is_shut or self.link.is_closed or out.is_stopped or out.is_ended \
                or self.contexts.get(context_id) is not out:
            return
        self._flush(context_id, out, by_client=False)

    def _fail(self, context_id: str, message: str, code: str = "invalid_request") -> None:
        """An error about a context ends it (Cartesia's error is `done: true`): stopped and forgotten; nothing
        more of it is sent, and a later request on it gets an error (`handle`)."""
        self._error(context_id, message, code)
        self.closed.add(context_id)
        out = self.contexts.pop(context_id, None)
        if out is not None:
            out.stop()
            if code != CONTEXT_LIMIT:  # a context refused at its opening has nothing natively to stop
                self.link.send({"type": "cancel", "context_id": context_id})

    def shutdown(self) -> None:
        """The socket is closing: every buffer-delay timer is cancelled (no flush after the close)."""
        self.is_shut = True
        for out in self.contexts.values():
            out.cancel_timer()

    # ---- native -> client ----------------------------------------------------------------------------------

    async def _on_event(self, event: ServerEvent) -> None:
        match event:
            case ContextStarted(context_id=context_id, index=index):
                self.by_index[index] = context_id
            case Alignment(context_id=context_id, words=words):
                out = self.contexts.get(context_id)
                if out is not None and out.add_timestamps and words:
                    self.outbox.json({"type": "timestamps", "context_id": context_id, "status_code": 200,
                                      "done": False, "word_timestamps": {"words": [w["word"] for w in words],
                                                                         "start": [w["start_ms"] / 1000 for w in words],
                                                                         "end": [w["end_ms"] / 1000 for w in words]},
                                      "flush_id": out.flush_id})
            case Flushed(context_id=context_id):
                out = self.contexts.get(context_id)
                if out is not None and out.pending_flushes and out.pending_flushes.popleft():
                    self.outbox.json({"type": "flush_done", "context_id": context_id, "status_code": 200,
                                      "done": False, "flush_done": True, "flush_id": out.flush_id})
                    out.flush_id += 1  # what follows voices the next segment
            case ContextDone(context_id=context_id, reason=reason):
                out = self.contexts.pop(context_id, None)
                if out is not None:
                    out.cancel_timer()
                    if reason != "cancelled":  # Cartesia sends nothing more for a cancelled context
                        self.outbox.json({"type": "done", "context_id": context_id, "status_code": 200,
                                          "done": True})
            case Error(code=code, message=message, context_id=context_id):
                if context_id is None:
                    if code == INACTIVITY_TIMEOUT:
                        message = (f"no message for {self.limits.inactivity_timeout_s:g} s: idle connections are "
                                   f"closed")
                    self._error(None, message, code=code)
                elif context_id not in self.closed:
                    self._fail(context_id, message, code)
            case SessionStarted() | Cancelled() | Pong():
                pass  # nothing to say in Cartesia's terms (a cancelled context just stops)
            case _:
                unknown_event("cartesia", event)

    async def _on_frame(self, header: AudioFrameHeader, payload: bytes) -> None:
        context_id = self.by_index.get(header.index)
        out = self.contexts.get(context_id) if context_id is not None else None
        if out is not None and not out.is_stopped:
            # keyed by segment: one chunk message never holds audio of two flush_ids
            self.outbox.frame((context_id, out.flush_id), (header.is_last, payload),
                              functools.partial(self._chunk, out), len(payload))

    @staticmethod
    def _chunk(out: ContextOut, key: tuple, payloads: list, extras: list) -> dict | None:
        if out.is_stopped:
            return None  # cancelled or failed after these frames were queued
        context_id, flush_id = key
        data = out.encode([p for _, p in payloads], is_last=payloads[-1][0])
        return {"type": "chunk", "context_id": context_id, "status_code": 206, "done": False,
                "data": base64.b64encode(data).decode(), "step_time": 0.0, "flush_id": flush_id} if data else None

    def _error(self, context_id: str | None, message: str, code: str = "invalid_request") -> None:
        self.outbox.json(self._error_body(context_id, message, code, STATUS_CODES.get(code, 400)))

    @staticmethod
    def _error_body(context_id: str | None, message: str, code: str, status_code: int = 400) -> dict:
        body = {"type": "error", "done": True, "status_code": status_code, "error_code": code, "title": code,
                "message": message}
        if context_id is not None:
            body["context_id"] = context_id
        return body

    async def _on_close(self, code: int, reason: str) -> None:
        self.shutdown()
        self.outbox.close(code, reason)


async def websocket_endpoint(ws: WebSocket) -> None:
    state = ws.app.state.voxrt
    await ws.accept()
    if not check_auth(state, ws, ws.headers.get("x-api-key"), ws.query_params.get("api_key"),
                      ws.query_params.get("access_token")):
        state.metrics.errors.labels("unauthorized").inc()
        await _refuse(ws, 4001, "unauthorized", "missing or invalid API key (X-API-Key, ?api_key=, Bearer)")
        return
    async with session_slot(state) as admitted:
        if not admitted:
            await _refuse(ws, 4029, "server_busy", "server at capacity, retry later")
            return
        adapter = CartesiaAdapter(ws, state)
        try:
            await run_adapter(ws, state, adapter.link, adapter.read, adapter.outbox, adapter.limits)
        finally:
            adapter.shutdown()


async def _refuse(ws: WebSocket, close_code: int, code: str, message: str) -> None:
    try:
        await ws.send_text(json.dumps({"type": "error", "done": True, "status_code": 401 if close_code == 4001
                                       else 429, "error_code": code, "title": code, "message": message}))
        await ws.close(close_code, close_reason(message))
    except Exception:  # noqa: BLE001 (already gone)
        pass
