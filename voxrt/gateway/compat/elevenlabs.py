"""ElevenLabs-compatible text-to-speech WebSockets: `/v1/text-to-speech/{voice_id}/stream-input` and
`/v1/text-to-speech/{voice_id}/multi-stream-input`, translated onto the native session (bridge.py).

Client messages (ElevenLabs' published shapes): the initial `{"text": " ", "voice_settings", "generation_config",
"xi-api-key"?, "authorization"?}`, `{"text": "...", "try_trigger_generation"?, "flush"?}`, and `{"text": ""}`
to finish (stream-input: then the socket closes, as theirs does). Multi-context adds `context_id` to each and
`{"context_id", "flush": true}`, `{"context_id", "close_context": true}` (a flush under way finishes, else a
hard stop: barge-in),
`{"context_id", "text": ""}` (keep-alive) and `{"close_socket": true}`. Replies: `{"audio": base64,
"isFinal": false, "normalizedAlignment", "alignment"}` per chunk (multi: with `contextId`) and `{"isFinal":
true}` when a context is done; alignment rides on the audio message of its chunk (`_on_frame`). `output_format`
(query): pcm_8000/16000/22050/24000/44100/48000 (22050 and 44100 resampled from 48000), ulaw_8000, alaw_8000,
mp3_<rate>_<kbps> (re-encoded with PyAV), opus_48000_<kbps> (Ogg Opus); `inactivity_timeout` (query, default
20 s, max 180: ElevenLabs' `input_timeout_exceeded` and close 1008). A closed multi-context id may be used
again (a fresh native context). docs/compat-elevenlabs.md says what differs (speech starts at the first word,
so `chunk_length_schedule` and `try_trigger_generation` change nothing; contexts never close the socket).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import re

from starlette.websockets import WebSocket, WebSocketDisconnect

from voxrt.audio import OggOpusWriter
from voxrt.audio.pcm import pcm16_decode, pcm16_encode
from voxrt.audio.resample import StreamResampler
from voxrt.gateway.compat.av_codec import ContainerEncoder
from voxrt.gateway.compat.aliases import AliasError
from voxrt.gateway.compat.bridge import NativeLink, Outbox, check_auth, run_adapter, session_slot, unknown_event
from voxrt.protocol.errors import INACTIVITY_TIMEOUT, close_reason
from voxrt.protocol.frames import AudioFrameHeader
from voxrt.protocol.server_events import (Alignment, Cancelled, ContextDone, ContextStarted, Error, Flushed, Pong,
                                          ServerEvent, SessionStarted)

log = logging.getLogger("voxrt.gateway.compat.elevenlabs")

DEFAULT_CONTEXT = "default"  # the context of stream-input, and of multi-stream messages without context_id
DEFAULT_OUTPUT_FORMAT = "mp3_44100_128"  # ElevenLabs' default
CLOSE_POLICY = 1008  # their close code for a refused request (and for their inactivity timeout)
DEFAULT_INACTIVITY_TIMEOUT_S = 20  # ElevenLabs' `inactivity_timeout` default ...
MAX_INACTIVITY_TIMEOUT_S = 180  # ... and its maximum
INPUT_TIMEOUT = "input_timeout_exceeded"  # ElevenLabs' error for it (with code 1008 and close 1008)
NATIVE_PCM_RATES = (8000, 16000, 24000, 48000)  # PCM rates the native session serves; others are resampled
# Event-loop turns a context's audio waits in the adapter for its chunk's alignment (see `_on_frame`): the native
# session sends a chunk's `alignment` event right after the chunk's frames, one turn later; the rest is slack.
RELEASE_TURNS = 4


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
        if self.kind == "pcm" and self.rate not in (8000, 16000, 22050, 24000, 44100, 48000):
            raise FormatError(f"{name}: PCM is served at 8000, 16000, 22050, 24000, 44100 or 48000 Hz")
        if self.kind in ("ulaw", "alaw") and self.rate != 8000:
            raise FormatError(f"{name}: G.711 is 8000 Hz")
        if self.kind == "opus" and self.rate != 48000:
            raise FormatError(f"{name}: Opus is served at 48000 Hz")
        if self.kind == "mp3" and self.rate not in (22050, 24000, 44100, 48000):
            raise FormatError(f"{name}: MP3 is served at 22050, 24000, 44100 or 48000 Hz")

    def native_output(self) -> dict:
        codec = {"pcm": "pcm16", "ulaw": "mulaw", "alaw": "alaw", "opus": "opus", "mp3": "pcm16"}[self.kind]
        if self.kind == "mp3":
            rate = 24000 if self.rate <= 24000 else 48000
        elif self.kind == "pcm" and self.rate not in NATIVE_PCM_RATES:
            rate = 48000  # pcm_22050 / pcm_44100: resampled here (ContextAudio)
        else:
            rate = self.rate
        return {"codec": codec, "sample_rate": rate, "frame_ms": 20}


class ContextAudio:
    """One context's audio on its way out: native frames -> this format's bytes (stateful for mp3 and Ogg)."""

    def __init__(self, fmt: OutputFormat, native_rate: int) -> None:
        self.fmt, self.native_rate = fmt, native_rate
        self._mp3 = (ContainerEncoder("mp3", native_rate, out_rate=fmt.rate, bit_rate=(fmt.kbps or 128) * 1000)
                     if fmt.kind == "mp3" else None)
        self._ogg = OggOpusWriter(48000, 20) if fmt.kind == "opus" else None
        self._resampler = (StreamResampler(native_rate, fmt.rate)
                           if fmt.kind == "pcm" and fmt.rate != native_rate else None)
        self._started = False

    def encode(self, payloads: list[bytes], is_last: bool) -> bytes:
        if self._mp3 is not None:
            data = self._mp3.push(pcm16_decode(b"".join(payloads)))
            return data + self._mp3.finish() if is_last else data
        if self._ogg is not None:
            head = b"" if self._started else self._ogg.header_pages()
            self._started = True
            return head + self._ogg.page(payloads, is_last=is_last)
        if self._resampler is not None:
            return pcm16_encode(self._resampler.process_pcm16(b"".join(payloads), last=is_last))
        return b"".join(payloads)


class CharAligner:
    """One context's native alignment (word or segment spans: char offsets into the text sent to the context,
    ms of its audio) as ElevenLabs' per-character timings: every character from the first word on, the spaces
    and punctuation between spans included, so that the characters of all messages joined give the text (less
    the leading whitespace: the initial `" "` is not spoken). Each span's time is spread evenly over its
    characters; the characters between two spans share the gap between them (zero long when there is none).
    Times are absolute (ms of the context's audio) here; `relative` makes them relative to a chunk."""

    def __init__(self) -> None:
        self.done_to = 0  # text offset up to which characters were given out
        self.end_ms: float | None = None  # when the last character given out ends

    def add(self, text: str, spans: list[dict]) -> list[tuple[str, float, float]]:
        out: list[tuple[str, float, float]] = []
        for span in spans:
            first, last = int(span["char_start"]), int(span["char_end"])
            start_ms, end_ms = float(span["start_ms"]), float(span["end_ms"])
            if self.end_ms is None:  # the context's first word: the whitespace before it is not spoken
                self.done_to = max(self.done_to, len(text[:first]) - len(text[:first].lstrip()))
                self.end_ms = start_ms
            first = max(first, self.done_to)
            if last <= first:
                continue
            gap = text[self.done_to:first]
            if gap:
                gap_start = min(self.end_ms, start_ms)
                step = (start_ms - gap_start) / len(gap)
                out.extend((ch, gap_start + i * step, step) for i, ch in enumerate(gap))
            start_ms = max(start_ms, self.end_ms)
            step = max(0.0, end_ms - start_ms) / (last - first)
            out.extend((ch, start_ms + i * step, step) for i, ch in enumerate(text[first:last]))
            self.done_to, self.end_ms = last, max(end_ms, start_ms)
        return out


def relative(chars: list[tuple[str, float, float]], chunk_start_ms: float) -> dict:
    """ElevenLabs' alignment object, times relative to the chunk that starts at `chunk_start_ms` (a character
    that began in an earlier chunk is given 0)."""
    return {"chars": [c for c, _, _ in chars],
            "charStartTimesMs": [max(0, round(start - chunk_start_ms)) for _, start, _ in chars],
            "charDurationsMs": [max(0, round(duration)) for _, _, duration in chars]}


class _Context:
    """One native context of the adapter: the ElevenLabs id it serves, its text, audio and the audio that waits
    for its chunk's alignment."""

    def __init__(self, el_id: str) -> None:
        self.el_id = el_id
        self.text = ""  # what was sent to it (native alignment offsets index it)
        self.audio: ContextAudio | None = None
        self.aligner = CharAligner()
        self.pending: list[tuple] = []  # frames (pts_ms, is_last, payload) not yet handed to the outbox
        self.idle_turns = 0  # loop turns since the last frame came
        self.is_ticking = False
        self.batch = 0  # audio messages handed to the outbox (the outbox key of the last: (native id, batch))
        self.batch_start_ms = 0.0  # where the last one starts in the context's audio


class ElevenLabsAdapter:
    def __init__(self, ws: WebSocket, state, voice: str, fmt: OutputFormat, *, multi: bool,
                 inactivity_timeout_s: float = DEFAULT_INACTIVITY_TIMEOUT_S) -> None:
        self.ws, self.state, self.voice, self.fmt, self.multi = ws, state, voice, fmt, multi
        self.inactivity_timeout_s = inactivity_timeout_s
        self.outbox = Outbox(ws, stall_timeout_s=state.config.limits.inactivity_timeout_s,
                             stall_message=self._error_body)
        self.link = NativeLink(self._on_event, self._on_frame, self._on_close, (self.outbox,))
        self.native_rate = fmt.native_output()["sample_rate"]
        self.contexts: dict[str, _Context] = {}  # native context id -> its state
        self.current: dict[str, str] = {}  # ElevenLabs context id -> the native context it speaks to now
        self.used_ids: set[str] = set()  # native context ids given out (never reused: the native rule)
        self.by_index: dict[int, str] = {}
        self.num_pending_bytes = 0  # audio waiting in the contexts' `pending`
        self.final_sent: set[str] = set()
        self.flushing: set[str] = set()  # native contexts with a flush whose audio is not all out yet
        # multi-context: ElevenLabs ids whose context the server ended with an error (e.g. `server_busy`) while the
        # client had not closed it; their later text (an LLM stream still running) is dropped until the client
        # closes the id, instead of opening a new context that would speak the rest of the turn without its start
        self.failed_ids: set[str] = set()
        self.timed_out = False
        self.input_ended = False  # stream-input: the empty text came; the socket speaks what it has, then closes

    def start(self) -> None:
        self.link.send({"type": "session.start", "voice": self.voice, "output": self.fmt.native_output(),
                        "pacing": {"mode": "burst"}})

    # ---- client -> native ----------------------------------------------------------------------------------

    async def read(self) -> None:
        while True:
            await self.link.wait_room()  # backpressure: the peer's next message once the last ones are taken
            data = await receive_message(self.ws)
            if data is None:
                return
            if isinstance(data, bytes):  # the API is JSON text; a binary frame is bad input, not the end
                self._error("invalid_message", "binary WebSocket frames are not accepted: send JSON text messages")
                continue
            try:
                message = json.loads(data)
            except (ValueError, RecursionError):  # RecursionError: '[[[[...' nested past the parser
                self._error("invalid_json", "message is not valid JSON")
                continue
            if not isinstance(message, dict):
                self._error("invalid_json", "message must be a JSON object")
                continue
            try:
                if not self.handle(message):
                    return
            except Exception:  # noqa: BLE001 (a message of a shape no check foresaw: its error, not the socket's end)
                log.warning("elevenlabs adapter: a message failed", exc_info=True)
                self._error("invalid_message", "this message could not be read: check its fields' types against "
                                               "ElevenLabs' API")

    def _native_id(self, el_id: str, *, create: bool) -> str | None:
        """The native context an ElevenLabs id speaks to; with `create`, a fresh one when the id is new or its
        last context was closed (ElevenLabs lets a closed id be used again; native ids are never reused)."""
        native = self.current.get(el_id)
        if native is not None or not create:
            return native
        native, n = el_id, 1
        while native in self.used_ids:
            n += 1
            native = f"{el_id[:200]}#{n}"
        self.used_ids.add(native)
        self.current[el_id] = native
        self.contexts[native] = _Context(el_id)
        return native

    def _retire(self, el_id: str, native: str) -> None:
        """`el_id`'s next message opens a new native context (its last one was closed or is done)."""
        if self.current.get(el_id) == native:
            del self.current[el_id]

    def handle(self, message: dict) -> bool:
        """One client message; False when the socket is to end (after what is queued)."""
        if self.input_ended:
            # ElevenLabs' stream-input takes no text after its end-of-input message. Answered here, not
            # forwarded: the native session would count each as a bad message and close the socket 4400 after
            # 20 of them, before the audio still owed had gone out.
            if message.get("text") != "":
                self._error("invalid_message", "the input has ended (an empty text was sent): this socket speaks "
                                               "the text it has, then closes; open a new one for more")
            return True
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
            # Either way the id may be used again, for a new context.
            self.failed_ids.discard(context_id)
            native = self._native_id(context_id, create=False)
            if native is None:
                return True  # nothing open under that id (as ElevenLabs', nothing to say)
            self._retire(context_id, native)
            if native in self.flushing:
                self.link.send({"type": "context.end", "context_id": native})
            else:
                self.link.send({"type": "cancel", "context_id": native})
            return True
        text = message.get("text")
        if text is not None and not isinstance(text, str):
            self._error("invalid_message", "text must be a string", context_id)
            return True
        flush = message.get("flush") is True
        if context_id in self.failed_ids and (text or flush):
            return True  # its error and isFinal went out; the rest of that turn is dropped (`failed_ids`)
        native = self._native_id(context_id, create=bool(text))
        if text == "" and not flush:
            if self.multi:  # keep-alive: resets the inactivity timer
                self.link.send({"type": "ping"})
            elif native is not None:  # end of input: finish speaking, then isFinal and close
                self.input_ended = True
                self.link.send({"type": "context.end", "context_id": native})
            else:
                self.input_ended = True
                self.link.send({"type": "session.end"})
            return True
        if text:
            self.final_sent.discard(native)
            self.contexts[native].text += text
            self.link.send({"type": "text", "context_id": native, "text": text})
        if flush and native is not None:
            self.flushing.add(native)
            self.link.send({"type": "flush", "context_id": native})
        return True

    # ---- native -> client ----------------------------------------------------------------------------------

    async def _on_event(self, event: ServerEvent) -> None:
        match event:
            case ContextStarted(context_id=native, index=index):
                self.by_index[index] = native
                context = self.contexts.get(native)
                if context is not None:
                    context.audio = ContextAudio(self.fmt, self.native_rate)
            case Alignment(context_id=native):
                context = self.contexts.get(native)
                if context is not None:
                    chars = context.aligner.add(context.text, event.words or event.segments)
                    self._release(native, chars)
            case Flushed(context_id=native):
                self._release(native)
                self.flushing.discard(native)
                if self.multi:
                    self._final(native)
            case ContextDone(context_id=native, reason=reason):
                self._release(native)
                self._final(native)
                context = self.contexts.get(native)
                if context is not None and self.multi:  # its id may be used again, for a new context
                    if reason == "error" and self.current.get(context.el_id) == native:  # not closed by the client
                        self.failed_ids.add(context.el_id)
                    self._retire(context.el_id, native)
                self.outbox.call(lambda: self._forget(native))  # after its queued frames went out
                if not self.multi:  # stream-input: one generation per socket, as ElevenLabs'
                    self.outbox.close(1000, "done")
            case Error(code=code, message=message, context_id=native):
                if native is not None:
                    self._release(native)
                if code == INACTIVITY_TIMEOUT and native is None:  # the session's: ElevenLabs' own words
                    self.timed_out = True
                    self.outbox.json(self._timeout_body(self.inactivity_timeout_s))
                else:
                    context = self.contexts.get(native) if native is not None else None
                    self._error(code, message, context.el_id if context is not None else native)
            case Cancelled(context_id=native):
                self._release(native)  # isFinal follows, with its context.done
            case SessionStarted() | Pong():
                pass  # nothing to say in ElevenLabs' terms
            case _:
                unknown_event("elevenlabs", event)

    async def _on_frame(self, header: AudioFrameHeader, payload: bytes) -> None:
        """A chunk's frames wait here for the chunk's alignment, so that it rides on their audio message: the
        native session sends a chunk's `alignment` right after its frames (context.py's `_on_chunk`: the events
        that follow a chunk's audio), so the frames go to the outbox with it (`_release`), or alone when
        RELEASE_TURNS loop turns passed with no further frame of the context and no alignment (a chunk that
        voiced no word), or when the context's next event comes."""
        native = self.by_index.get(header.index)
        context = self.contexts.get(native) if native is not None else None
        if context is None:
            return
        context.pending.append((header.pts_ms, header.is_last, payload))
        context.idle_turns = 0
        self.num_pending_bytes += len(payload)
        if self.outbox.num_queued_bytes + self.num_pending_bytes > self.outbox.max_queued_bytes:
            # the frames that wait here count toward the outbox's bound (bridge.py: the link's send waits for
            # room, so the native session holds back as on a slow socket): at the bound they go now, and a
            # chunk's alignment may then come after its audio (`_release`)
            for native_id in [n for n, c in self.contexts.items() if c.pending]:
                self._release(native_id)
            return
        if not context.is_ticking:
            context.is_ticking = True
            asyncio.get_running_loop().call_soon(self._tick, native)

    def _tick(self, native: str) -> None:
        context = self.contexts.get(native)
        if context is None:
            return
        if not context.pending:
            context.is_ticking = False
            return
        context.idle_turns += 1
        if context.idle_turns >= RELEASE_TURNS:
            context.is_ticking = False
            self._release(native)
        else:
            asyncio.get_running_loop().call_soon(self._tick, native)

    def _release(self, native: str, chars: list | None = None) -> None:
        """The context's waiting frames to the outbox as one audio message, with `chars` (its alignment) on it;
        `chars` with no frames waiting (their audio went already): they ride on the last audio message if the
        writer has not built it yet, else go alone, times relative to that message's chunk all the same."""
        context = self.contexts.get(native)
        if context is None:
            return
        frames, context.pending = context.pending, []
        self.num_pending_bytes -= sum(len(frame[2]) for frame in frames)
        if frames:
            context.batch += 1
            context.batch_start_ms = frames[0][0]
            key = (native, context.batch)
            for frame in frames:
                self.outbox.frame(key, frame, self._audio_message, len(frame[2]))
        if chars:
            key = (native, context.batch)
            alone = None if frames else self._alignment_alone(context, chars)
            self.outbox.attach(key, {"chars": chars}, alone)

    def _audio_message(self, key: tuple[str, int], payloads: list, extras: list[dict]) -> dict | None:
        native = key[0]
        context = self.contexts.get(native)
        if context is None or context.audio is None:
            return None
        data = context.audio.encode([p for _, _, p in payloads], is_last=payloads[-1][1])
        message: dict = {"audio": base64.b64encode(data).decode(), "isFinal": False}
        chars = [c for extra in extras for c in extra["chars"]]
        alignment = relative(chars, payloads[0][0]) if chars else None
        message["normalizedAlignment"] = alignment
        message["alignment"] = alignment
        if self.multi:
            message["contextId"] = context.el_id
        return message if data or alignment else None

    def _alignment_alone(self, context: _Context, chars: list) -> dict:
        alignment = relative(chars, context.batch_start_ms)
        message: dict = {"audio": "", "isFinal": False, "normalizedAlignment": alignment, "alignment": alignment}
        if self.multi:
            message["contextId"] = context.el_id
        return message

    def _forget(self, native: str) -> None:
        self.flushing.discard(native)
        self.final_sent.discard(native)
        self.contexts.pop(native, None)

    def _final(self, native: str | None) -> None:
        if native is None or native in self.final_sent or native not in self.contexts:
            return
        self.final_sent.add(native)
        el_id = self.contexts[native].el_id
        self.outbox.json({"isFinal": True, "contextId": el_id} if self.multi else {"isFinal": True})

    def _error(self, code: str, message: str, context_id: str | None = None) -> None:
        self.outbox.json(self._error_body(code, message, context_id))

    def _error_body(self, code: str, message: str, context_id: str | None = None) -> dict:
        body = {"message": message, "error": code, "code": code}
        if self.multi and context_id is not None:
            body["contextId"] = context_id
        return body

    @staticmethod
    def _timeout_body(timeout_s: float) -> dict:
        return timeout_body(f"Have not received a new text input within the timeout of {timeout_s:.1f} seconds. "
                            f"Send text or a keep-alive to keep the connection open (inactivity_timeout, max "
                            f"{MAX_INACTIVITY_TIMEOUT_S}).")

    async def _on_close(self, code: int, reason: str) -> None:
        for native in list(self.contexts):
            self._release(native)
        if self.timed_out:  # ElevenLabs closes an idle socket with 1008
            code, reason = CLOSE_POLICY, INPUT_TIMEOUT
        self.outbox.close(code, reason)


def timeout_body(message: str) -> dict:
    """ElevenLabs' inactivity error as they send it: `code` is the close code, an integer."""
    return {"message": message, "error": INPUT_TIMEOUT, "code": CLOSE_POLICY}


async def receive_message(ws: WebSocket) -> str | bytes | None:
    """The peer's next message: its text, or bytes for a binary frame; None once it is gone."""
    try:
        message = await ws.receive()
    except (WebSocketDisconnect, RuntimeError):
        return None
    if message["type"] != "websocket.receive":
        return None
    if message.get("text") is not None:
        return message["text"]
    return message.get("bytes") or b""


def parse_inactivity_timeout(value: str | None) -> int:
    """ElevenLabs' `inactivity_timeout` query: whole seconds, default 20, at most 180."""
    if value is None or value == "":
        return DEFAULT_INACTIVITY_TIMEOUT_S
    try:
        seconds = int(value)
    except (ValueError, RecursionError):  # RecursionError: '[[[[...' nested past the parser
        seconds = 0
    if not 1 <= seconds <= MAX_INACTIVITY_TIMEOUT_S:
        raise ValueError(f"inactivity_timeout must be a whole number of seconds from 1 to "
                         f"{MAX_INACTIVITY_TIMEOUT_S} (default {DEFAULT_INACTIVITY_TIMEOUT_S}), got {value[:40]!r}")
    return seconds


async def _endpoint(ws: WebSocket, *, multi: bool) -> None:
    state = ws.app.state.voxrt
    await ws.accept()
    first = None
    try:
        inactivity_timeout_s = parse_inactivity_timeout(ws.query_params.get("inactivity_timeout"))
        timeout_error = None
    except ValueError as exc:
        inactivity_timeout_s, timeout_error = DEFAULT_INACTIVITY_TIMEOUT_S, str(exc)
    bearer = ws.query_params.get("authorization")  # ElevenLabs' query `authorization`: "Bearer KEY"
    authorized = check_auth(state, ws, ws.headers.get("xi-api-key"), ws.query_params.get("xi-api-key"),
                            ws.query_params.get("xi_api_key"), _bearer_token(bearer))
    if not authorized:  # ElevenLabs also takes the key in the first message: waited for as long as for text
        try:
            data = await asyncio.wait_for(receive_message(ws), inactivity_timeout_s)
        except asyncio.TimeoutError:
            state.metrics.errors.labels(INPUT_TIMEOUT).inc()
            await _refuse_body(ws, timeout_body(f"no message within {inactivity_timeout_s} s, and no API key "
                                                f"(xi-api-key header, query or first message, or authorization)"),
                               CLOSE_POLICY, INPUT_TIMEOUT)
            return
        try:
            first = json.loads(data) if isinstance(data, str) else None
        except (ValueError, RecursionError):  # RecursionError: '[[[[...' nested past the parser
            first = None
        if isinstance(first, dict):
            authorized = check_auth(state, ws, first.get("xi-api-key"), first.get("xi_api_key"),
                                    _bearer_token(first.get("authorization")))
    if not authorized:
        state.metrics.errors.labels("unauthorized").inc()
        await _refuse(ws, "unauthorized", "missing or invalid API key (xi-api-key header, query or first message, "
                                          "or authorization: Bearer)", 4001)
        return
    if timeout_error is not None:
        await _refuse(ws, "invalid_inactivity_timeout", timeout_error, CLOSE_POLICY)
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
        adapter = ElevenLabsAdapter(ws, state, voice, fmt, multi=multi, inactivity_timeout_s=inactivity_timeout_s)
        adapter.start()
        if isinstance(first, dict):
            adapter.handle(first)
        limits = dataclasses.replace(state.config.limits, inactivity_timeout_s=float(inactivity_timeout_s),
                                     start_timeout_s=float(inactivity_timeout_s))
        await run_adapter(ws, state, adapter.link, adapter.read, adapter.outbox, limits=limits)


def _bearer_token(value) -> str | None:
    """"Bearer KEY" (or a bare KEY) -> KEY."""
    if not isinstance(value, str):
        return None
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if token and scheme.lower() == "bearer" else value.strip() or None


async def _refuse(ws: WebSocket, code: str, message: str, close_code: int) -> None:
    await _refuse_body(ws, {"message": message, "error": code, "code": code}, close_code, message)


async def _refuse_body(ws: WebSocket, body: dict, close_code: int, reason: str) -> None:
    try:
        await ws.send_text(json.dumps(body))
        await ws.close(close_code, close_reason(reason))
    except Exception:  # noqa: BLE001 (already gone)
        pass


async def stream_input(ws: WebSocket) -> None:
    await _endpoint(ws, multi=False)


async def multi_stream_input(ws: WebSocket) -> None:
    await _endpoint(ws, multi=True)
