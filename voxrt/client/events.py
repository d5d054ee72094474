"""Server -> client messages of voxrt.v1 as typed records, and their parser (sans I/O).

One frozen dataclass per server message (protocol.md, "Server -> client"), plus `AudioFrame` for a binary
frame (built from the header that `voxrt.protocol.frames.decode_audio_frame` reads). `parse_server_message` turns one
JSON text frame into one of them; unknown fields are ignored and an unknown `type` becomes `UnknownEvent`
(a newer server may add messages). A message that breaks the contract raises `VoxrtError`
(`invalid_server_message`, fatal).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Union

from voxrt.client.errors import INVALID_SERVER_MESSAGE, VoxrtError, error_type
from voxrt.protocol.config import Limits, OutputFormat
from voxrt.protocol.frames import AudioFrameHeader


@dataclass(frozen=True)
class SessionStarted:
    session_id: str
    model: str
    voice: str
    output: OutputFormat
    limits: Limits


@dataclass(frozen=True)
class ContextStarted:
    context_id: str
    index: int  # u16, the context's number in binary frame headers


@dataclass(frozen=True)
class AudioFrame:
    """One binary frame: `payload` is exactly one frame of audio in the session's output format."""

    context_id: str
    index: int
    seq: int  # 0, 1, 2, ... without gaps within the context
    pts_ms: int  # start of the frame in the context's audio
    payload: bytes
    is_first: bool
    is_last: bool

    @classmethod
    def from_wire(cls, context_id: str, header: AudioFrameHeader, payload: bytes) -> "AudioFrame":
        return cls(context_id, header.index, header.seq, header.pts_ms, payload, header.is_first, header.is_last)

    def __repr__(self) -> str:  # the payload is noise in a log line
        return (f"AudioFrame(context_id={self.context_id!r}, seq={self.seq}, pts_ms={self.pts_ms}, "
                f"num_payload_bytes={len(self.payload)}, is_first={self.is_first}, is_last={self.is_last})")


@dataclass(frozen=True)
class AlignedSpan:
    """A segment or word: `text` is input[char_start:char_end] of the context; times are of its audio."""

    text: str
    char_start: int
    char_end: int
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class Alignment:
    context_id: str
    segments: tuple[AlignedSpan, ...]
    words: tuple[AlignedSpan, ...] | None
    is_estimated: bool


@dataclass(frozen=True)
class Flushed:
    context_id: str


@dataclass(frozen=True)
class Cancelled:
    context_id: str
    played_ms: int
    spoken_text: str  # the prefix of the context's input heard by played_ms (the server's estimate)


@dataclass(frozen=True)
class ContextDone:
    context_id: str
    reason: str  # completed, cancelled or error
    audio_ms: int
    metrics: Mapping[str, Any] = field(default_factory=dict)  # ttfa_ms, frames, stalls, stall_ms, ...

    @property
    def ttfa_ms(self) -> int | None:
        return self.metrics.get("ttfa_ms")


@dataclass(frozen=True)
class ErrorEvent:
    code: str
    message: str
    is_fatal: bool
    context_id: str | None = None
    retry_after_ms: int | None = None  # with server_busy

    def to_exception(self) -> VoxrtError:
        return error_type(self.code)(self.code, self.message, fatal=self.is_fatal, context_id=self.context_id,
                                     retry_after_ms=self.retry_after_ms)


@dataclass(frozen=True)
class Pong:
    id: str | int | None
    server_time_ms: int


@dataclass(frozen=True)
class UnknownEvent:
    """A message of a type this client does not know; kept whole so nothing is silently lost."""

    type: str
    data: Mapping[str, Any]


ServerEvent = Union[SessionStarted, ContextStarted, Alignment, Flushed, Cancelled, ContextDone, ErrorEvent, Pong,
                    UnknownEvent]
ContextEvent = Union[AudioFrame, Alignment, Flushed, ContextDone]  # what `Context.events()` yields


# ---- parsing -----------------------------------------------------------------------------------------------------


def _bad(message: str) -> VoxrtError:
    return VoxrtError(INVALID_SERVER_MESSAGE, message, fatal=True)


class _Reader:
    """Typed field access on one message; a missing or mistyped field names the message type and field."""

    def __init__(self, obj: dict, message_type: str) -> None:
        self.obj, self.message_type = obj, message_type

    def get(self, name: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
        value = self.obj.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise _bad(f"{self.message_type}: field {name!r} must be {_kind_name(kind)}, got {value!r:.60}")
        return value

    def ms(self, name: str, *, optional: bool = False) -> int | None:
        value = self.get(name, (int, float), optional=optional)
        return None if value is None else int(round(value))


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _spans(r: _Reader, name: str, text_key: str) -> tuple[AlignedSpan, ...]:
    items = r.get(name, list)
    spans = []
    for item in items:
        ir = _Reader(item if isinstance(item, dict) else {}, f"{r.message_type}.{name}")
        spans.append(AlignedSpan(ir.get(text_key, str), ir.get("char_start", int), ir.get("char_end", int),
                                 ir.ms("start_ms"), ir.ms("end_ms")))
    return tuple(spans)


def _session_started(r: _Reader) -> SessionStarted:
    output, limits = r.get("output", dict), r.get("limits", dict)
    try:
        fmt = OutputFormat(output["codec"], output["sample_rate"], output["frame_ms"])
        known = {k: limits[k] for k in ("max_contexts", "max_text_chars", "max_message_bytes",
                                        "inactivity_timeout_s") if k in limits}
        resolved_limits = Limits(**known)
    except (KeyError, ValueError, TypeError) as error:
        raise _bad(f"session.started: bad output or limits: {error}") from None
    return SessionStarted(r.get("session_id", str), r.get("model", str), r.get("voice", str), fmt, resolved_limits)


def _alignment(r: _Reader) -> Alignment:
    words = _spans(r, "words", "word") if r.obj.get("words") is not None else None
    return Alignment(r.get("context_id", str), _spans(r, "segments", "text"), words,
                     bool(r.obj.get("estimated", False)))


def _context_done(r: _Reader) -> ContextDone:
    metrics = r.get("metrics", dict, optional=True) or {}
    return ContextDone(r.get("context_id", str), r.get("reason", str), r.ms("audio_ms"), MappingProxyType(metrics))


def _error(r: _Reader) -> ErrorEvent:
    return ErrorEvent(r.get("code", str), r.get("message", str), bool(r.obj.get("fatal", False)),
                      r.get("context_id", str, optional=True), r.ms("retry_after_ms", optional=True))


_PARSERS: dict[str, Callable[[_Reader], ServerEvent]] = {
    "session.started": _session_started,
    "context.started": lambda r: ContextStarted(r.get("context_id", str), r.get("index", int)),
    "alignment": _alignment,
    "flushed": lambda r: Flushed(r.get("context_id", str)),
    "cancelled": lambda r: Cancelled(r.get("context_id", str), r.ms("played_ms"), r.get("spoken_text", str)),
    "context.done": _context_done,
    "error": _error,
    "pong": lambda r: Pong(r.get("id", (str, int), optional=True), r.ms("server_time_ms")),
}


def parse_server_message(data: str) -> ServerEvent:
    """One JSON text frame from the server -> one typed event."""
    try:
        obj = json.loads(data)
    except ValueError:
        raise _bad(f"not JSON: {data!r:.60}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise _bad(f"a message must be a JSON object with a string 'type': {data!r:.60}")
    parser = _PARSERS.get(obj["type"])
    if parser is None:
        return UnknownEvent(obj["type"], MappingProxyType(obj))
    return parser(_Reader(obj, obj["type"]))
