"""Cartesia-compatible TTS WebSocket at `/tts/websocket`, translated onto the native session (bridge.py).

Client messages (Cartesia's shapes, as the `cartesia` SDK sends them): a generation request `{context_id,
model_id, transcript, voice: {mode?, id} | id, output_format: {container: "raw", encoding, sample_rate},
continue, add_timestamps?, flush?, language?, speed?}` (the first for a context_id opens it, later ones with
`continue: true` append, `continue: false` is its last input) and `{context_id, cancel: true}`. Replies:
`{"type": "chunk", data: base64, done: false, ...}`, `{"type": "timestamps", word_timestamps: {words, start,
end}}` (seconds, when `add_timestamps`), `{"type": "flush_done", flush_id}`, `{"type": "done", done: true}`,
`{"type": "error", ...}`, each with `context_id` and `status_code`. Encodings pcm_s16le, pcm_f32le, pcm_mulaw,
pcm_alaw; sample rates 8000-48000 (22050 and 44100 are resampled here from the native 48000).
docs/compat-cartesia.md says what differs (one voice per context; `speed`, `language` and phoneme
timestamps are refused or ignored as listed there).
"""

from __future__ import annotations

import base64
import json
import logging

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxrt.audio.resample import StreamResampler
from voxrt.gateway.compat.aliases import AliasError
from voxrt.gateway.compat.bridge import NativeLink, Outbox, check_auth, run_adapter, session_slot, unknown_event
from voxrt.protocol.frames import AudioFrameHeader
from voxrt.protocol.server_events import (Alignment, Cancelled, ContextDone, ContextStarted, Error, Flushed, Pong,
                                          ServerEvent, SessionStarted)

log = logging.getLogger("voxrt.gateway.compat.cartesia")

NATIVE_RATES = (8000, 16000, 24000, 48000)
RATES = (8000, 16000, 22050, 24000, 44100, 48000)
ENCODINGS = {"pcm_s16le": "pcm16", "pcm_f32le": "pcm16", "pcm_mulaw": "mulaw", "pcm_alaw": "alaw"}


class RequestError(ValueError):
    pass


class ContextOut:
    """One context's frames -> Cartesia's raw encoding at its sample rate."""

    def __init__(self, encoding: str, rate: int) -> None:
        self.encoding, self.rate = encoding, rate
        self.native_rate = rate if rate in NATIVE_RATES else 48000
        self._resampler = StreamResampler(self.native_rate, rate) if rate != self.native_rate else None
        self.add_timestamps = False
        self.flush_ids: list[int] = []

    def native_output(self) -> dict:
        return {"codec": ENCODINGS[self.encoding], "sample_rate": self.native_rate, "frame_ms": 20}

    def encode(self, payloads: list[bytes], is_last: bool) -> bytes:
        data = b"".join(payloads)
        if ENCODINGS[self.encoding] != "pcm16":
            return data  # G.711 comes at 8000 Hz from the native session
        pcm = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
        if self._resampler is not None:
            pcm = self._resampler.process(pcm)
            if is_last:
                pcm = np.concatenate([pcm, self._resampler.flush()])
        if self.encoding == "pcm_f32le":
            return pcm.astype("<f4").tobytes()
        return (np.clip(pcm, -1.0, 32767 / 32768) * 32768).astype("<i2").tobytes()


def parse_output_format(value) -> tuple[str, int]:
    if not isinstance(value, dict) or value.get("container", "raw") != "raw":
        raise RequestError("output_format must be {container: 'raw', encoding, sample_rate}")
    encoding, rate = value.get("encoding"), value.get("sample_rate")
    if encoding not in ENCODINGS:
        raise RequestError(f"encoding must be one of {', '.join(ENCODINGS)}")
    if rate not in RATES or (encoding in ("pcm_mulaw", "pcm_alaw") and rate != 8000):
        raise RequestError(f"sample_rate must be one of {RATES} (8000 for mu-law and A-law)")
    return encoding, rate


