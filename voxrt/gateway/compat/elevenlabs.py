"""ElevenLabs-compatible text-to-speech WebSockets: `/v1/text-to-speech/{voice_id}/stream-input` and
`/v1/text-to-speech/{voice_id}/multi-stream-input`, translated onto the native session (bridge.py).

Client messages (ElevenLabs' published shapes): the initial `{"text": " ", "voice_settings", "generation_config",
"xi-api-key"?, "authorization"?}`, `{"text": "...", "try_trigger_generation"?, "flush"?}`, and `{"text": ""}`
to finish (stream-input: then the socket closes, as theirs does). Multi-context adds `context_id` to each and
`{"context_id", "flush": true}`, `{"context_id", "close_context": true}` (a flush under way finishes, else a
hard stop: barge-in),
`{"context_id", "text": ""}` (keep-alive) and `{"close_socket": true}`. Replies: `{"audio": base64,
"isFinal": false, "normalizedAlignment", "alignment"}` per chunk (multi: with `contextId`) and `{"isFinal":
true}` when a context is done. `output_format` (query): pcm_8000/16000/24000/48000, ulaw_8000, alaw_8000,
mp3_<rate>_<kbps> (re-encoded with PyAV), opus_48000_<kbps> (Ogg Opus). docs/compat-elevenlabs.md says what
differs (speech starts at the first word, so `chunk_length_schedule` and `try_trigger_generation` change
nothing; contexts never close the socket).
"""

from __future__ import annotations

import base64
import json
import logging
import re

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxrt.audio import OggOpusWriter
from voxrt.gateway.compat.av_codec import ContainerEncoder
from voxrt.gateway.compat.aliases import AliasError
from voxrt.gateway.compat.bridge import NativeLink, Outbox, check_auth, run_adapter, session_slot, unknown_event
from voxrt.protocol.frames import AudioFrameHeader
from voxrt.protocol.server_events import (Alignment, Cancelled, ContextDone, ContextStarted, Error, Flushed, Pong,
                                          ServerEvent, SessionStarted)

log = logging.getLogger("voxrt.gateway.compat.elevenlabs")

DEFAULT_CONTEXT = "default"  # the context of stream-input, and of multi-stream messages without context_id
DEFAULT_OUTPUT_FORMAT = "mp3_44100_128"  # ElevenLabs' default
CLOSE_POLICY = 1008  # their close code for a refused request


class FormatError(ValueError):
    pass


class OutputFormat:
    """One `output_format` value: what the native session emits and how frames become ElevenLabs audio."""

    def __init__(self, name: str) -> None:
        match = re.fullmatch(r"(pcm|ulaw|alaw|mp3|opus)_(\d+)(?:_(\d+))?", name or "")
        if not match:
            raise FormatError(f"output_format {name[:40]!r} is not supported; use pcm_16000, pcm_24000, "
                              f"ulaw_8000, mp3_44100_128, opus_48000_64 (docs/compat-elevenlabs.md)")
        self.name, self.kind, self.rate = name, match.group(1), int(match.group(2))
        self.kbps = int(match.group(3)) if match.group(3) else None
        if self.kind == "pcm" and self.rate not in (8000, 16000, 24000, 48000):
            raise FormatError(f"{name}: PCM is served at 8000, 16000, 24000 or 48000 Hz")
        if self.kind in ("ulaw", "alaw") and self.rate != 8000:
            raise FormatError(f"{name}: G.711 is 8000 Hz")
        if self.kind == "opus" and self.rate != 48000:
            raise FormatError(f"{name}: Opus is served at 48000 Hz")
        if self.kind == "mp3" and self.rate not in (22050, 24000, 44100, 48000):
            raise FormatError(f"{name}: MP3 is served at 22050, 24000, 44100 or 48000 Hz")

    def native_output(self) -> dict:
        codec = {"pcm": "pcm16", "ulaw": "mulaw", "alaw": "alaw", "opus": "opus", "mp3": "pcm16"}[self.kind]
        rate = (24000 if self.rate <= 24000 else 48000) if self.kind == "mp3" else self.rate
        return {"codec": codec, "sample_rate": rate, "frame_ms": 20}


