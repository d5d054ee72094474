"""The server -> client JSON messages of voxrt.v1 (protocol.md, "Server -> client") as typed events, and the one
encoder that turns any of them into its text frame.

The session (session.py) and the gateway's contexts build these; `encode_event` writes the wire text once,
and an in-process consumer (a compat adapter, gateway/compat/bridge.py) reads `to_wire()`'s dict instead of
parsing that text again. `to_wire()` is exactly what the client's `json.loads` gives back: the protocol's
fields, millisecond values as ints, non-finite metrics as None, lists not tuples.

Values are checked when the event is built (a `context.done` reason outside DONE_REASONS, a non-finite
`played_ms`), so a bad value fails where it was made, as the `encode_*` functions did.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

from voxrt.protocol.config import Limits, OutputFormat

DONE_REASONS = ("completed", "cancelled", "error")


def _dumps(message: dict) -> str:
    # allow_nan=False: NaN is not JSON (RFC 8259 section 6); the events below map it to null first.
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _ms(value: float) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"a millisecond value must be a finite number, got {value!r}")
    return int(round(value))


def _metric(name: str, value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if name.endswith("_ms") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(round(value))
    return value


def _span(item: dict, text_key: str) -> dict:
    return {text_key: item[text_key], "char_start": int(item["char_start"]), "char_end": int(item["char_end"]),
            "start_ms": _ms(item["start_ms"]), "end_ms": _ms(item["end_ms"])}


@dataclass(frozen=True)
class SessionStarted:
    TYPE: ClassVar[str] = "session.started"
    session_id: str
    model: str
    voice: str
    output: OutputFormat
    limits: Limits

    def to_wire(self) -> dict:
        return {"type": self.TYPE, "session_id": self.session_id, "model": self.model, "voice": self.voice,
                "output": self.output.to_wire(), "limits": self.limits.to_wire()}


@dataclass(frozen=True)
class ContextStarted:
    TYPE: ClassVar[str] = "context.started"
    context_id: str
    index: int

    def to_wire(self) -> dict:
        return {"type": self.TYPE, "context_id": self.context_id, "index": self.index}


@dataclass(frozen=True)
class Alignment:
    """`segments` / `words`: dicts with at least the protocol's keys (extra keys are dropped, ms rounded, when
    the event is built). `words` None: the field is absent."""
    TYPE: ClassVar[str] = "alignment"
    context_id: str
    segments: list[dict]
    words: list[dict] | None = None
    estimated: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "segments", [_span(s, "text") for s in self.segments])
        if self.words is not None:
            object.__setattr__(self, "words", [_span(w, "word") for w in self.words])
        object.__setattr__(self, "estimated", bool(self.estimated))

    def to_wire(self) -> dict:
        message: dict[str, Any] = {"type": self.TYPE, "context_id": self.context_id,
                                   "segments": [dict(s) for s in self.segments]}
        if self.words is not None:
            message["words"] = [dict(w) for w in self.words]
        message["estimated"] = self.estimated
        return message


@dataclass(frozen=True)
class Flushed:
    TYPE: ClassVar[str] = "flushed"
    context_id: str

    def to_wire(self) -> dict:
        return {"type": self.TYPE, "context_id": self.context_id}


@dataclass(frozen=True)
class Cancelled:
    TYPE: ClassVar[str] = "cancelled"
    context_id: str
    played_ms: float
    spoken_text: str

    def __post_init__(self) -> None:
        _ms(self.played_ms)

    def to_wire(self) -> dict:
        return {"type": self.TYPE, "context_id": self.context_id, "played_ms": _ms(self.played_ms),
                "spoken_text": self.spoken_text}


@dataclass(frozen=True)
class ContextDone:
    """`metrics` always carries `ttfa_ms` on the wire (null when no audio was sent); `*_ms` values are rounded to
    ints and non-finite floats become null."""
    TYPE: ClassVar[str] = "context.done"
    context_id: str
    reason: str
    audio_ms: float
    metrics: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.reason not in DONE_REASONS:
            raise ValueError(f"reason must be one of {', '.join(DONE_REASONS)}, got {self.reason!r}")
        _ms(self.audio_ms)

    def to_wire(self) -> dict:
        metrics = {"ttfa_ms": None, **self.metrics}
        return {"type": self.TYPE, "context_id": self.context_id, "reason": self.reason,
                "audio_ms": _ms(self.audio_ms), "metrics": {name: _metric(name, value) for name, value in metrics.items()}}


@dataclass(frozen=True)
class Error:
    """`extra`: further fields such as `retry_after_ms` (rounded like every `*_ms`)."""
    TYPE: ClassVar[str] = "error"
    code: str
    message: str
    fatal: bool
    context_id: str | None = None
    extra: dict = field(default_factory=dict)

    def to_wire(self) -> dict:
        wire: dict[str, Any] = {"type": self.TYPE, "code": self.code, "message": self.message,
                                "fatal": bool(self.fatal)}
        if self.context_id is not None:
            wire["context_id"] = self.context_id
        for name, value in self.extra.items():
            wire[name] = _metric(name, value)
        return wire


@dataclass(frozen=True)
class Pong:
    TYPE: ClassVar[str] = "pong"
    id: str | int | None  # noqa: A003 - the protocol's field name
    server_time_ms: float

    def __post_init__(self) -> None:
        _ms(self.server_time_ms)

    def to_wire(self) -> dict:
        return {"type": self.TYPE, "id": self.id, "server_time_ms": _ms(self.server_time_ms)}


ServerEvent = Union[SessionStarted, ContextStarted, Alignment, Flushed, Cancelled, ContextDone, Error, Pong]
SERVER_EVENT_TYPES = tuple(cls.TYPE for cls in (SessionStarted, ContextStarted, Alignment, Flushed, Cancelled,
                                                ContextDone, Error, Pong))


def encode_event(event: ServerEvent) -> str:
    """The event's JSON text frame: compact, UTF-8 as is (no \\u escapes), no NaN."""
    return _dumps(event.to_wire())