class CartesiaAdapter:
    """Cartesia sets voice and output format per request; the native session has one per session, so the
    first request fixes them and a later request that asks for another is refused for its context."""

    def __init__(self, ws: WebSocket, state) -> None:
        self.ws, self.state = ws, state
        self.outbox = Outbox(ws, stall_timeout_s=state.config.limits.inactivity_timeout_s,
                             stall_message=lambda code, message: self._error_body(None, message, code, 408))
        self.link = NativeLink(self._on_event, self._on_frame, self._on_close, (self.outbox,))
        self.session_key: tuple | None = None  # (voice, encoding, rate) of the native session
        self.contexts: dict[str, ContextOut] = {}
        self.by_index: dict[int, str] = {}
        self.texts: dict[str, str] = {}
        self.num_flushes = 0

    async def read(self) -> None:
        while True:
            await self.link.wait_room()  # backpressure: the peer's next message once the last ones are taken
            try:
                raw = await self.ws.receive_text()
            except (WebSocketDisconnect, RuntimeError, KeyError):
                return
            try:
                message = json.loads(raw)
            except ValueError:
                self._error(None, "message is not valid JSON")
                continue
            if isinstance(message, dict):
                self.handle(message)
            else:
                self._error(None, "message must be a JSON object")

    def handle(self, message: dict) -> None:
        context_id = message.get("context_id")
        if not isinstance(context_id, str) or not context_id:
            return self._error(None, "context_id must be a non-empty string")
        if message.get("cancel") is True:
            if self.session_key is not None:  # before any request there is nothing to cancel
                self.link.send({"type": "cancel", "context_id": context_id})
            return None
        try:
            self._generation(context_id, message)
        except RequestError as exc:
            self._error(context_id, str(exc))
        except AliasError as exc:
            self._error(context_id, exc.message)
        return None

    def _generation(self, context_id: str, message: dict) -> None:
        info = self.state.engine.info
        aliases = self.state.config.aliases
        aliases.resolve_model(message.get("model_id"), info.name)
        voice = message.get("voice")
        voice_id = voice.get("id") if isinstance(voice, dict) else voice
        voice = aliases.resolve_voice(voice_id if isinstance(voice_id, str) else None, info.voices, info.default_voice)
        encoding, rate = parse_output_format(message.get("output_format"))
        if message.get("speed") not in (None, "normal", 1, 1.0):
            raise RequestError("speed is not supported on this server (normal only)")
        transcript = message.get("transcript", "")
        if not isinstance(transcript, str):
            raise RequestError("transcript must be a string")
        key = (voice, encoding, rate)
        if self.session_key is None:
            self.session_key = key
            out = ContextOut(encoding, rate)
            self.link.send({"type": "session.start", "voice": voice, "output": out.native_output(),
                            "pacing": {"mode": "burst"}})
        elif key != self.session_key:
            raise RequestError("this server takes one voice and output_format per connection; open another "
                               "connection for a different one")
        if context_id not in self.contexts:
            self.contexts[context_id] = ContextOut(encoding, rate)
        out = self.contexts[context_id]
        out.add_timestamps = out.add_timestamps or message.get("add_timestamps") is True
        if transcript:
            self.texts[context_id] = self.texts.get(context_id, "") + transcript
            self.link.send({"type": "text", "context_id": context_id, "text": transcript})
        if message.get("continue", False) is not True:
            self.link.send({"type": "context.end", "context_id": context_id})
        elif message.get("flush") is True:
            self.num_flushes += 1
            out.flush_ids.append(self.num_flushes)
            self.link.send({"type": "flush", "context_id": context_id})

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
                                                                         "end": [w["end_ms"] / 1000 for w in words]}})
            case Flushed(context_id=context_id):
                out = self.contexts.get(context_id)
                if out is not None and out.flush_ids:
                    self.outbox.json({"type": "flush_done", "context_id": context_id, "status_code": 200,
                                      "done": False, "flush_done": True, "flush_id": out.flush_ids.pop(0)})
            case ContextDone(context_id=context_id, reason=reason):
                if reason != "cancelled":  # Cartesia sends nothing more for a cancelled context
                    self.outbox.json({"type": "done", "context_id": context_id, "status_code": 200, "done": True})
                self.outbox.call(lambda: self._forget(context_id))
            case Error(code=code, message=message, context_id=context_id):
                self._error(context_id, message, code=code)
            case SessionStarted() | Cancelled() | Pong():
                pass  # nothing to say in Cartesia's terms (a cancelled context just stops)
            case _:
                unknown_event("cartesia", event)

    def _forget(self, context_id: str) -> None:
        self.contexts.pop(context_id, None)
        self.texts.pop(context_id, None)

    async def _on_frame(self, header: AudioFrameHeader, payload: bytes) -> None:
        context_id = self.by_index.get(header.index)
        if context_id is not None:
            self.outbox.frame(context_id, (header.is_last, payload), self._chunk, len(payload))

    def _chunk(self, context_id: str, payloads: list, extras: list) -> dict | None:
        out = self.contexts.get(context_id)
        if out is None:
            return None
        data = out.encode([p for _, p in payloads], is_last=payloads[-1][0])
        return {"type": "chunk", "context_id": context_id, "status_code": 206, "done": False,
                "data": base64.b64encode(data).decode(), "step_time": 0.0} if data else None

    def _error(self, context_id: str | None, message: str, code: str = "invalid_request") -> None:
        self.outbox.json(self._error_body(context_id, message, code))

    @staticmethod
    def _error_body(context_id: str | None, message: str, code: str, status_code: int = 400) -> dict:
        body = {"type": "error", "done": True, "status_code": status_code, "error_code": code, "title": code,
                "message": message}
        if context_id is not None:
            body["context_id"] = context_id
        return body

    async def _on_close(self, code: int, reason: str) -> None:
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
        await run_adapter(ws, state, adapter.link, adapter.read, adapter.outbox)


async def _refuse(ws: WebSocket, close_code: int, code: str, message: str) -> None:
    try:
        await ws.send_text(json.dumps({"type": "error", "done": True, "status_code": 401 if close_code == 4001
                                       else 429, "error_code": code, "title": code, "message": message}))
        await ws.close(close_code, message[:120])
    except Exception:  # noqa: BLE001 (already gone)
        pass