class ContextAudio:
    """One context's audio on its way out: native frames -> this format's bytes (stateful for mp3 and Ogg)."""

    def __init__(self, fmt: OutputFormat, native_rate: int) -> None:
        self.fmt, self.native_rate = fmt, native_rate
        self._mp3 = (ContainerEncoder("mp3", native_rate, out_rate=fmt.rate, bit_rate=(fmt.kbps or 128) * 1000)
                     if fmt.kind == "mp3" else None)
        self._ogg = OggOpusWriter(48000, 20) if fmt.kind == "opus" else None
        self._started = False

    def encode(self, payloads: list[bytes], is_last: bool) -> bytes:
        if self._mp3 is not None:
            pcm = np.frombuffer(b"".join(payloads), dtype="<i2").astype(np.float32) / 32768.0
            data = self._mp3.push(pcm)
            return data + self._mp3.finish() if is_last else data
        if self._ogg is not None:
            head = b"" if self._started else self._ogg.header_pages()
            self._started = True
            return head + self._ogg.page(payloads, is_last=is_last)
        return b"".join(payloads)


def char_alignment(text: str, spans: list[dict], offset_ms: int) -> dict:
    """Native alignment spans (char offsets into the context's text, ms of its audio) as ElevenLabs'
    per-character arrays, times relative to the audio chunk that starts at `offset_ms`. Each span's time is
    spread evenly over its characters (voxrt's alignment is estimated; `estimated` is not part of theirs)."""
    chars, starts, durations = [], [], []
    for span in spans:
        first, last = int(span["char_start"]), int(span["char_end"])
        if last <= first:
            continue
        step = (span["end_ms"] - span["start_ms"]) / (last - first)
        for i, ch in enumerate(text[first:last]):
            chars.append(ch)
            starts.append(max(0, round(span["start_ms"] + i * step - offset_ms)))
            durations.append(max(0, round(step)))
    return {"chars": chars, "charStartTimesMs": starts, "charDurationsMs": durations}


class ElevenLabsAdapter:
    def __init__(self, ws: WebSocket, state, voice: str, fmt: OutputFormat, *, multi: bool) -> None:
        self.ws, self.state, self.voice, self.fmt, self.multi = ws, state, voice, fmt, multi
        self.outbox = Outbox(ws, stall_timeout_s=state.config.limits.inactivity_timeout_s,
                             stall_message=self._error_body)
        self.link = NativeLink(self._on_event, self._on_frame, self._on_close, (self.outbox,))
        self.native_rate = fmt.native_output()["sample_rate"]
        self.texts: dict[str, str] = {}  # context id -> the text sent to it (alignment offsets index it)
        self.audio: dict[str, ContextAudio] = {}
        self.by_index: dict[int, str] = {}
        self.final_sent: set[str] = set()
        self.flushing: set[str] = set()  # contexts with a flush whose audio is not all out yet
        self.pending_first: dict | None = None

    def start(self) -> None:
        self.link.send({"type": "session.start", "voice": self.voice, "output": self.fmt.native_output(),
                        "pacing": {"mode": "burst"}})

    # ---- client -> native ----------------------------------------------------------------------------------

    async def read(self) -> None:
        while True:
            await self.link.wait_room()  # backpressure: the peer's next message once the last ones are taken
            try:
                data = await self.ws.receive_text()
            except (WebSocketDisconnect, RuntimeError, KeyError):
                return
            try:
                message = json.loads(data)
            except ValueError:
                self._error("invalid_json", "message is not valid JSON")
                continue
            if not isinstance(message, dict):
                self._error("invalid_json", "message must be a JSON object")
                continue
            if not self.handle(message):
                return

    def handle(self, message: dict) -> bool:
        """One client message; False when the socket is to end (after what is queued)."""
        speed = (message.get("voice_settings") or {}).get("speed") if isinstance(message.get("voice_settings"),
                                                                                dict) else None
        if speed is not None and speed != 1:
            self._error("unsupported_parameter", "voice_settings.speed is not supported on this server (1.0 only)")
        if self.multi and message.get("close_socket") is True:
            self.link.send({"type": "session.end"})
            return True
        context_id = message.get("context_id", DEFAULT_CONTEXT) if self.multi else DEFAULT_CONTEXT
        if not isinstance(context_id, str) or not context_id:
            self._error("invalid_message", "context_id must be a non-empty string")
            return True
        if self.multi and message.get("close_context") is True:
            # As ElevenLabs': a context with a flush under way finishes it; any other stops at once (barge-in).
            if context_id in self.flushing:
                self.link.send({"type": "context.end", "context_id": context_id})
            else:
                self.link.send({"type": "cancel", "context_id": context_id})
            return True
        text = message.get("text")
        if text is not None and not isinstance(text, str):
            self._error("invalid_message", "text must be a string", context_id)
            return True
        flush = message.get("flush") is True
        if text == "" and not flush:
            if self.multi:  # keep-alive: resets the inactivity timer
                self.link.send({"type": "ping"})
            elif context_id in self.texts:  # end of input: finish speaking, then isFinal and close
                self.link.send({"type": "context.end", "context_id": context_id})
            else:
                self.link.send({"type": "session.end"})
            return True
        if text:
            self.final_sent.discard(context_id)
            self.texts[context_id] = self.texts.get(context_id, "") + text
            self.link.send({"type": "text", "context_id": context_id, "text": text})
        if flush and context_id in self.texts:
            self.flushing.add(context_id)
            self.link.send({"type": "flush", "context_id": context_id})
        return True

    # ---- native -> client ----------------------------------------------------------------------------------

    async def _on_event(self, event: ServerEvent) -> None:
        match event:
            case ContextStarted(context_id=context_id, index=index):
                self.by_index[index] = context_id
                self.audio[context_id] = ContextAudio(self.fmt, self.native_rate)
            case Alignment(context_id=context_id):
                spans = event.words or event.segments
                # rides on its chunk's audio message while that is still being built; when the paced frames went
                # out already, it goes alone (no audio; times from its own first character)
                self.outbox.attach(context_id, {"spans": spans}, self._alignment_alone(context_id, spans))
            case Flushed(context_id=context_id):
                self.flushing.discard(context_id)
                if self.multi:
                    self._final(context_id)
            case ContextDone(context_id=context_id):
                self._final(context_id)
                self.outbox.call(lambda: self._forget(context_id))  # after its queued frames went out
                if not self.multi:  # stream-input: one generation per socket, as ElevenLabs'
                    self.outbox.close(1000, "done")
            case Error(code=code, message=message, context_id=context_id):
                self._error(code, message, context_id)
            case SessionStarted() | Cancelled() | Pong():
                pass  # nothing to say in ElevenLabs' terms (isFinal follows a cancel, with its context.done)
            case _:
                unknown_event("elevenlabs", event)

    async def _on_frame(self, header: AudioFrameHeader, payload: bytes) -> None:
        context_id = self.by_index.get(header.index)
        if context_id is not None:
            self.outbox.frame(context_id, (header.pts_ms, header.is_last, payload), self._audio_message, len(payload))

    def _audio_message(self, context_id: str, payloads: list, extras: list[dict]) -> dict | None:
        audio = self.audio.get(context_id)
        if audio is None:
            return None
        data = audio.encode([p for _, _, p in payloads], is_last=payloads[-1][1])
        message: dict = {"audio": base64.b64encode(data).decode(), "isFinal": False}
        text = self.texts.get(context_id, "")
        spans = [s for extra in extras for s in extra["spans"]]
        alignment = char_alignment(text, spans, payloads[0][0]) if spans else None
        message["normalizedAlignment"] = alignment
        message["alignment"] = alignment
        if self.multi:
            message["contextId"] = context_id
        return message if data or alignment else None

    def _alignment_alone(self, context_id: str, spans: list[dict]) -> dict | None:
        if not spans:
            return None
        alignment = char_alignment(self.texts.get(context_id, ""), spans, round(spans[0]["start_ms"]))
        if not alignment["chars"]:
            return None
        message: dict = {"audio": "", "isFinal": False, "normalizedAlignment": alignment, "alignment": alignment}
        if self.multi:
            message["contextId"] = context_id
        return message

    def _forget(self, context_id: str) -> None:
        self.flushing.discard(context_id)
        self.audio.pop(context_id, None)
        self.texts.pop(context_id, None)

    def _final(self, context_id: str | None) -> None:
        if context_id is None or context_id in self.final_sent:
            return
        self.final_sent.add(context_id)
        self.outbox.json({"isFinal": True, "contextId": context_id} if self.multi else {"isFinal": True})

    def _error(self, code: str, message: str, context_id: str | None = None) -> None:
        self.outbox.json(self._error_body(code, message, context_id))

    def _error_body(self, code: str, message: str, context_id: str | None = None) -> dict:
        body = {"message": message, "error": code, "code": code}
        if self.multi and context_id is not None:
            body["contextId"] = context_id
        return body

    async def _on_close(self, code: int, reason: str) -> None:
        self.outbox.close(code, reason)


async def _endpoint(ws: WebSocket, *, multi: bool) -> None:
    state = ws.app.state.voxrt
    await ws.accept()
    first = None
    authorized = check_auth(state, ws, ws.headers.get("xi-api-key"), ws.query_params.get("xi-api-key"),
                            ws.query_params.get("xi_api_key"))
    if not authorized:  # ElevenLabs also takes the key in the first message
        try:
            first = json.loads(await ws.receive_text())
        except (WebSocketDisconnect, RuntimeError, ValueError, KeyError):
            first = None
        if isinstance(first, dict):
            bearer = first.get("authorization")
            token = bearer.partition(" ")[2] if isinstance(bearer, str) and " " in bearer else bearer
            authorized = check_auth(state, ws, first.get("xi-api-key"), first.get("xi_api_key"),
                                    token if isinstance(token, str) else None)
    if not authorized:
        state.metrics.errors.labels("unauthorized").inc()
        await _refuse(ws, "unauthorized", "missing or invalid API key (xi-api-key header, query or first message, "
                                          "or Authorization: Bearer)", 4001)
        return
    try:
        fmt = OutputFormat(ws.query_params.get("output_format") or DEFAULT_OUTPUT_FORMAT)
        state.config.aliases.resolve_model(ws.query_params.get("model_id"), state.engine.info.name)
        info = state.engine.info
        voice = state.config.aliases.resolve_voice(ws.path_params["voice_id"], info.voices, info.default_voice)
    except FormatError as exc:
        await _refuse(ws, "invalid_output_format", str(exc), CLOSE_POLICY)
        return
    except AliasError as exc:
        await _refuse(ws, exc.code, exc.message, CLOSE_POLICY)
        return
    async with session_slot(state) as admitted:
        if not admitted:
            await _refuse(ws, "server_busy", "server at capacity, retry later", 4029)
            return
        adapter = ElevenLabsAdapter(ws, state, voice, fmt, multi=multi)
        adapter.start()
        if isinstance(first, dict):
            adapter.handle(first)
        await run_adapter(ws, state, adapter.link, adapter.read, adapter.outbox)


async def _refuse(ws: WebSocket, code: str, message: str, close_code: int) -> None:
    try:
        await ws.send_text(json.dumps({"message": message, "error": code, "code": code}))
        await ws.close(close_code, message[:120])
    except Exception:  # noqa: BLE001 (already gone)
        pass


async def stream_input(ws: WebSocket) -> None:
    await _endpoint(ws, multi=False)


async def multi_stream_input(ws: WebSocket) -> None:
    await _endpoint(ws, multi=True)
